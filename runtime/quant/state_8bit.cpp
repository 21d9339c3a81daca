// Which tensors an 8-bit optimizer quantises.
#include "runtime/quant/state_8bit.h"

namespace shardtune::quant {

bool quantized_state(const std::string& name, int64_t numel) {
  return numel >= kMin8bitSize && name != "model.embed_tokens.weight";
}

}  // namespace shardtune::quant
