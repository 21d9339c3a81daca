// Precomputed reference log-probabilities on disk.
#include "runtime/data/reference_logps_file.h"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/file_io.h"
#include "runtime/data/token_file.h"

namespace shardtune::data {
namespace {

using common::ErrorKind;

constexpr const char* kMagic = "shardtune reference log-probabilities 1";

uint64_t checksum(const std::vector<double>& v) {
  return fingerprint(std::string_view(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double)));
}

}  // namespace

std::string reference_logps_path(const std::string& dir, const std::string& what, const std::string& key) {
  return fmt::format("{}/{}-{:016x}.logps", dir, what, fingerprint(key));
}

void write_reference_logps(const std::string& path, const std::string& key, const std::vector<double>& logps) {
  ST_CHECK(key.find('\n') == std::string::npos, ErrorKind::kInternal, "a reference key of several lines");
  common::AtomicFile f(path);
  f.write(fmt::format("{}\nkey: {}\nvalues: {}\nchecksum: {:016x}\n", kMagic, key, logps.size(), checksum(logps)));
  f.write(logps.data(), logps.size() * sizeof(double));
  f.commit();
}

std::optional<std::vector<double>> read_reference_logps(const std::string& path, const std::string& key, int64_t pairs) {
  if (!std::filesystem::exists(path)) return std::nullopt;
  const std::string bytes = common::read_file(path, ErrorKind::kIo, "the precomputed reference log-probabilities");
  // Four header lines, then the values.
  std::vector<std::string> lines;
  size_t at = 0;
  for (int i = 0; i < 4; ++i) {
    const size_t end = bytes.find('\n', at);
    ST_CHECK(end != std::string::npos, ErrorKind::kIo,
             "{}: not a file of precomputed reference log-probabilities (its header is cut short). HINT: delete it; "
             "the next start computes them again",
             path);
    lines.push_back(bytes.substr(at, end - at));
    at = end + 1;
  }
  ST_CHECK(lines[0] == kMagic, ErrorKind::kIo,
           "{}: not a file of precomputed reference log-probabilities of this version. HINT: delete it", path);
  ST_CHECK(lines[1] == "key: " + key, ErrorKind::kIo,
           "{}: made for other pairs or another reference ({}) than this job's ({}). HINT: delete it; the next start "
           "computes them again",
           path, lines[1].substr(std::min<size_t>(5, lines[1].size())), key);
  const std::string count = fmt::format("values: {}", 2 * pairs);
  ST_CHECK(lines[2] == count, ErrorKind::kIo, "{}: holds {} where {} pairs need {}", path, lines[2], pairs, count);
  ST_CHECK(bytes.size() - at == static_cast<size_t>(2 * pairs) * sizeof(double), ErrorKind::kIo,
           "{}: {} bytes of values where {} pairs need {}: the file is cut short or damaged. HINT: delete it", path,
           bytes.size() - at, pairs, 2 * pairs * static_cast<int64_t>(sizeof(double)));
  std::vector<double> out(static_cast<size_t>(2 * pairs));
  std::memcpy(out.data(), bytes.data() + at, out.size() * sizeof(double));
  ST_CHECK(lines[3] == fmt::format("checksum: {:016x}", checksum(out)), ErrorKind::kIo,
           "{}: its values do not match their checksum: the file is damaged. HINT: delete it", path);
  return out;
}

}  // namespace shardtune::data
