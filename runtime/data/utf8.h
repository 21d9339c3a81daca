// UTF-8 as the rest of the world reads it: invalid input is repaired the way browsers and
// Node.js decode it (WHATWG: each maximal invalid subpart becomes one U+FFFD), so tokenizing
// a file with broken bytes gives the same ids as Hugging Face's JavaScript tokenizers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace shardtune::data {

// `text` with every invalid sequence replaced by U+FFFD (EF BF BD). Valid input is returned as is.
std::string repair_utf8(std::string_view text);

bool is_valid_utf8(std::string_view text);

// Offset of the first byte that does not start a valid sequence, or npos when `text` is valid.
size_t first_invalid_utf8(std::string_view text);

// Text safe to print in a log line or an error: valid UTF-8 stays as it is, except control
// characters, written as \n, \r, \t or \xNN; every byte of an invalid sequence is written \xNN.
std::string escaped(std::string_view text);

// Appends the UTF-8 encoding of a code point (<= 0x10FFFF, not a surrogate).
void append_utf8(std::string& out, char32_t cp);

// Decodes one code point of valid UTF-8 at `pos` and advances `pos`.
char32_t next_code_point(std::string_view text, size_t& pos);

}  // namespace shardtune::data
