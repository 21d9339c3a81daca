// SHA-256 (OpenSSL's libcrypto) as lowercase hex: identities of files and listings, such as the
// base model a LoRA checkpoint was trained on. One-shot, or fed piece by piece as bytes stream by.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace shardtune::common {

std::string sha256_hex(std::string_view bytes);

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  void update(const void* data, size_t size);
  std::string hex();  // finishes the digest; update() may not follow

 private:
  struct Context;
  std::unique_ptr<Context> ctx_;
};

}  // namespace shardtune::common
