// Defaults that depend on other fields, and the checks that involve more than one field.
#pragma once

#include <string>

#include "common/job/diagnostics.h"
#include "common/job/job.h"
#include "common/job/job_loader.h"

namespace shardtune::job {

// Fills the defaults that depend on other fields (output_dir, checkpoint.dir, ...).
void resolve_defaults(Job& job);

// Required fields and cross-field conflicts, reported at the position of the fields involved.
void check_job(const Job& job, const FieldSources& sources, const std::string& file, Diagnostics& diags);

}  // namespace shardtune::job
