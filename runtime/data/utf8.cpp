#include "runtime/data/utf8.h"

namespace shardtune::data {
namespace {

// Length of the valid sequence starting at `pos`, or the length of its maximal invalid subpart
// as a negative number (WHATWG "UTF-8 decode": the bytes consumed before the error).
int sequence_length(std::string_view s, size_t pos) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(pos);
  if (c < 0x80) return 1;
  int need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (int k = 1; k <= need; ++k) {
    if (pos + static_cast<size_t>(k) >= s.size()) return -k;
    const unsigned char n = b(pos + static_cast<size_t>(k));
    if (n < (k == 1 ? lo : 0x80) || n > (k == 1 ? hi : 0xBF)) return -k;
  }
  return need + 1;
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const int n = sequence_length(text, pos);
    if (n < 0) return false;
    pos += static_cast<size_t>(n);
  }
  return true;
}

size_t first_invalid_utf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const int n = sequence_length(text, pos);
    if (n < 0) return pos;
    pos += static_cast<size_t>(n);
  }
  return std::string_view::npos;
}

std::string escaped(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  auto hex = [&out](unsigned char c) {
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  };
  for (size_t pos = 0; pos < text.size();) {
    const int n = sequence_length(text, pos);
    const auto c = static_cast<unsigned char>(text[pos]);
    if (n < 0) {
      for (int k = 0; k < -n; ++k) hex(static_cast<unsigned char>(text[pos + static_cast<size_t>(k)]));
      pos += static_cast<size_t>(-n);
    } else if (n == 1 && (c < 0x20 || c == 0x7F)) {
      if (c == '\n') out += "\\n";
      else if (c == '\r') out += "\\r";
      else if (c == '\t') out += "\\t";
      else hex(c);
      ++pos;
    } else {
      out.append(text.substr(pos, static_cast<size_t>(n)));
      pos += static_cast<size_t>(n);
    }
  }
  return out;
}

std::string repair_utf8(std::string_view text) {
  if (is_valid_utf8(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 16);
  for (size_t pos = 0; pos < text.size();) {
    const int n = sequence_length(text, pos);
    if (n > 0) {
      out.append(text.substr(pos, static_cast<size_t>(n)));
      pos += static_cast<size_t>(n);
    } else {
      out += "\xEF\xBF\xBD";
      pos += static_cast<size_t>(-n);
    }
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

char32_t next_code_point(std::string_view s, size_t& pos) {
  const auto b = [&](size_t i) { return static_cast<char32_t>(static_cast<unsigned char>(s[i])); };
  const char32_t c = b(pos);
  if (c < 0x80) {
    pos += 1;
    return c;
  }
  if (c < 0xE0) {
    const char32_t cp = ((c & 0x1F) << 6) | (b(pos + 1) & 0x3F);
    pos += 2;
    return cp;
  }
  if (c < 0xF0) {
    const char32_t cp = ((c & 0x0F) << 12) | ((b(pos + 1) & 0x3F) << 6) | (b(pos + 2) & 0x3F);
    pos += 3;
    return cp;
  }
  const char32_t cp = ((c & 0x07) << 18) | ((b(pos + 1) & 0x3F) << 12) | ((b(pos + 2) & 0x3F) << 6) | (b(pos + 3) & 0x3F);
  pos += 4;
  return cp;
}

}  // namespace shardtune::data
