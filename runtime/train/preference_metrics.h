// What DPO reports for a step or a validation, under TRL's names (rewards/chosen, ...), each a mean
// over the pairs of the global batch or of the validation set.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace shardtune::train {

struct PreferenceMetrics {
  double rewards_chosen = 0;    // beta (policy - reference) log-probability of the chosen answer
  double rewards_rejected = 0;  // the same of the rejected one
  double rewards_accuracies = 0;  // the share of pairs whose chosen reward is the higher
  double rewards_margins = 0;     // chosen minus rejected reward
  double logps_chosen = 0;        // the policy's log-probability of the chosen answer
  double logps_rejected = 0;
  int64_t pairs = 0;

  // TRL's names and the values, in this order.
  std::vector<std::pair<std::string, double>> named() const {
    return {{"rewards/chosen", rewards_chosen},         {"rewards/rejected", rewards_rejected},
            {"rewards/accuracies", rewards_accuracies}, {"rewards/margins", rewards_margins},
            {"logps/chosen", logps_chosen},             {"logps/rejected", logps_rejected}};
  }
};

}  // namespace shardtune::train
