// Job → text: the resolved job file (every field, defaults filled in) and the reference page.
#pragma once

#include <string>

#include "common/job/job.h"

namespace shardtune::job {

// A complete TOML job file that parses back to the same job.
std::string to_toml(const Job& job);

// docs/job-file.md, generated from the schema so the reference never drifts from the code.
std::string schema_markdown();

}  // namespace shardtune::job
