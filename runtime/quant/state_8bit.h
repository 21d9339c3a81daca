// The layout of an 8-bit optimizer's state (bitsandbytes' block-wise 8-bit optimizers), as the
// optimizer (runtime/fsdp/adam8bit.h), FSDP's layout and the planner all count it. Plain C++.
#pragma once

#include <cstdint>
#include <string>

namespace shardtune::quant {

// Elements per fp32 scale (absmax) of each moment: bitsandbytes' block of its 2-state optimizers.
inline constexpr int64_t kAdam8bitBlock = 256;
// Tensors of fewer elements keep fp32 moments: bitsandbytes' default min_8bit_size.
inline constexpr int64_t kMin8bitSize = 4096;

// Whether a trainable tensor's moments are quantised: not for tensors of fewer than kMin8bitSize
// elements, nor for the token embedding, whose state Hugging Face's Trainer keeps in 32 bits with
// every bitsandbytes 8-bit optimizer (GlobalOptimManager's override for nn.Embedding, as
// bitsandbytes advises: rows of tokens absent from a batch see no gradient for many steps).
bool quantized_state(const std::string& name, int64_t numel);

}  // namespace shardtune::quant
