// libFuzzer target for the safetensors header parser: any input must either parse or raise
// common::Error; any other exception, crash or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "checkpoint/hf/safetensors_header.h"
#include "common/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string kName = "fuzz-input.safetensors";
  try {
    const auto header = shardtune::checkpoint::parse_safetensors_header(
        std::as_bytes(std::span<const uint8_t>(data, size)), kName);
    // A header that passed must describe ranges inside the input, as SafetensorsFile relies on.
    for (const auto& t : header.tensors) {
      if (t.data_begin < header.data_begin || t.data_begin > size || t.nbytes > size - t.data_begin) __builtin_trap();
    }
  } catch (const shardtune::common::Error&) {
  }
  return 0;
}
