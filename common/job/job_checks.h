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

// What the bounds of some keys depend on: the model's config.json.
struct ModelFacts {
  std::string source;  // where the facts come from, for the messages ("/models/x/config.json")
  int64_t num_hidden_layers = 0;
};

// The checks that need the model's shape (num_freeze_layers against its blocks): run by the
// launcher when it can read the model's config.json, and by every rank before training.
void check_against_model(const Job& job, const ModelFacts& model, const FieldSources& sources, const std::string& file,
                         Diagnostics& diags);

// The checks of what the job names on disk that only a fresh start can make (a requeued start
// resumes its own checkpoints, whatever became of these): [checkpoint] resume's folder. Run by
// the launcher (validate, run, submit), never by the ranks.
void check_launch_paths(const Job& job, const FieldSources& sources, const std::string& file, Diagnostics& diags);

}  // namespace shardtune::job
