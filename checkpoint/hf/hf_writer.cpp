// write_hf_folder: the sharding and naming rules of transformers' save_pretrained, so that the
// folder loads there unchanged and a reader can stream one shard at a time.
#include "checkpoint/hf/hf_writer.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "checkpoint/hf/hf_folder.h"
#include "checkpoint/hf/safetensors_torch.h"
#include "common/error.h"
#include "common/file_io.h"

namespace shardtune::checkpoint {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& message,
                       const std::source_location& loc = std::source_location::current()) {
  common::raise(common::ErrorKind::kIo, message, loc);
}

void write_file_atomic(const fs::path& path, const std::string& text) { common::write_file_atomically(path.string(), text); }

std::string read_small_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) fail(fmt::format("copying tokenizer file {}: cannot open it: {}", path.string(), std::strerror(errno)));
  std::ostringstream text;
  if (in.peek() != std::ifstream::traits_type::eof()) text << in.rdbuf();
  if (in.bad()) fail(fmt::format("copying tokenizer file {}: read failed: {}", path.string(), std::strerror(errno)));
  return text.str();
}

// Weights already in `dir` would be mixed with the new ones (a stale model.safetensors even wins
// over a new index), so the writer refuses instead of deleting files it did not write.
void check_no_weights(const fs::path& dir) {
  static const std::regex kShardName(R"(model-\d+-of-\d+\.safetensors)");
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == kSafeWeightsName || name == kSafeWeightsIndexName || std::regex_match(name, kShardName)) {
      fail(fmt::format("model folder {}: already holds weights ({}); write into an empty folder so that no "
                       "stale shard is mixed with the new ones", dir.string(), name));
    }
  }
  if (ec) fail(fmt::format("model folder {}: cannot list it: {}", dir.string(), ec.message()));
}

}  // namespace

void write_hf_folder(const std::string& dir, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                     const nlohmann::json& config, const std::string& tokenizer_source_dir,
                     uint64_t max_shard_bytes) {
  ST_CHECK(max_shard_bytes > 0, common::ErrorKind::kConfig, "writing model folder {}: max_shard_bytes must be positive",
           dir);
  ST_CHECK(config.is_object(), common::ErrorKind::kConfig,
           "writing model folder {}: config.json must be a JSON object, got a {}", dir, config.type_name());
  const fs::path root(dir);
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) fail(fmt::format("model folder {}: cannot create it: {}", dir, ec.message()));
  check_no_weights(root);
  if (!tokenizer_source_dir.empty() && !fs::is_directory(tokenizer_source_dir, ec)) {
    fail(fmt::format("writing model folder {}: the tokenizer source {} is not a directory", dir, tokenizer_source_dir));
  }

  // Shards as transformers' shard_checkpoint forms them: start a new shard when the next tensor
  // would push the current one over the limit.
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> shards(1);
  uint64_t shard_bytes = 0;
  uint64_t total_bytes = 0;
  std::set<std::string_view> seen;
  for (const auto& [name, tensor] : tensors) {
    if (!seen.insert(name).second) {
      fail(fmt::format("writing model folder {}: tensor \"{}\" appears twice in the list of tensors", dir, name));
    }
    if (!tensor.defined()) fail(fmt::format("writing model folder {}: tensor \"{}\" is undefined", dir, name));
    common::Dtype dtype;
    try {
      dtype = to_st_dtype(tensor.scalar_type());
    } catch (const common::Error& e) {
      fail(fmt::format("writing model folder {}: tensor \"{}\": {}", dir, name, e.what()));
    }
    const uint64_t nbytes = static_cast<uint64_t>(tensor.numel()) * common::element_size(dtype);
    if (!shards.back().empty() && shard_bytes + nbytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().emplace_back(name, tensor);
    shard_bytes += nbytes;
    total_bytes += nbytes;
  }

  write_file_atomic(root / "config.json", config.dump(2) + "\n");
  if (!tokenizer_source_dir.empty()) {
    for (const char* name : kTokenizerFileNames) {
      const fs::path src = fs::path(tokenizer_source_dir) / name;
      if (fs::is_regular_file(src, ec)) write_file_atomic(root / name, read_small_file(src));
    }
  }

  const std::map<std::string, std::string> shard_metadata{{"format", "pt"}};
  if (shards.size() == 1) {
    write_safetensors((root / kSafeWeightsName).string(), shards[0], shard_metadata);
    return;
  }
  nlohmann::json weight_map = nlohmann::json::object();  // std::map underneath: sorted by name
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
    write_safetensors((root / file).string(), shards[i], shard_metadata);
    for (const auto& [name, tensor] : shards[i]) weight_map[name] = file;
  }
  const nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
  // Last: a folder whose index exists has every shard it names.
  write_file_atomic(root / kSafeWeightsIndexName, index.dump(2) + "\n");
}

}  // namespace shardtune::checkpoint
