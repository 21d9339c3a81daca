// SHA-256 through OpenSSL's EVP interface.
#include "common/sha256.h"

#include <openssl/evp.h>

#include "common/error.h"

namespace shardtune::common {

struct Sha256::Context {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> md{EVP_MD_CTX_new(), EVP_MD_CTX_free};
};

Sha256::Sha256() : ctx_(std::make_unique<Context>()) {
  ST_CHECK(ctx_->md && EVP_DigestInit_ex(ctx_->md.get(), EVP_sha256(), nullptr) == 1, ErrorKind::kInternal,
           "SHA-256 failed in OpenSSL");
}
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(const void* data, size_t size) {
  ST_CHECK(EVP_DigestUpdate(ctx_->md.get(), data, size) == 1, ErrorKind::kInternal, "SHA-256 failed in OpenSSL");
}

std::string Sha256::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  ST_CHECK(EVP_DigestFinal_ex(ctx_->md.get(), digest, &length) == 1, ErrorKind::kInternal,
           "SHA-256 failed in OpenSSL");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < length; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

std::string sha256_hex(std::string_view bytes) {
  Sha256 h;
  h.update(bytes.data(), bytes.size());
  return h.hex();
}

}  // namespace shardtune::common
