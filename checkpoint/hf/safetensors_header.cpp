// Safetensors header validation: every field is checked before any tensor byte is trusted, because
// checkpoints come from the Hub and other untrusted places (DESIGN.md, invariant 8).
#include "checkpoint/hf/safetensors_header.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <source_location>
#include <tuple>

#include "common/strict_json.h"
#include "common/error.h"

namespace shardtune::checkpoint {

using common::StrictJson;
using common::described;
using common::json_quoted;
using common::kMaxJsonDepth;
using common::parse_json_strict;
namespace {

using nlohmann::json;

// Safetensors stores little-endian lengths and data; the readers copy bytes as they are.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

constexpr std::string_view kMetadataKey = "__metadata__";

// A JSON value for an error message, cut short: a corrupt shape may have millions of entries.
std::string brief(const json& v) {
  constexpr size_t kMaxChars = 120;
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > kMaxChars) s = s.substr(0, kMaxChars) + "...";
  return s;
}

class HeaderChecker {
 public:
  HeaderChecker(std::span<const std::byte> file, const std::string& name) : file_(file), name_(name) {}

  ParsedHeader run() {
    ParsedHeader out;
    const uint64_t file_size = file_.size();
    if (file_size < 8) {
      fail(fmt::format("the file is {} bytes long; a safetensors file starts with an 8-byte header length",
                       file_size));
    }
    uint64_t n = 0;
    std::memcpy(&n, file_.data(), 8);
    if (n > kMaxSafetensorsHeaderBytes) {
      fail(fmt::format("the header length field (bytes 0-7) says {} bytes, more than the {} bytes a "
                       "safetensors header may have: the file is corrupt or not a safetensors file",
                       n, kMaxSafetensorsHeaderBytes));
    }
    if (n > file_size - 8) {
      fail(fmt::format("the header length field says {} bytes, but only {} bytes follow it in the file "
                       "(file size {}): the file is truncated or not a safetensors file",
                       n, file_size - 8, file_size));
    }
    out.header_size = n;
    out.data_begin = 8 + n;
    data_begin_ = out.data_begin;
    data_size_ = file_size - out.data_begin;

    const json root = parse_json(n);
    if (!root.is_object()) {
      fail(fmt::format("the header JSON is {}, expected an object mapping tensor names to "
                       "{{\"dtype\", \"shape\", \"data_offsets\"}}", described(root)));
    }
    for (const auto& [key, value] : root.get_ref<const json::object_t&>()) {
      if (key == kMetadataKey) {
        out.metadata = check_metadata(value);
      } else {
        out.tensors.push_back(check_tensor(key, value));
      }
    }
    check_tiling(out.tensors);
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& message,
                         const std::source_location& loc = std::source_location::current()) const {
    common::raise(common::ErrorKind::kIo, fmt::format("safetensors file {}: {}", name_, message), loc);
  }

  [[noreturn]] void fail_tensor(std::string_view tensor, const std::string& message,
                                const std::source_location& loc = std::source_location::current()) const {
    fail(fmt::format("tensor {}: {}", json_quoted(tensor), message), loc);
  }

  // Parses bytes [8, 8 + n) and rejects duplicate keys, which nlohmann would silently resolve to
  // the last value: two entries for one tensor name mean the file cannot be trusted.
  json parse_json(uint64_t n) {
    const char* begin = reinterpret_cast<const char*>(file_.data()) + 8;
    StrictJson parsed;
    try {
      parsed = parse_json_strict(begin, begin + n);
    } catch (const json::parse_error& e) {
      // nlohmann counts bytes from 1; report 0-based offsets like every other offset here.
      const uint64_t at = e.byte > 0 ? e.byte - 1 : 0;
      fail(fmt::format("the header JSON (file bytes [8, {})) is not valid JSON at header byte {} "
                       "(file offset {}): {}", 8 + n, at, 8 + at, e.what()));
    } catch (const json::exception& e) {
      // Not only syntax: a number too large for a double, for one, is an out_of_range error.
      fail(fmt::format("the header JSON (file bytes [8, {})) is not valid: {}", 8 + n, e.what()));
    }
    if (parsed.too_deep)
      fail(fmt::format("the header JSON nests arrays or objects more than {} deep; a safetensors header has 3 levels",
                       kMaxJsonDepth));
    if (const auto& duplicate = parsed.duplicate) {
      if (duplicate->first == 1) {
        fail(fmt::format("tensor {} is listed twice in the header; each tensor name may appear once",
                         json_quoted(duplicate->second)));
      }
      fail(fmt::format("the header JSON has the key {} twice in one object", json_quoted(duplicate->second)));
    }
    return std::move(parsed.value);
  }

