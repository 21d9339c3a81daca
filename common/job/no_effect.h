// Keys that other keys make meaningless, one rule each: the job checks warn about a key given a
// value of its own under such a rule (nobody should believe it took effect), and the job-file
// reference page lists the rules.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/job/job.h"

namespace shardtune::job {

struct NoEffectRule {
  std::string key;   // "train.warmup_steps"
  std::string when;  // the condition, as the reference page states it
  // Why the key does nothing in this job, or nullopt when it does something.
  std::function<std::optional<std::string>(const Job&)> because;
};

const std::vector<NoEffectRule>& no_effect_rules();

}  // namespace shardtune::job
