#include "runtime/data/token_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/mapping_guard.h"
#include "common/file_io.h"

namespace shardtune::data {
namespace {

using common::ErrorKind;

constexpr char kMagic[8] = {'S', 'T', 'T', 'O', 'K', 'v', '3', '\n'};
constexpr char kOlderMagics[2][8] = {{'S', 'T', 'T', 'O', 'K', 'v', '1', '\n'}, {'S', 'T', 'T', 'O', 'K', 'v', '2', '\n'}};

bool older_magic(const char* base) {
  for (const auto& m : kOlderMagics)
    if (std::memcmp(base, m, sizeof m) == 0) return true;
  return false;
}

// Layout: magic[8], key length u64, key bytes padded to 8, notes length u64, notes bytes padded
// to 8, examples u64, tokens u64, checksum u64 (of the arrays), offsets i64[examples + 1], ids
// i32[tokens], labels i32[tokens]. The arrays are whole 8-byte words (ids and labels together: 8
// bytes per token).
size_t padded(size_t n) { return (n + 7) / 8 * 8; }

// FNV-1a over 8-byte words: several GB/s, enough to notice a damaged file (not an adversary).
uint64_t words_checksum(const char* p, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  return h;
}

}  // namespace

uint64_t fingerprint(std::string_view bytes, uint64_t seed) {
  uint64_t h = seed;
  for (const char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

bool is_older_token_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char magic[8] = {};
  const bool older = ::pread(fd, magic, sizeof magic, 0) == static_cast<ssize_t>(sizeof magic) && older_magic(magic);
  ::close(fd);
  return older;
}

void TokenFile::write(const std::string& path, const std::string& key, const std::vector<Example>& examples,
                      const std::string& notes) {
  std::vector<int64_t> offsets{0};
  for (const Example& e : examples) offsets.push_back(offsets.back() + static_cast<int64_t>(e.ids.size()));
  common::write_file_atomically(path, [&](int fd, const std::string& tmp) {
    common::write_all(fd, kMagic, sizeof kMagic, tmp);
    const uint64_t header[1] = {key.size()};
    common::write_all(fd, header, sizeof header, tmp);
    for (const std::string* text : {&key, &notes}) {
      const uint64_t length[1] = {text->size()};
      if (text == &notes) common::write_all(fd, length, sizeof length, tmp);
      std::string t = *text;
      t.resize(padded(text->size()), '\0');
      common::write_all(fd, t.data(), t.size(), tmp);
    }
    std::string arrays(reinterpret_cast<const char*>(offsets.data()), offsets.size() * sizeof(int64_t));
    for (const Example& e : examples) arrays.append(reinterpret_cast<const char*>(e.ids.data()), e.ids.size() * 4);
    for (const Example& e : examples) arrays.append(reinterpret_cast<const char*>(e.labels.data()), e.labels.size() * 4);
    const uint64_t counts[3] = {examples.size(), static_cast<uint64_t>(offsets.back()),
                                words_checksum(arrays.data(), arrays.size())};
    common::write_all(fd, counts, sizeof counts, tmp);
    common::write_all(fd, arrays.data(), arrays.size(), tmp);
  });
}

std::shared_ptr<const TokenFile> TokenFile::open(const std::string& path, const std::string& key, int64_t vocab_size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st {};
  ::fstat(fd, &st);
  const auto size = static_cast<size_t>(st.st_size);
  void* map = size > 0 ? ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  ::close(fd);
  ST_CHECK(map != MAP_FAILED, ErrorKind::kIo, "cannot map {} ({} bytes): {}", path, size, std::strerror(errno));
  std::shared_ptr<TokenFile> f(new TokenFile());
  f->map_ = map;
  f->map_size_ = size;
  f->guard_ = common::guard_mapping(map, size, path);
  const char* base = static_cast<const char*>(map);
  auto need = [&](size_t end, const char* what) {
    ST_CHECK(end <= size, ErrorKind::kIo, "{} is damaged: it ends inside its {} ({} bytes): delete it to tokenize again",
             path, what, size);
  };
  auto damaged = [&](const std::string& why) {
    common::raise(ErrorKind::kIo, fmt::format("{} is damaged: {}: delete it to tokenize again", path, why));
  };
  need(16, "header");
  if (older_magic(base)) return nullptr;  // an older format: tokenize again
  ST_CHECK(std::memcmp(base, kMagic, sizeof kMagic) == 0, ErrorKind::kIo,
           "{} is not a shardtune token file: delete it to tokenize again", path);
  uint64_t key_size = 0;
  std::memcpy(&key_size, base + 8, 8);
  if (key_size > size) damaged(fmt::format("its key length {} exceeds its size", key_size));
  need(16 + padded(key_size) + 8, "header");
  if (std::string_view(base + 16, key_size) != key) return nullptr;  // made for other data or settings
  size_t at = 16 + padded(key_size);
  uint64_t notes_size = 0;
  std::memcpy(&notes_size, base + at, 8);
  if (notes_size > size) damaged(fmt::format("its notes length {} exceeds its size", notes_size));
  need(at + 8 + padded(notes_size) + 24, "header");
  f->notes_.assign(base + at + 8, notes_size);
  at += 8 + padded(notes_size);
  uint64_t counts[3];
  std::memcpy(counts, base + at, sizeof counts);
  at += sizeof counts;
  // Each count is below size / 8 before anything is multiplied, so nothing below can overflow.
  if (counts[0] >= size / 8 || counts[1] >= size / 8)
    damaged(fmt::format("its counts ({} examples, {} tokens) exceed its {} bytes", counts[0], counts[1], size));
  const size_t arrays = (counts[0] + 1) * 8 + counts[1] * 8;
  if (at + arrays != size) damaged(fmt::format("{} bytes, where its counts make {}", size, at + arrays));
  if (words_checksum(base + at, arrays) != counts[2]) damaged("its checksum does not match");
  f->checksum_ = counts[2];
  f->offsets_ = {reinterpret_cast<const int64_t*>(base + at), counts[0] + 1};
  at += (counts[0] + 1) * 8;
  f->ids_ = {reinterpret_cast<const int32_t*>(base + at), counts[1]};
  at += counts[1] * 4;
  f->labels_ = {reinterpret_cast<const int32_t*>(base + at), counts[1]};
  if (f->offsets_.front() != 0 || static_cast<uint64_t>(f->offsets_.back()) != counts[1])
    damaged(fmt::format("its offsets do not cover its {} tokens", counts[1]));
  for (size_t e = 1; e < f->offsets_.size(); ++e)
    if (f->offsets_[e] < f->offsets_[e - 1]) damaged(fmt::format("the offset of example {} goes backwards", e));
  for (size_t i = 0; i < counts[1]; ++i) {
    const int32_t id = f->ids_[i], label = f->labels_[i];
    if (id < 0 || id >= vocab_size) damaged(fmt::format("token {} has the id {}, outside the vocabulary of {}", i, id, vocab_size));
    if (label != kIgnoreLabel && (label < 0 || label >= vocab_size))
      damaged(fmt::format("token {} has the label {}, outside the vocabulary of {}", i, label, vocab_size));
  }
  return f;
}

std::shared_ptr<const TokenFile> TokenFile::from_examples(const std::vector<Example>& examples) {
  std::shared_ptr<TokenFile> f(new TokenFile());
  f->owned_offsets_.push_back(0);
  for (const Example& e : examples) {
    f->owned_ids_.insert(f->owned_ids_.end(), e.ids.begin(), e.ids.end());
    f->owned_labels_.insert(f->owned_labels_.end(), e.labels.begin(), e.labels.end());
    f->owned_offsets_.push_back(static_cast<int64_t>(f->owned_ids_.size()));
  }
  f->ids_ = f->owned_ids_;
  f->labels_ = f->owned_labels_;
  f->offsets_ = f->owned_offsets_;
  // The file's layout, so that the checksum is the one write() would store.
  std::string arrays(reinterpret_cast<const char*>(f->offsets_.data()), f->offsets_.size_bytes());
  arrays.append(reinterpret_cast<const char*>(f->ids_.data()), f->ids_.size_bytes());
  arrays.append(reinterpret_cast<const char*>(f->labels_.data()), f->labels_.size_bytes());
  f->checksum_ = words_checksum(arrays.data(), arrays.size());
  return f;
}

TokenFile::~TokenFile() {
  common::release_mapping(guard_);
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

}  // namespace shardtune::data
