// [[data.sources]]: several data files mixed by weight. Each entry is a table of its own keys
// (name, weight) and of the [data] keys that describe one file (source_keys()); the [data] keys
// it does not set are [data]'s. Read after [data], checked, and written back by the job writer.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "common/job/diagnostics.h"
#include "common/job/job.h"
#include "common/job/job_loader.h"
#include "common/job/no_effect.h"

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

// A [data] rule of no_effect.h for [data]'s own value when the job has sources. A key a source may
// set is the default of the sources that do not set it; the others ([data] long_examples) reach
// every source. The value has no effect when some source takes it and none of those reads it: the
// reason, naming a source; else nullopt (also where every source sets its own, as in a resolved
// job file, which spells out each source's keys).
std::optional<std::string> no_effect_on_sources(const Job& job, const FieldSources& sources,
                                                const NoEffectRule& rule);

// The [[data.sources]] tables of `job`, as the job writer prints them (empty without sources).
std::string data_sources_toml(const Job& job);

// The reference page's part on [[data.sources]].
std::string data_sources_markdown();

}  // namespace shardtune::job
