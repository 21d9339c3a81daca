#include "common/malloc_pages.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <optional>

namespace shardtune::common {

namespace {

// The value GLIBC_TUNABLES gives the huge page tunable ("1", "0", ...), or nullopt when it is not
// set there. Entries are NAME=VALUE separated by ':'; glibc takes the last of a repeated name.
std::optional<std::string> huge_page_setting(std::string_view tunables) {
  const std::string_view name = kMallocHugePagesTunable;
  std::optional<std::string> value;
  while (!tunables.empty()) {
    const size_t end = std::min(tunables.find(':'), tunables.size());
    const std::string_view entry = tunables.substr(0, end);
    if (entry.size() > name.size() && entry.substr(0, name.size()) == name && entry[name.size()] == '=')
      value = std::string(entry.substr(name.size() + 1));
    tunables.remove_prefix(std::min(end + 1, tunables.size()));
  }
  return value;
}

}  // namespace

std::string tunables_with_huge_pages(std::string_view current) {
  if (huge_page_setting(current)) return std::string(current);
  return fmt::format("{}{}{}=1", current, current.empty() ? "" : ":", kMallocHugePagesTunable);
}

std::string malloc_pages_description(const char* tunables, std::string_view thp_mode) {
  const std::optional<std::string> setting = tunables ? huge_page_setting(tunables) : std::nullopt;
  std::string kernel;
  if (thp_mode == "never")
    kernel = "; the kernel's transparent huge pages are off (never), so its pages stay 4 KiB";
  else if (!thp_mode.empty())
    kernel = fmt::format("; the kernel's transparent huge pages: {}", thp_mode);
  if (!setting)
    return fmt::format("4 KiB pages: GLIBC_TUNABLES does not set {} (shardtune run and shardtune submit set it to 1){}",
                       kMallocHugePagesTunable, kernel);
  if (*setting == "0") return fmt::format("4 KiB pages: {}=0 from the environment{}", kMallocHugePagesTunable, kernel);
  return fmt::format("huge pages asked for ({}={}){}", kMallocHugePagesTunable, *setting, kernel);
}

std::string transparent_huge_page_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string word;
  while (in >> word)
    if (word.size() > 2 && word.front() == '[' && word.back() == ']') return word.substr(1, word.size() - 2);
  return "";
}

}  // namespace shardtune::common
