// A Hugging Face model folder opened for reading: config.json, the safetensors weights (one
// model.safetensors, or shards listed by model.safetensors.index.json) and the tokenizer files.
#pragma once

#include <cstddef>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/hf/safetensors_file.h"

namespace shardtune::checkpoint {

class HfFolder {
 public:
  // Parses config.json and opens every weight file once, checking that the index and the shards
  // agree exactly; throws common::Error(kIo) naming the folder, file and tensor on any problem.
  static HfFolder open(const std::string& dir);

  HfFolder(HfFolder&&) noexcept = default;
  HfFolder& operator=(HfFolder&&) noexcept = default;
  HfFolder(const HfFolder&) = delete;
  HfFolder& operator=(const HfFolder&) = delete;

  const std::string& dir() const { return dir_; }
  const nlohmann::json& config() const { return config_; }

  // Every tensor of the model, sorted by name.
  std::vector<std::string> tensor_names() const;
  // The weight file holding `tensor`; throws common::Error(kIo) naming the folder and the tensor
  // when the model has no such tensor.
  const SafetensorsFile& file_of(std::string_view tensor) const;
  const TensorInfo& info(std::string_view tensor) const;
  // The weight files: model.safetensors, or the shards in the index's order of first mention.
  const std::vector<SafetensorsFile>& files() const { return files_; }

  // Which of the tokenizer and generation files transformers looks for exist in the folder, in
  // the order of kTokenizerFileNames.
  std::vector<std::string> tokenizer_files() const;

 private:
  struct Location {
    size_t file;    // into files_
    size_t tensor;  // into files_[file].tensors()
  };
  HfFolder() = default;
  const Location& locate(std::string_view tensor) const;

  std::string dir_;
  nlohmann::json config_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, Location, std::less<>> tensors_;
};

// The files that travel with a model besides its weights and config.json.
inline constexpr const char* kTokenizerFileNames[] = {"tokenizer.json", "tokenizer.model", "tokenizer_config.json",
                                                      "special_tokens_map.json", "generation_config.json"};

inline constexpr const char* kSafeWeightsName = "model.safetensors";
inline constexpr const char* kSafeWeightsIndexName = "model.safetensors.index.json";

}  // namespace shardtune::checkpoint
