// Identities of base models.
#include "checkpoint/hf/model_identity.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>

#include "checkpoint/hf/weights_digest.h"
#include "common/dtype.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/sha256.h"

namespace shardtune::checkpoint {

ModelIdentity model_identity(const HfFolder& folder, const std::string& weights_sha256) {
  ModelIdentity id;
  id.config_sha256 = common::sha256_hex(
      common::read_file((std::filesystem::path(folder.dir()) / "config.json").string(), common::ErrorKind::kIo));
  std::string index, sample;
  for (const std::string& name : folder.tensor_names()) {
    const TensorInfo& t = folder.info(name);
    index += fmt::format("{} {} [{}]\n", name, common::safetensors_name(t.dtype), fmt::join(t.shape, ", "));
    const std::span<const std::byte> bytes = folder.file_of(name).bytes(t);
    sample += name;
    sample.append(reinterpret_cast<const char*>(bytes.data()), std::min<size_t>(bytes.size(), 64));
  }
  id.tensors_sha256 = common::sha256_hex(index);
  id.weights_sha256 = weights_sha256;
  id.weights_sample_sha256 = common::sha256_hex(sample);
  return id;
}

}  // namespace shardtune::checkpoint