  std::map<std::string, std::string> check_metadata(const json& value) const {
    if (!value.is_object()) {
      fail(fmt::format("\"__metadata__\" is {}, expected an object of string to string", described(value)));
    }
    std::map<std::string, std::string> out;
    for (const auto& [k, v] : value.get_ref<const json::object_t&>()) {
      if (!v.is_string()) {
        fail(fmt::format("\"__metadata__\" key {} holds {}, expected a string (metadata values are "
                         "strings in safetensors)", json_quoted(k), described(v)));
      }
      out.emplace(k, v.get<std::string>());
    }
    return out;
  }

  // A non-negative JSON integer as u64; nlohmann stores non-negative literals as unsigned.
  static std::optional<uint64_t> as_u64(const json& v) {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
    return std::nullopt;
  }

  TensorInfo check_tensor(const std::string& name, const json& entry) const {
    if (!entry.is_object()) {
      fail_tensor(name, fmt::format("the header entry is {}, expected an object with \"dtype\", "
                                    "\"shape\" and \"data_offsets\"", described(entry)));
    }
    for (const auto& [k, v] : entry.get_ref<const json::object_t&>()) {
      if (k != "dtype" && k != "shape" && k != "data_offsets") {
        fail_tensor(name, fmt::format("unexpected key {} (expected exactly \"dtype\", \"shape\" and "
                                      "\"data_offsets\")", json_quoted(k)));
      }
    }
    for (const char* k : {"dtype", "shape", "data_offsets"}) {
      if (!entry.contains(k)) fail_tensor(name, fmt::format("the header entry has no \"{}\"", k));
    }

    TensorInfo info;
    info.name = name;
    const json& dtype = entry["dtype"];
    if (!dtype.is_string()) fail_tensor(name, fmt::format("\"dtype\" is {}, expected a string", described(dtype)));
    const auto parsed_dtype = common::parse_safetensors_name(dtype.get_ref<const std::string&>());
    if (!parsed_dtype) {
      fail_tensor(name, fmt::format("unknown dtype {} (expected one of F64, F32, F16, BF16, I64, I32, I16, "
                                    "I8, U8, BOOL, F8_E4M3, F8_E5M2)", json_quoted(dtype.get_ref<const std::string&>())));
    }
    info.dtype = *parsed_dtype;

    const json& shape = entry["shape"];
    if (!shape.is_array()) fail_tensor(name, fmt::format("\"shape\" is {}, expected an array", described(shape)));
    uint64_t numel = 1;
    bool overflow = false;
    for (size_t i = 0; i < shape.size(); ++i) {
      const json& d = shape[i];
      const auto dim = as_u64(d);
      if (!dim) {
        fail_tensor(name, fmt::format("shape {} has dimension {} = {}, expected a non-negative integer",
                                      brief(shape), i, brief(d)));
      }
      if (*dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail_tensor(name, fmt::format("shape {} has dimension {} = {}, larger than 2^63 - 1", brief(shape), i, *dim));
      }
      info.shape.push_back(static_cast<int64_t>(*dim));
      overflow = overflow || __builtin_mul_overflow(numel, *dim, &numel);
    }
    const uint64_t elem = common::element_size(info.dtype);
    uint64_t nbytes = 0;
    overflow = overflow || __builtin_mul_overflow(numel, elem, &nbytes);
    // A zero dimension makes the tensor empty whatever the others are; then only a bogus range is
    // wrong, not the shape.
    const bool empty = std::find(info.shape.begin(), info.shape.end(), 0) != info.shape.end();
    if (overflow && !empty) {
      fail_tensor(name, fmt::format("shape {} of {} describes more than 2^64 bytes: the header is corrupt",
                                    brief(shape), safetensors_name(info.dtype)));
    }
    if (empty) nbytes = 0;

    const json& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !as_u64(offsets[0]) || !as_u64(offsets[1])) {
      fail_tensor(name, fmt::format("\"data_offsets\" is {}, expected [begin, end] with non-negative integers",
                                    brief(offsets)));
    }
    const uint64_t begin = *as_u64(offsets[0]);
    const uint64_t end = *as_u64(offsets[1]);
    if (begin > end) {
      fail_tensor(name, fmt::format("data_offsets [{}, {}] has begin > end", begin, end));
    }
    if (end > data_size_) {
      fail_tensor(name, fmt::format("data_offsets [{}, {}] ends beyond the data area, which has {} bytes "
                                    "(file bytes [{}, {})): the file is truncated or the header is corrupt",
                                    begin, end, data_size_, data_begin_, data_begin_ + data_size_));
    }
    if (end - begin != nbytes) {
      fail_tensor(name, fmt::format("data_offsets [{}, {}] span {} bytes, but shape {} of {} needs {} bytes "
                                    "({} elements × {} bytes)",
                                    begin, end, end - begin, brief(shape), safetensors_name(info.dtype), nbytes,
                                    empty ? 0 : numel, elem));
    }
    info.data_begin = data_begin_ + begin;
    info.nbytes = nbytes;
    return info;
  }

