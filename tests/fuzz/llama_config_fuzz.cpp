// libFuzzer target for a Hugging Face config.json: any file must give a model configuration or
// raise common::Error naming it.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "common/error.h"
#include "runtime/model/llama_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/st-fuzz-config-" + std::to_string(::getpid()) + ".json";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) __builtin_trap();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) __builtin_trap();
  std::fclose(f);
  try {
    (void)shardtune::model::LlamaConfig::from_file(path);
  } catch (const shardtune::common::Error&) {
  }
  return 0;
}
