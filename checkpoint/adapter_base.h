// The one comparison of a LoRA checkpoint's base model with another: adapters resume, export and
// merge only onto the base they were trained on. Config and tensor index must be the same; the
// weights are compared by the SHA-256 of every byte where both sides have it, else (a checkpoint
// from before that digest) by the sample of each tensor's first 64 bytes.
#pragma once

#include <optional>
#include <string>

#include "checkpoint/manifest.h"

namespace shardtune::checkpoint {

// Why adapters trained on `saved`'s base are not for `current`'s; nullopt when it is the same base.
std::optional<std::string> base_mismatch(const AdapterRecord& saved, const AdapterRecord& current);

}  // namespace shardtune::checkpoint
