// GGUF (version 3), llama.cpp's model file: a header, typed key/value metadata, tensor infos, then
// each tensor's data at the next multiple of the alignment, in the order of the infos (the only
// layout llama.cpp reads). Written as it streams: the metadata and infos first, then one tensor at
// a time, so memory holds one tensor. The file appears whole or not at all (common/atomic_file.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace shardtune::checkpoint {

// ggml's type ids of the tensor types written.
enum class GgmlType : uint32_t { kF32 = 0, kF16 = 1, kBF16 = 30 };

const char* ggml_type_name(GgmlType type);
uint64_t ggml_bytes(GgmlType type, int64_t values);

// fp32 to the type's bytes: F16 and BF16 round to nearest even, as ggml's own conversions do
// (a BF16 NaN stays a quiet NaN).
void encode_values(const float* x, int64_t n, GgmlType type, uint8_t* out);

class GgufWriter {
 public:
  static constexpr uint32_t kAlignment = 32;  // GGUF's default (no general.alignment key)

  explicit GgufWriter(std::string path);
  ~GgufWriter();

  // Metadata, in the order added; each key once.
  void add_u32(const std::string& key, uint32_t value);
  void add_f32(const std::string& key, float value);
  void add_bool(const std::string& key, bool value);
  void add_string(const std::string& key, const std::string& value);
  void add_strings(const std::string& key, const std::vector<std::string>& values);
  void add_i32s(const std::string& key, const std::vector<int32_t>& values);
  void add_f32s(const std::string& key, const std::vector<float>& values);

  // A tensor to come, its shape in PyTorch's (row-major) order; names under 64 bytes.
  void add_tensor(const std::string& name, const std::vector<int64_t>& shape, GgmlType type);

  // After the last add_*: writes the header, the metadata and the tensor infos.
  void begin();
  // The next tensor's bytes (as encode_values gives them), whole, in the order added.
  void write_tensor(const uint8_t* data, uint64_t bytes);
  // After the last tensor: fsync and rename into place.
  void commit();

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    GgmlType type;
    uint64_t offset, bytes;
  };
  void key(const std::string& name, uint32_t type);
  struct File;
  std::unique_ptr<File> file_;
  std::string path_;
  std::vector<uint8_t> metadata_;
  std::vector<std::string> keys_;
  std::vector<Tensor> tensors_;
  uint64_t data_bytes_ = 0;
  size_t next_ = 0;
  bool begun_ = false;
};

}  // namespace shardtune::checkpoint
