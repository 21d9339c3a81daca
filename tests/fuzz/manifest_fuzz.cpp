// libFuzzer target for checkpoint manifests: any text must parse or raise common::Error naming
// it; a manifest that parses must write out as text that parses again to the same text.
#include <cstddef>
#include <cstdint>
#include <string>

#include "checkpoint/manifest.h"
#include "common/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardtune::checkpoint;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const Manifest m = parse_manifest(text, "fuzz/manifest.json");
    const std::string written = manifest_text(m);
    if (manifest_text(parse_manifest(written, "fuzz/written.json")) != written) __builtin_trap();
  } catch (const shardtune::common::Error&) {
  }
  return 0;
}
