// Reading a Hugging Face model folder. The index and the shards are cross-checked in both
// directions, because a checkpoint that silently drops or duplicates a tensor trains garbage.
#include "checkpoint/hf/hf_folder.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/strict_json.h"
#include "common/error.h"

namespace shardtune::checkpoint {

using common::StrictJson;
using common::described;
using common::json_quoted;
using common::kMaxJsonDepth;
using common::parse_json_strict;
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// config.json and index files are kilobytes to a few megabytes; anything far larger is not one.
constexpr uintmax_t kMaxJsonFileBytes = 100'000'000;

[[noreturn]] void fail(const std::string& message,
                       const std::source_location& loc = std::source_location::current()) {
  common::raise(common::ErrorKind::kIo, message, loc);
}

// Parses a JSON file, rejecting duplicate keys.
json read_json_file(const fs::path& path) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) fail(fmt::format("{}: cannot read it: {}", path.string(), ec.message()));
  if (size > kMaxJsonFileBytes) {
    fail(fmt::format("{}: {} bytes, more than the {} bytes a JSON model file may have", path.string(), size,
                     kMaxJsonFileBytes));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(fmt::format("{}: cannot open it: {}", path.string(), std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(fmt::format("{}: read failed", path.string()));

  const std::string contents = text.str();
  StrictJson parsed;
  try {
    parsed = parse_json_strict(contents.data(), contents.data() + contents.size());
  } catch (const json::parse_error& e) {
    // nlohmann counts bytes from 1; report a 0-based offset.
    fail(fmt::format("{}: not valid JSON at byte {}: {}", path.string(), e.byte > 0 ? e.byte - 1 : 0, e.what()));
  } catch (const json::exception& e) {
    // Not only syntax: a number too large for a double, for one, is an out_of_range error.
    fail(fmt::format("{}: not valid JSON: {}", path.string(), e.what()));
  }
  if (parsed.too_deep)
    fail(fmt::format("{}: arrays or objects nested more than {} deep: not a file shardtune reads", path.string(),
                     kMaxJsonDepth));
  if (parsed.duplicate)
    fail(fmt::format("{}: the key {} appears twice in one object", path.string(), json_quoted(parsed.duplicate->second)));
  json out = std::move(parsed.value);
  if (!out.is_object()) fail(fmt::format("{}: the top level is {}, expected an object", path.string(), described(out)));
  return out;
}

// A shard name from an index must name a file inside the folder: a name with a separator or ".."
// could make the reader open any file on the machine.
bool is_plain_file_name(std::string_view name) {
  return !name.empty() && name.find('/') == std::string_view::npos && name.find('\\') == std::string_view::npos &&
         name.find("..") == std::string_view::npos && name.find('\0') == std::string_view::npos;
}

// Every tensor of every shard is listed in the index, under that shard.
void check_index_lists_every_tensor(const std::vector<SafetensorsFile>& files, const std::vector<std::string>& file_names,
                                    const json::object_t& weight_map, const std::string& index) {
  for (size_t slot = 0; slot < files.size(); ++slot) {
    for (const TensorInfo& t : files[slot].tensors()) {
      auto it = weight_map.find(t.name);
      if (it == weight_map.end()) {
        fail(fmt::format("{}: tensor {} is in shard {} but not in the index; the index must list every tensor",
                         index, json_quoted(t.name), files[slot].path()));
      }
      const auto& listed = it->second.get_ref<const std::string&>();
      if (listed != file_names[slot]) {
        fail(fmt::format("{}: tensor {} is in two files, {} and {} (the index names {}); each tensor must be "
                         "stored once", index, json_quoted(t.name), json_quoted(file_names[slot]), json_quoted(listed),
                         json_quoted(listed)));
      }
    }
  }
}

}  // namespace

HfFolder HfFolder::open(const std::string& dir) {
  HfFolder folder;
  folder.dir_ = dir;
  const fs::path root(dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    fail(fmt::format("model folder {}: not a directory{}", dir, ec ? fmt::format(" ({})", ec.message()) : ""));
  }
  const fs::path config_path = root / "config.json";
  if (!fs::exists(config_path, ec)) {
    fail(fmt::format("model folder {}: {} is missing; a Hugging Face model folder needs its config.json", dir,
                     config_path.string()));
  }
  folder.config_ = read_json_file(config_path);

  const fs::path single = root / kSafeWeightsName;
  const fs::path index_path = root / kSafeWeightsIndexName;
  // transformers looks for model.safetensors before the index; a folder with both loads the
  // single file there, so it does here.
  if (fs::exists(single, ec)) {
    folder.files_.push_back(SafetensorsFile::open(single.string()));
    const auto& tensors = folder.files_[0].tensors();
    for (size_t i = 0; i < tensors.size(); ++i) folder.tensors_.emplace(tensors[i].name, Location{0, i});
    return folder;
  }
  if (!fs::exists(index_path, ec)) {
    fail(fmt::format("model folder {}: has neither {} nor {}; only safetensors weights can be read", dir,
                     kSafeWeightsName, kSafeWeightsIndexName));
  }

  const std::string index = index_path.string();
  const json index_json = read_json_file(index_path);
  if (!index_json.contains("weight_map") || !index_json["weight_map"].is_object()) {
    fail(fmt::format("{}: expected an object \"weight_map\" mapping tensor names to shard file names", index));
  }
  const auto& weight_map = index_json["weight_map"].get_ref<const json::object_t&>();
  std::map<std::string, size_t> file_slot;  // shard file name -> position in files_
  std::vector<std::string> file_names;
  for (const auto& [tensor, file] : weight_map) {
    if (!file.is_string()) {
      fail(fmt::format("{}: tensor {} maps to {}, expected a shard file name", index, json_quoted(tensor),
                       described(file)));
    }
    const auto& name = file.get_ref<const std::string&>();
    if (!is_plain_file_name(name)) {
      fail(fmt::format("{}: tensor {} maps to file {}, which is not a plain file name in the folder (no '/', "
                       "'\\' or '..' allowed)", index, json_quoted(tensor), json_quoted(name)));
    }
    if (file_slot.count(name) != 0) continue;
    const fs::path shard = root / name;
    if (!fs::exists(shard, ec)) {
      fail(fmt::format("{}: tensor {} is in shard {}, but {} does not exist", index, json_quoted(tensor), json_quoted(name),
                       shard.string()));
    }
    file_slot.emplace(name, folder.files_.size());
    file_names.push_back(name);
    folder.files_.push_back(SafetensorsFile::open(shard.string()));
  }

  for (const auto& [tensor, file] : weight_map) {
    const size_t slot = file_slot.at(file.get_ref<const std::string&>());
    const SafetensorsFile& shard = folder.files_[slot];
    const TensorInfo* info = shard.find(tensor);
    if (info == nullptr) {
      fail(fmt::format("{}: tensor {} is listed in the index under {}, but that shard ({}) does not contain it",
                       index, json_quoted(tensor), json_quoted(file_names[slot]), shard.path()));
    }
    folder.tensors_.emplace(tensor, Location{slot, static_cast<size_t>(info - shard.tensors().data())});
  }
  check_index_lists_every_tensor(folder.files_, file_names, weight_map, index);
  return folder;
}

std::vector<std::string> HfFolder::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, loc] : tensors_) names.push_back(name);
  return names;
}

const HfFolder::Location& HfFolder::locate(std::string_view tensor) const {
  auto it = tensors_.find(tensor);
  if (it == tensors_.end()) {
    fail(fmt::format("model folder {}: tensor \"{}\" is not in the model ({} tensors)", dir_, tensor,
                     tensors_.size()));
  }
  return it->second;
}

const SafetensorsFile& HfFolder::file_of(std::string_view tensor) const { return files_[locate(tensor).file]; }

const TensorInfo& HfFolder::info(std::string_view tensor) const {
  const Location& loc = locate(tensor);
  return files_[loc.file].tensors()[loc.tensor];
}

std::vector<std::string> HfFolder::tokenizer_files() const {
  std::vector<std::string> present;
  for (const char* name : kTokenizerFileNames) {
    std::error_code ec;
    if (fs::is_regular_file(fs::path(dir_) / name, ec)) present.emplace_back(name);
  }
  return present;
}

}  // namespace shardtune::checkpoint
