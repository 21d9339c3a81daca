// Event protocol buffers and their TFRecord framing.
#include "runtime/train/tfevents.h"

#include <array>
#include <cstring>

namespace shardtune::train {
namespace {

// Protocol buffer wire types.
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

void key(std::string& out, uint32_t field, uint32_t wire_type) { varint(out, (field << 3) | wire_type); }

template <typename T>
void little_endian(std::string& out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // x86-64 and aarch64 are little-endian, as the format is
  out.append(bytes, sizeof(T));
}

void bytes_field(std::string& out, uint32_t field, std::string_view value) {
  key(out, field, kLengthDelimited);
  varint(out, value.size());
  out += value;
}

// Event's wall_time (1, double) and step (2, int64).
std::string event_head(double wall_time, int64_t step) {
  std::string out;
  key(out, 1, kFixed64);
  little_endian(out, wall_time);
  if (step != 0) {
    key(out, 2, kVarint);
    varint(out, static_cast<uint64_t>(step));
  }
  return out;
}

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  uint32_t c = 0xFFFFFFFFu;
  for (const unsigned char b : data) c = crc_table()[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view record) {
  std::string length;
  little_endian(length, static_cast<uint64_t>(record.size()));
  std::string out = length;
  little_endian(out, masked_crc32c(length));
  out += record;
  little_endian(out, masked_crc32c(record));
  return out;
}

std::string file_version_event(double wall_time) {
  std::string out = event_head(wall_time, 0);
  bytes_field(out, 3, "brain.Event:2");
  return out;
}

std::string session_start_event(double wall_time, int64_t step) {
  std::string log;
  key(log, 1, kVarint);  // SessionLog.status
  varint(log, 1);        // START
  std::string out = event_head(wall_time, step);
  bytes_field(out, 7, log);  // Event.session_log
  return out;
}

std::string scalars_event(double wall_time, int64_t step, const std::vector<std::pair<std::string, float>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    bytes_field(v, 1, tag);  // Summary.Value.tag
    key(v, 2, kFixed32);     // Summary.Value.simple_value
    little_endian(v, value);
    bytes_field(summary, 1, v);
  }
  std::string out = event_head(wall_time, step);
  bytes_field(out, 5, summary);
  return out;
}

}  // namespace shardtune::train
