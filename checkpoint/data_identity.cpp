// Comparing data identities.
#include "checkpoint/data_identity.h"

#include <fmt/format.h>

#include <set>

namespace shardtune::checkpoint {
namespace {

std::string value_or_none(const std::map<std::string, std::string>& m, const std::string& key) {
  const auto it = m.find(key);
  return it == m.end() ? "(not recorded)" : it->second;
}

// A line for each key of `saved` or `now` whose values differ.
std::vector<std::string> differing(const std::map<std::string, std::string>& saved,
                                   const std::map<std::string, std::string>& now, const char* prefix) {
  std::set<std::string> keys;
  for (const auto& [k, v] : saved) keys.insert(k);
  for (const auto& [k, v] : now) keys.insert(k);
  std::vector<std::string> out;
  for (const std::string& k : keys) {
    const std::string was = value_or_none(saved, k), is = value_or_none(now, k);
    if (was != is) out.push_back(fmt::format("{}{}: {} in the checkpoint, {} now", prefix, k, was, is));
  }
  return out;
}

}  // namespace

std::vector<std::string> data_changes(const data::DataIdentity& saved, const data::DataIdentity& now) {
  if (saved.empty()) return {};
  // A key recorded later than the checkpoint was written: it cannot tell, and resumes as before.
  std::map<std::string, std::string> compared = now.decides;
  if (saved.decides.count(std::string(data::kSourceOrderKey)) == 0) compared.erase(std::string(data::kSourceOrderKey));
  std::vector<std::string> out = differing(saved.decides, compared, "");
  if (out.empty()) return out;
  if (value_or_none(saved.decides, "training tokens") != value_or_none(now.decides, "training tokens"))
    for (std::string& line : differing(saved.made_from, now.made_from, "the token file's "))
      out.push_back(std::move(line));
  return out;
}

}  // namespace shardtune::checkpoint
