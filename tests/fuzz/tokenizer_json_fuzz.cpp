// libFuzzer target for tokenizer.json (and tokenizer_config.json after a NUL byte): any input
// must build a tokenizer or raise common::Error; a tokenizer that builds must encode text into
// ids inside its vocabulary and decode them without failing.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"
#include "runtime/data/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using shardtune::data::Tokenizer;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view json = input.substr(0, nul);
  const std::string_view config = nul == std::string_view::npos ? std::string_view{} : input.substr(nul + 1);
  try {
    const Tokenizer tok = Tokenizer::from_json(json, "fuzz/tokenizer.json", config);
    static const std::string kText = "Hello, world! 12 345\n\tna\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac <s> \xff end";
    const std::vector<int32_t> ids = tok.encode(kText);
    for (const int32_t id : ids)
      if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
    (void)tok.decode(ids);
  } catch (const shardtune::common::Error&) {
  }
  return 0;
}
