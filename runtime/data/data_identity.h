// Which samples a run trains and in what order: what the job's data decides, recorded in every
// checkpoint, so that a resume that would continue the sample cursor over other data is refused
// (checkpoint/data_identity.h compares two).
#pragma once

#include <map>
#include <string>

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

}  // namespace shardtune::data
