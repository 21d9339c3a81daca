// Whether a checkpoint's data is the job's: the comparison a resume makes before it continues the
// checkpoint's sample cursor (data::DataIdentity, runtime/data/data_identity.h).
#pragma once

#include <string>
#include <vector>

#include "checkpoint/manifest.h"

namespace shardtune::checkpoint {

// What differs between the data a checkpoint was trained on (`saved`) and the job's (`now`), one
// line per item that decides ("train.seed: 42 in the checkpoint, 7 now"), then, when the tokens
// differ, the inputs of the token file that differ, to say why. Empty when every deciding item is
// the same, or when the checkpoint recorded none (saved before data identities).
std::vector<std::string> data_changes(const data::DataIdentity& saved, const data::DataIdentity& now);

}  // namespace shardtune::checkpoint
