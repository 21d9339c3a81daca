// Reads a job file: TOML → Job, with `--set section.key=value` overrides on top, defaults filled
// in, and every problem reported at once with file, line and column.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/job/diagnostics.h"
#include "common/job/job.h"

namespace shardtune::job {

// Where each field's value came from, by dotted key ("train.lr"); absent: the default.
using FieldSources = std::map<std::string, SourcePos>;

struct LoadedJob {
  Job job;
  Diagnostics diagnostics;
  FieldSources sources;
};

// Precedence: overrides > the text > defaults. `file` names the text in diagnostics.
LoadedJob parse_job(std::string_view text, const std::string& file,
                    const std::vector<std::string>& overrides = {});

// Reads the file first; a file that cannot be read is a diagnostic too.
LoadedJob load_job_file(const std::string& path, const std::vector<std::string>& overrides = {});

// load_job_file, throwing JobError when there is any error. Warnings are left in `warnings`.
Job load_job_or_throw(const std::string& path, const std::vector<std::string>& overrides = {},
                      Diagnostics* warnings = nullptr);

}  // namespace shardtune::job
