// DPO's precomputed reference ([dpo] reference = "precomputed"): the reference model's summed
// log-probabilities of the chosen and the rejected answer of every pair of one token file, computed
// once and stored, so that training runs no reference model and a resume never recomputes them.
// A file is made for one key (the pairs' tokens and the reference weights, runtime/train's
// reference_key) and named after it; a text header says what it holds, then 2 x pairs float64
// values, chosen then rejected per pair, with a checksum.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shardtune::data {

// The file for `key` in `dir` (what: "training" or "validation").
std::string reference_logps_path(const std::string& dir, const std::string& what, const std::string& key);

// Writes atomically. Throws common::Error(kIo) naming the file.
void write_reference_logps(const std::string& path, const std::string& key, const std::vector<double>& logps);

// The values, or nullopt when there is no file. Throws common::Error(kIo) naming the file when it
// is damaged (a header it does not understand, a size or checksum that does not match), made for
// another key, or holds another count than 2 x `pairs` values.
std::optional<std::vector<double>> read_reference_logps(const std::string& path, const std::string& key, int64_t pairs);

}  // namespace shardtune::data
