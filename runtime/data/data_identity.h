// Which samples a run trains and in what order: what the job's data decides, recorded in every
// checkpoint, so that a resume that would continue the sample cursor over other data is refused
// (checkpoint/data_identity.h compares two).
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace shardtune::data {

struct DataIdentity {
  // Compared on resume: the training tokens' checksum and counts, the seed of the order, the
  // batching strategy and context length that cut the tokens into samples, the sample count.
  std::map<std::string, std::string> decides;
  // What the token file was made from (the tokenizer's fingerprint, the data file, the chat format,
  // the split, ...): named to explain a change, never compared.
  std::map<std::string, std::string> made_from;
  bool empty() const { return decides.empty(); }
};

// The names of several sources in the job file's order, in `decides`: each source's order is seeded
// by its place. A checkpoint written before it was recorded resumes as before (data_changes).
inline constexpr std::string_view kSourceOrderKey = "source order";

}  // namespace shardtune::data
