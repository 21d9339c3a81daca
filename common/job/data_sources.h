// [[data.sources]]: several data files mixed by weight. Each entry is a table of its own keys
// (name, weight) and of the [data] keys that describe one file (source_keys()); the [data] keys
// it does not set are [data]'s. Read after [data], checked, and written back by the job writer.
#pragma once

#include <string>
#include <vector>

#include <toml++/toml.h>

#include "common/job/diagnostics.h"
#include "common/job/job.h"
#include "common/job/job_loader.h"

namespace shardtune::job {

// The [data] keys a source may set; the others ([data] tokenizer, long_examples,
// samples_per_epoch) are the job's.
const std::vector<std::string>& source_keys();

// Reads `node` ([data] sources, an array of tables) into job.data_sources, each source starting
// from job.data. Positions go to `sources` as "data.sources[N].key" (N from 1); problems to `diags`.
void read_data_sources(const toml::node& node, const std::string& file, Job& job, FieldSources& sources,
                       Diagnostics& diags);

// The rules of several sources: weights, names, files, formats that go together, keys of one
// format on another. Reported at the source's key.
void check_data_sources(const Job& job, const FieldSources& sources, const std::string& file, Diagnostics& diags);

// The [[data.sources]] tables of `job`, as the job writer prints them (empty without sources).
std::string data_sources_toml(const Job& job);

// The reference page's part on [[data.sources]].
std::string data_sources_markdown();

}  // namespace shardtune::job
