// SHA-256 (OpenSSL's libcrypto) as lowercase hex: identities of files and listings, such as the
// base model a LoRA checkpoint was trained on.
#pragma once

#include <string>
#include <string_view>

namespace shardtune::common {

std::string sha256_hex(std::string_view bytes);

}  // namespace shardtune::common
