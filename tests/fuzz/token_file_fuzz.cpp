// libFuzzer target for token files. The first byte chooses what the fuzzer controls: odd, the
// whole file as it is; even, everything after a valid magic, key, notes and checksum (the two counts and
// the arrays), so that mutations get past the checksum to the size, offset and id checks. A file
// that opens must hold exactly what the reader promises: offsets from 0 rising to the token count,
// ids in the vocabulary, labels in it or ignored.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/error.h"
#include "runtime/data/sft_examples.h"
#include "runtime/data/token_file.h"

namespace {

constexpr int64_t kVocab = 1000;

// The format's checksum (docs: FNV-1a over the arrays' 8-byte words).
uint64_t words_checksum(const char* p, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  return h;
}

std::string with_valid_header(const uint8_t* data, size_t size) {
  std::string file("STTOKv3\n", 8);
  const uint64_t key_size = 4, notes_size = 0;
  file.append(reinterpret_cast<const char*>(&key_size), 8);
  file.append("fuzz\0\0\0\0", 8);
  file.append(reinterpret_cast<const char*>(&notes_size), 8);
  const size_t counts = size < 16 ? size : 16;
  std::string c(reinterpret_cast<const char*>(data), counts);
  c.resize(16, '\0');
  const char* arrays = reinterpret_cast<const char*>(data) + counts;
  const size_t arrays_size = size - counts;
  const uint64_t sum = words_checksum(arrays, arrays_size);
  file += c;
  file.append(reinterpret_cast<const char*>(&sum), 8);
  file.append(arrays, arrays_size);
  return file;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using shardtune::data::TokenFile;
  if (size == 0) return 0;
  static const std::string path = "/tmp/st-fuzz-tokens-" + std::to_string(::getpid()) + ".bin";
  const std::string file = data[0] % 2 == 1 ? std::string(reinterpret_cast<const char*>(data) + 1, size - 1)
                                            : with_valid_header(data + 1, size - 1);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) __builtin_trap();
  if (!file.empty() && std::fwrite(file.data(), 1, file.size(), f) != file.size()) __builtin_trap();
  std::fclose(f);
  try {
    const auto tokens = TokenFile::open(path, "fuzz", kVocab);
    if (!tokens) return 0;
    const auto offsets = tokens->offsets();
    if (offsets.empty() || offsets.front() != 0 || offsets.back() != tokens->num_tokens()) __builtin_trap();
    for (size_t i = 1; i < offsets.size(); ++i)
      if (offsets[i] < offsets[i - 1]) __builtin_trap();
    if (tokens->ids().size() != static_cast<size_t>(tokens->num_tokens()) ||
        tokens->labels().size() != tokens->ids().size())
      __builtin_trap();
    for (const int32_t id : tokens->ids())
      if (id < 0 || id >= kVocab) __builtin_trap();
    for (const int32_t label : tokens->labels())
      if (label != shardtune::data::kIgnoreLabel && (label < 0 || label >= kVocab)) __builtin_trap();
  } catch (const shardtune::common::Error&) {
  }
  return 0;
}