  // The reference implementation requires the tensors, sorted by offset, to tile the data area:
  // bytes that belong to no tensor could hide anything, and two tensors sharing bytes would alias.
  void check_tiling(std::vector<TensorInfo>& tensors) const {
    std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
      return std::tie(a.data_begin, a.nbytes, a.name) < std::tie(b.data_begin, b.nbytes, b.name);
    });
    uint64_t expected = 0;  // relative to the data area
    const TensorInfo* prev = nullptr;
    auto range = [&](const TensorInfo& t) {
      const uint64_t b = t.data_begin - data_begin_;
      return fmt::format("data_offsets [{}, {}]", b, b + t.nbytes);
    };
    for (const TensorInfo& t : tensors) {
      const uint64_t begin = t.data_begin - data_begin_;
      if (begin < expected) {
        fail(fmt::format("tensors {} ({}) and {} ({}) overlap; every byte of the data area must belong to "
                         "exactly one tensor", json_quoted(prev->name), range(*prev), json_quoted(t.name), range(t)));
      }
      if (begin > expected) {
        const std::string where =
            prev ? fmt::format("between tensor {} and tensor {}", json_quoted(prev->name), json_quoted(t.name))
                 : fmt::format("before tensor {}, the first, which must start at offset 0", json_quoted(t.name));
        fail(fmt::format("gap in the data area: bytes [{}, {}) (file bytes [{}, {})) belong to no tensor ({}); "
                         "the tensors must cover the data area with no gaps",
                         expected, begin, data_begin_ + expected, data_begin_ + begin, where));
      }
      expected = begin + t.nbytes;
      prev = &t;
    }
    if (expected != data_size_) {
      fail(fmt::format("trailing bytes: the data area has {} bytes but the tensors end at offset {}, so bytes "
                       "[{}, {}) (file bytes [{}, {})) belong to no tensor; the tensors must cover the data "
                       "area with no gaps",
                       data_size_, expected, expected, data_size_, data_begin_ + expected, data_begin_ + data_size_));
    }
  }

  std::span<const std::byte> file_;
  const std::string& name_;
  uint64_t data_begin_ = 0;
  uint64_t data_size_ = 0;
};

}  // namespace

ParsedHeader parse_safetensors_header(std::span<const std::byte> file_bytes, const std::string& name_for_errors) {
  return HeaderChecker(file_bytes, name_for_errors).run();
}

}  // namespace shardtune::checkpoint
