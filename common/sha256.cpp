// SHA-256 through OpenSSL's EVP interface.
#include "common/sha256.h"

#include <openssl/evp.h>

#include <memory>

#include "common/error.h"

namespace shardtune::common {

std::string sha256_hex(std::string_view bytes) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  ST_CHECK(ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1 &&
               EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size()) == 1 &&
               EVP_DigestFinal_ex(ctx.get(), digest, &length) == 1,
           ErrorKind::kInternal, "SHA-256 failed in OpenSSL");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < length; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

}  // namespace shardtune::common
