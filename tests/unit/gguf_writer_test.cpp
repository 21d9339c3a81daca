// The GGUF writer's number conversions against LibTorch's own (float to half and to bfloat16,
// both round to nearest even), and its layout against the format's rules: header, typed metadata,
// tensor infos with ggml's dimension order, each tensor's data at its offset, aligned to 32.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <vector>

#include "checkpoint/gguf_writer.h"
#include "common/error.h"

namespace shardtune::checkpoint {
namespace {

std::vector<float> awkward_values() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, 1e9f, -1e9f,
                          6.1035156e-5f, 6.0975552e-5f, 5.9604645e-8f, 2.9802322e-8f, 2.98023259e-8f, 1e-10f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
                          3.3895314e38f, 1.00048828125f, 1.00146484375f, 1.0009765625f};
  // Values on every tie of half and bfloat16 precision, and random ones across the range.
  for (int e = -30; e <= 20; ++e)
    for (uint32_t m : {0x1000u, 0x3000u, 0x8000u, 0x18000u, 0x7FFFu, 0x1FFFu})
      v.push_back(std::ldexp(1.0f + static_cast<float>(m) / 8388608.0f, e));
  const at::Tensor r = at::randn({20000}, at::TensorOptions().dtype(at::kFloat)) * 300;
  v.insert(v.end(), r.data_ptr<float>(), r.data_ptr<float>() + r.numel());
  return v;
}

TEST(GgufWriter, HalfAndBfloat16AreLibTorchsRoundToNearestEven) {
  at::manual_seed(5);
  const std::vector<float> v = awkward_values();
  const at::Tensor x = at::from_blob(const_cast<float*>(v.data()), {static_cast<int64_t>(v.size())}, at::kFloat);
  for (const auto& [type, torch_type] : {std::pair{GgmlType::kF16, at::kHalf}, std::pair{GgmlType::kBF16, at::kBFloat16}}) {
    std::vector<uint8_t> ours(v.size() * 2);
    encode_values(v.data(), static_cast<int64_t>(v.size()), type, ours.data());
    const at::Tensor want = x.to(torch_type).contiguous();
    for (size_t i = 0; i < v.size(); ++i) {
      uint16_t a, b;
      std::memcpy(&a, ours.data() + 2 * i, 2);
      std::memcpy(&b, reinterpret_cast<const uint8_t*>(want.data_ptr()) + 2 * i, 2);
      ASSERT_EQ(a, b) << ggml_type_name(type) << " of " << v[i] << " (value " << i << ")";
    }
  }
  // A NaN stays a NaN.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  uint8_t h[2];
  encode_values(&nan, 1, GgmlType::kF16, h);
  EXPECT_EQ(h[1] & 0x7C, 0x7C);
  EXPECT_NE(h[0] | (h[1] & 0x03), 0);
}

template <class T>
T take(std::ifstream& in) {
  T v;
  in.read(reinterpret_cast<char*>(&v), sizeof(T));
  return v;
}
std::string take_string(std::ifstream& in) {
  const auto n = take<uint64_t>(in);
  std::string s(n, '\0');
  in.read(s.data(), static_cast<std::streamsize>(n));
  return s;
}

TEST(GgufWriter, LayoutFollowsTheFormat) {
  const std::string path = (std::filesystem::temp_directory_path() / "shardtune_gguf_test.gguf").string();
  {
    GgufWriter w(path);
    w.add_string("general.architecture", "llama");
    w.add_u32("llama.block_count", 2);
    w.add_strings("tokenizer.ggml.tokens", {"a", "bc"});
    w.add_tensor("t.weight", {3, 5}, GgmlType::kF32);   // 60 bytes, padded to 64
    w.add_tensor("n.weight", {7}, GgmlType::kF16);      // 14 bytes
    EXPECT_THROW(w.add_u32("llama.block_count", 3), common::Error);  // a key twice
    w.begin();
    std::vector<float> a(15);
    for (int i = 0; i < 15; ++i) a[static_cast<size_t>(i)] = static_cast<float>(i);
    std::vector<uint8_t> bytes(60);
    encode_values(a.data(), 15, GgmlType::kF32, bytes.data());
    EXPECT_THROW(w.write_tensor(bytes.data(), 59), common::Error);
    w.write_tensor(bytes.data(), 60);
    std::vector<uint8_t> half(14);
    encode_values(a.data(), 7, GgmlType::kF16, half.data());
    w.write_tensor(half.data(), 14);
    w.commit();
  }
  std::ifstream in(path, std::ios::binary);
  char magic[4];
  in.read(magic, 4);
  EXPECT_EQ(std::string(magic, 4), "GGUF");
  EXPECT_EQ(take<uint32_t>(in), 3u);
  EXPECT_EQ(take<uint64_t>(in), 2u);  // tensors
  EXPECT_EQ(take<uint64_t>(in), 3u);  // keys
  EXPECT_EQ(take_string(in), "general.architecture");
  EXPECT_EQ(take<uint32_t>(in), 8u);
  EXPECT_EQ(take_string(in), "llama");
  EXPECT_EQ(take_string(in), "llama.block_count");
  EXPECT_EQ(take<uint32_t>(in), 4u);
  EXPECT_EQ(take<uint32_t>(in), 2u);
  EXPECT_EQ(take_string(in), "tokenizer.ggml.tokens");
  EXPECT_EQ(take<uint32_t>(in), 9u);
  EXPECT_EQ(take<uint32_t>(in), 8u);
  EXPECT_EQ(take<uint64_t>(in), 2u);
  EXPECT_EQ(take_string(in), "a");
  EXPECT_EQ(take_string(in), "bc");
  EXPECT_EQ(take_string(in), "t.weight");
  EXPECT_EQ(take<uint32_t>(in), 2u);
  EXPECT_EQ(take<uint64_t>(in), 5u);  // ne[0]: the innermost dimension
  EXPECT_EQ(take<uint64_t>(in), 3u);
  EXPECT_EQ(take<uint32_t>(in), 0u);
  EXPECT_EQ(take<uint64_t>(in), 0u);
  EXPECT_EQ(take_string(in), "n.weight");
  EXPECT_EQ(take<uint32_t>(in), 1u);
  EXPECT_EQ(take<uint64_t>(in), 7u);
  EXPECT_EQ(take<uint32_t>(in), 1u);
  EXPECT_EQ(take<uint64_t>(in), 64u);
  const auto data = static_cast<uint64_t>((static_cast<uint64_t>(in.tellg()) + 31) / 32 * 32);
  in.seekg(static_cast<std::streamoff>(data + 4 * 7));
  EXPECT_EQ(take<float>(in), 7.0f);
  in.seekg(static_cast<std::streamoff>(data + 64 + 2 * 3));
  EXPECT_EQ(take<uint16_t>(in), 0x4200u);  // 3.0 in half
  EXPECT_EQ(std::filesystem::file_size(path), data + 64 + 32);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace shardtune::checkpoint
