// Safetensors reading and writing: round trips of every dtype LibTorch has, the byte layout of the
// reference implementation, a corpus of corrupt files, and the memory bound of reading one tensor.
#include <ATen/ops/empty.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <cstdlib>
#include <limits>
#include <optional>
#include <span>
#include <sstream>

#include "checkpoint/hf/safetensors_file.h"
#include "checkpoint/hf/safetensors_header.h"
#include "checkpoint/hf/safetensors_torch.h"
#include "common/error.h"

#include "tests/unit/temp_dir.h"

namespace shardtune::checkpoint {
namespace {

namespace fs = std::filesystem;

using testing_support::TempDir;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &v, 8);
  return s;
}

// A raw safetensors file: the declared header length (by default the true one), the header text
// and `data_bytes` bytes of data.
std::string raw_file(const std::string& header, size_t data_bytes, std::optional<uint64_t> declared_len = {}) {
  return le64(declared_len.value_or(header.size())) + header + std::string(data_bytes, '\x01');
}

void expect_bit_identical(const at::Tensor& expected, const at::Tensor& actual, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(expected.scalar_type(), actual.scalar_type());
  ASSERT_EQ(expected.sizes().vec(), actual.sizes().vec());
  const at::Tensor e = expected.contiguous();
  ASSERT_TRUE(actual.is_contiguous());
  ASSERT_EQ(e.nbytes(), actual.nbytes());
  if (e.nbytes() > 0) {
    EXPECT_EQ(0, std::memcmp(e.data_ptr(), actual.data_ptr(), e.nbytes()));
  }
}

std::vector<std::pair<std::string, at::Tensor>> every_dtype() {
  using at::TensorOptions;
  std::vector<std::pair<std::string, at::Tensor>> t;
  at::Tensor f64 = at::randn({3, 5}, TensorOptions().dtype(at::kDouble));
  // Values that a lossy or value-based copy would change: NaN payloads, -0, infinities.
  f64.data_ptr<double>()[0] = -0.0;
  f64.data_ptr<double>()[1] = std::numeric_limits<double>::quiet_NaN();
  f64.data_ptr<double>()[2] = -std::numeric_limits<double>::infinity();
  f64.data_ptr<double>()[3] = std::numeric_limits<double>::denorm_min();
  t.emplace_back("f64", f64);
  at::Tensor f32 = at::randn({4, 3, 2}, TensorOptions().dtype(at::kFloat));
  f32.data_ptr<float>()[0] = std::numeric_limits<float>::signaling_NaN();
  t.emplace_back("f32", f32);
  t.emplace_back("f16", at::randn({7}, TensorOptions().dtype(at::kFloat)).to(at::kHalf));
  t.emplace_back("bf16", at::randn({2, 9}, TensorOptions().dtype(at::kFloat)).to(at::kBFloat16));
  at::Tensor i64 = at::randint(-1000, 1000, {6}, TensorOptions().dtype(at::kLong));
  i64.data_ptr<int64_t>()[0] = std::numeric_limits<int64_t>::min();
  i64.data_ptr<int64_t>()[1] = std::numeric_limits<int64_t>::max();
  t.emplace_back("i64", i64);
  t.emplace_back("i32", at::randint(-100000, 100000, {3, 3}, TensorOptions().dtype(at::kInt)));
  t.emplace_back("i16", at::randint(-30000, 30000, {5}, TensorOptions().dtype(at::kShort)));
  t.emplace_back("i8", at::randint(-128, 128, {11}, TensorOptions().dtype(at::kChar)));
  t.emplace_back("u8", at::randint(0, 256, {13}, TensorOptions().dtype(at::kByte)));
  t.emplace_back("bool", at::randint(0, 2, {17}, TensorOptions().dtype(at::kByte)).to(at::kBool));
  at::Tensor scalar = at::empty({}, TensorOptions().dtype(at::kFloat));
  scalar.fill_(3.25);
  t.emplace_back("scalar_f32", scalar);
  at::Tensor scalar_i64 = at::empty({}, TensorOptions().dtype(at::kLong));
  scalar_i64.fill_(-7);
  t.emplace_back("scalar_i64", scalar_i64);
  t.emplace_back("empty_f32", at::empty({0}, TensorOptions().dtype(at::kFloat)));
  t.emplace_back("empty_3d_i16", at::empty({3, 0, 2}, TensorOptions().dtype(at::kShort)));
  // A transposed view: the writer must store the logical (row-major) order.
  t.emplace_back("transposed", at::randn({3, 4}, TensorOptions().dtype(at::kFloat)).t());
  return t;
}

TEST(SafetensorsTest, RoundTripEveryDtypeBitIdentical) {
  TempDir dir("safetensors_test");
  const std::string path = dir.file("all.safetensors");
  const auto tensors = every_dtype();
  write_safetensors(path, tensors);
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.path(), path);
  EXPECT_EQ(file.file_size(), fs::file_size(path));
  ASSERT_EQ(file.tensors().size(), tensors.size());
  EXPECT_TRUE(file.metadata().empty());
  for (const auto& [name, tensor] : tensors) {
    expect_bit_identical(tensor, read_tensor(file, name), name);
    EXPECT_EQ(file.at(name).dtype, to_st_dtype(tensor.scalar_type())) << name;
  }
  // Data is stored in the given order, so tensors() (sorted by offset) follows it; empty tensors
  // share an offset with their neighbour and are ordered by name there.
  std::vector<std::string> stored, given;
  for (const TensorInfo& t : file.tensors()) {
    if (t.nbytes > 0) stored.push_back(t.name);
  }
  for (const auto& [name, tensor] : tensors) {
    if (tensor.numel() > 0) given.push_back(name);
  }
  EXPECT_EQ(stored, given);
  EXPECT_EQ(file.at("scalar_f32").shape, std::vector<int64_t>{});
  EXPECT_EQ(file.at("empty_3d_i16").nbytes, 0u);
}

TEST(SafetensorsTest, DtypeNamesAndSizes) {
  using common::Dtype;
  for (auto d : {Dtype::kF64, Dtype::kF32, Dtype::kF16, Dtype::kBF16, Dtype::kI64, Dtype::kI32, Dtype::kI16, Dtype::kI8,
                 Dtype::kU8, Dtype::kBool, Dtype::kF8E4M3, Dtype::kF8E5M2}) {
    EXPECT_EQ(common::parse_safetensors_name(common::safetensors_name(d)), d);
  }
  EXPECT_EQ(common::element_size(common::Dtype::kBF16), 2u);
  EXPECT_EQ(common::element_size(common::Dtype::kF8E5M2), 1u);
  EXPECT_FALSE(common::parse_safetensors_name("f32").has_value());
  EXPECT_FALSE(common::parse_safetensors_name("F8_E4M3FN").has_value());
  // LibTorch 1.13 has no float8: the bridge says so instead of picking another type.
  try {
    to_scalar_type(common::Dtype::kF8E4M3);
    SUCCEED() << "this LibTorch has float8";
  } catch (const common::Error& e) {
    EXPECT_NE(std::string(e.what()).find("F8_E4M3"), std::string::npos) << e.what();
  }
}

// The exact bytes the reference implementation writes for one F32 tensor: the header is padded
// with spaces to a multiple of 8 and "__metadata__" comes first when present.
TEST(SafetensorsTest, MatchesReferenceLayoutByteForByte) {
  TempDir dir("safetensors_test");
  at::Tensor w = at::empty({2}, at::TensorOptions().dtype(at::kFloat));
  w.data_ptr<float>()[0] = 1.0f;
  w.data_ptr<float>()[1] = -2.0f;
  const std::string data("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);

  write_safetensors(dir.file("a.safetensors"), {{"w", w}});
  const std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";  // 54 bytes
  EXPECT_EQ(read_file(dir.file("a.safetensors")), le64(56) + header + "  " + data);

  write_safetensors(dir.file("b.safetensors"), {{"w", w}}, {{"format", "pt"}});
  const std::string header_meta =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";  // 85 bytes
  EXPECT_EQ(read_file(dir.file("b.safetensors")), le64(88) + header_meta + "   " + data);
}

TEST(SafetensorsTest, MetadataRoundTrip) {
  TempDir dir("safetensors_test");
  const std::string path = dir.file("meta.safetensors");
  const std::map<std::string, std::string> metadata{{"format", "pt"}, {"step", "1200"}, {"note", "ünïcode \"quoted\""}};
  write_safetensors(path, {{"x", at::randn({2, 2}, at::TensorOptions().dtype(at::kFloat))}}, metadata);
  EXPECT_EQ(SafetensorsFile::open(path).metadata(), metadata);
}

TEST(SafetensorsTest, ReadsAByteRangeOfOneTensor) {
  TempDir dir("safetensors_test");
  const std::string path = dir.file("range.safetensors");
  at::Tensor a = at::randint(0, 1000, {100}, at::TensorOptions().dtype(at::kInt));
  at::Tensor b = at::randn({10}, at::TensorOptions().dtype(at::kDouble));
  write_safetensors(path, {{"a", a}, {"b", b}});
  const SafetensorsFile file = SafetensorsFile::open(path);
  const TensorInfo& info = file.at("a");
  EXPECT_EQ(info.nbytes, 400u);

  std::vector<int32_t> part(5);
  file.read_bytes(info, 40, 20, part.data());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(part[i], a.data_ptr<int32_t>()[10 + i]);

  const auto view = file.bytes(file.at("b"));
  ASSERT_EQ(view.size(), 80u);
  EXPECT_EQ(0, std::memcmp(view.data(), b.data_ptr(), 80));

  try {
    file.read_bytes(info, 390, 20, part.data());
    FAIL() << "expected an error";
  } catch (const common::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("\"a\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("[390, 390 + 20)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("has 400 bytes"), std::string::npos) << msg;
  }
  try {
    file.at("c");
    FAIL() << "expected an error";
  } catch (const common::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("\"c\" is not in file"), std::string::npos) << e.what();
  }
  EXPECT_EQ(file.find("c"), nullptr);
}

TEST(SafetensorsTest, WriterRejectsWhatTheFormatCannotHold) {
  TempDir dir("safetensors_test");
  const std::string path = dir.file("bad.safetensors");
  const at::Tensor x = at::randn({2}, at::TensorOptions().dtype(at::kFloat));
  auto expect_error = [&](const std::vector<std::pair<std::string, at::Tensor>>& tensors, const std::string& want) {
    try {
      write_safetensors(path, tensors);
      FAIL() << "expected an error containing " << want;
    } catch (const common::Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(path));
    EXPECT_FALSE(fs::exists(path + ".tmp"));
  };
  expect_error({{"x", x}, {"x", x}}, "appears twice");
  expect_error({{"__metadata__", x}}, "reserved");
  expect_error({{"c", at::randn({2}, at::TensorOptions().dtype(at::kComplexFloat))}}, "cannot be stored");
}

TEST(SafetensorsTest, BoolBytesOtherThanZeroOrOneAreRejected) {
  TempDir dir("safetensors_test");
  const std::string path = dir.file("bool.safetensors");
  const std::string header = R"({"b":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})";
  write_file(path, le64(header.size()) + header + std::string("\x01\x00\x07", 3));
  const SafetensorsFile file = SafetensorsFile::open(path);
  try {
    read_tensor(file, "b");
    FAIL() << "expected an error";
  } catch (const common::Error& e) {
    EXPECT_NE(std::string(e.what()).find("byte value 7 at element 2"), std::string::npos) << e.what();
  }
}

struct CorruptCase {
  std::string name;
  std::string bytes;
  std::vector<std::string> expected;  // substrings of the message besides the path
};

std::vector<CorruptCase> corrupt_corpus() {
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  std::vector<CorruptCase> c;
  c.push_back({"too_short", std::string("\x05\x00\x00", 3), {"3 bytes long", "8-byte header length"}});
  c.push_back({"header_len_beyond_file", raw_file("{}", 12, 1000), {"says 1000 bytes", "only 14 bytes follow"}});
  c.push_back({"header_len_huge", raw_file("{}", 0, uint64_t{1} << 63), {"more than the 100000000 bytes"}});
  c.push_back({"invalid_json", raw_file(R"({"a": {"dtype": )", 0), {"not valid JSON at header byte 16", "file offset 24"}});
  c.push_back({"number_overflow", raw_file(R"({"a": 1E400})", 0), {"not valid", "number overflow"}});
  c.push_back({"invalid_utf8", raw_file("{\"a\xff\": 1}", 0), {"not valid JSON"}});
  c.push_back({"non_object_top_level", raw_file("[1, 2]", 0), {"the header JSON is an array, expected an object"}});
  c.push_back({"entry_not_object", raw_file(R"({"a": 5})", 0), {"tensor \"a\"", "is a number"}});
  c.push_back({"unknown_dtype", raw_file(R"({"a":{"dtype":"F31","shape":[2],"data_offsets":[0,8]}})", 8),
               {"tensor \"a\"", "unknown dtype \"F31\""}});
  c.push_back({"dtype_not_string", raw_file(R"({"a":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", 8),
               {"tensor \"a\"", "\"dtype\" is a number"}});
  c.push_back({"missing_key", raw_file(R"({"a":{"dtype":"F32","shape":[2]}})", 0),
               {"tensor \"a\"", "no \"data_offsets\""}});
  c.push_back({"extra_key", raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", 8),
               {"tensor \"a\"", "unexpected key \"x\""}});
  c.push_back({"size_mismatch", raw_file(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 20),
               {"tensor \"a\"", "span 20 bytes, but shape [2,3] of F32 needs 24 bytes"}});
  c.push_back({"begin_after_end", raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8),
               {"tensor \"a\"", "[8, 4] has begin > end"}});
  c.push_back({"range_beyond_file", raw_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8),
               {"tensor \"a\"", "ends beyond the data area, which has 8 bytes"}});
  c.push_back({"offsets_not_pair", raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8),
               {"tensor \"a\"", "expected [begin, end]"}});
  c.push_back({"overlap",
               raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
               {"tensors \"a\" (data_offsets [0, 8]) and \"b\" (data_offsets [4, 12]) overlap"}});
  c.push_back({"gap",
               raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                        R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", 12),
               {"gap in the data area: bytes [4, 8)", "between tensor \"a\" and tensor \"b\"", "no gaps"}});
  c.push_back({"gap_before_first", raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
               {"gap in the data area: bytes [0, 4)", "before tensor \"a\""}});
  c.push_back({"trailing_bytes", raw_file("{" + ok_entry + "}", 12),
               {"trailing bytes", "the data area has 12 bytes but the tensors end at offset 8", "[8, 12)"}});
  c.push_back({"negative_shape", raw_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0),
               {"tensor \"a\"", "dimension 0 = -1, expected a non-negative integer"}});
  c.push_back({"float_shape", raw_file(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", 8),
               {"tensor \"a\"", "dimension 0 = 2.0"}});
  c.push_back({"shape_overflow",
               raw_file(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4611686018427387904],"data_offsets":[0,0]}})", 0),
               {"tensor \"a\"", "more than 2^64 bytes"}});
  c.push_back({"shape_overflow_by_dtype",
               raw_file(R"({"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})", 0),
               {"tensor \"a\"", "more than 2^64 bytes"}});
  c.push_back({"non_string_metadata", raw_file(R"({"__metadata__":{"format":1}})", 0),
               {"\"__metadata__\" key \"format\" holds a number, expected a string"}});
  c.push_back({"metadata_not_object", raw_file(R"({"__metadata__":"pt"})", 0),
               {"\"__metadata__\" is a string, expected an object"}});
  c.push_back({"duplicate_tensor", raw_file("{" + ok_entry + "," + ok_entry + "}", 8),
               {"tensor \"a\" is listed twice"}});
  return c;
}

TEST(SafetensorsTest, CorruptFilesGiveErrorsNamingFileAndProblem) {
  TempDir dir("safetensors_test");
  for (const CorruptCase& c : corrupt_corpus()) {
    SCOPED_TRACE(c.name);
    const std::string path = dir.file(c.name + ".safetensors");
    write_file(path, c.bytes);
    for (bool in_memory : {false, true}) {
      try {
        if (in_memory) {
          parse_safetensors_header(std::as_bytes(std::span(c.bytes.data(), c.bytes.size())), path);
        } else {
          SafetensorsFile::open(path);
        }
        ADD_FAILURE() << "no error for " << c.name;
      } catch (const common::Error& e) {
        const std::string msg = e.what();
        EXPECT_EQ(e.kind(), common::ErrorKind::kIo);
        EXPECT_NE(msg.find(path), std::string::npos) << msg;
        for (const std::string& want : c.expected) EXPECT_NE(msg.find(want), std::string::npos) << "want: " << want << "\n got: " << msg;
      }
    }
  }
}

TEST(SafetensorsTest, AcceptsEdgeCasesTheReferenceAccepts) {
  TempDir dir("safetensors_test");
  // Padding spaces after the JSON, an empty file of tensors, and empty tensors sharing an offset.
  const std::string path = dir.file("edge.safetensors");
  write_file(path, raw_file(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                            R"("b":{"dtype":"I8","shape":[2],"data_offsets":[0,2]},)"
                            R"("c":{"dtype":"F16","shape":[3,0],"data_offsets":[2,2]}}      )", 2));
  const SafetensorsFile file = SafetensorsFile::open(path);
  ASSERT_EQ(file.tensors().size(), 3u);
  EXPECT_EQ(file.tensors()[0].name, "a");
  EXPECT_EQ(file.tensors()[1].name, "b");
  EXPECT_EQ(file.tensors()[2].name, "c");

  write_file(path, raw_file("{}", 0));
  EXPECT_TRUE(SafetensorsFile::open(path).tensors().empty());
}

// Peak resident memory of this process in bytes, and the current one.
std::pair<uint64_t, uint64_t> hwm_and_rss() {
  std::ifstream status("/proc/self/status");
  std::string line;
  uint64_t hwm = 0, rss = 0;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) hwm = std::stoull(line.substr(6)) * 1024;
    if (line.rfind("VmRSS:", 0) == 0) rss = std::stoull(line.substr(6)) * 1024;
  }
  return {hwm, rss};
}

// Reading one small tensor of a file with a 256 MB neighbour must not read or allocate the
// neighbour. Measured in a forked child so that the parent's allocations do not blur the peak.
TEST(SafetensorsMemoryTest, ReadingOneTensorDoesNotLoadTheRest) {
  TempDir dir("safetensors_test");
  const std::string path = dir.file("big.safetensors");
  constexpr uint64_t kLarge = 256ull << 20;
  {
    const std::string header = fmt::format(
        R"({{"small":{{"dtype":"F32","shape":[4],"data_offsets":[0,16]}},)"
        R"("large":{{"dtype":"U8","shape":[{}],"data_offsets":[16,{}]}}}})", kLarge, 16 + kLarge);
    std::ofstream out(path, std::ios::binary);
    out << le64(header.size()) << header;
    const float small[4] = {1.5f, -2.0f, 3.0f, 0.25f};
    out.write(reinterpret_cast<const char*>(small), sizeof small);
    const std::string chunk(1 << 20, '\0');  // streamed, so the test itself never holds 256 MB
    for (uint64_t i = 0; i < kLarge / chunk.size(); ++i) out.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    ASSERT_TRUE(out.good());
  }

  int pipe_fd[2];
  ASSERT_EQ(::pipe(pipe_fd), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(pipe_fd[0]);
    // Results go back as text: {small ok, growth after reading small, growth after touching large}.
    std::string report = "error";
    try {
      // Reset the peak to the current size where the kernel allows it; fork usually did already.
      std::ofstream("/proc/self/clear_refs") << "5";
      (void)at::empty({4}, at::TensorOptions().dtype(at::kFloat));  // warm LibTorch's allocator
      const uint64_t before = hwm_and_rss().second;
      const SafetensorsFile file = SafetensorsFile::open(path);
      const at::Tensor small = read_tensor(file, "small");
      const bool ok = small.data_ptr<float>()[0] == 1.5f && small.data_ptr<float>()[3] == 0.25f;
      const uint64_t after_small = hwm_and_rss().first;
      // The control: touching the large tensor must show up, or the measurement means nothing.
      uint64_t sum = 0;
      const auto large = file.bytes(file.at("large"));
      for (size_t i = 0; i < large.size(); i += 4096) sum += static_cast<uint8_t>(large[i]);
      const uint64_t after_large = hwm_and_rss().first;
      report = fmt::format("{} {} {} {}", ok ? 1 : 0, after_small - before, after_large - before, sum);
    } catch (const std::exception& e) {
      report = std::string("exception ") + e.what();
    }
    (void)!::write(pipe_fd[1], report.data(), report.size());
    ::_exit(0);
  }
  ::close(pipe_fd[1]);
  std::string report;
  char buf[512];
  ssize_t n;
  while ((n = ::read(pipe_fd[0], buf, sizeof buf)) > 0) report.append(buf, static_cast<size_t>(n));
  ::close(pipe_fd[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << report;

  std::istringstream in(report);
  int ok = 0;
  uint64_t grew_small = 0, grew_large = 0, sum = 1;
  ASSERT_TRUE(in >> ok >> grew_small >> grew_large >> sum) << report;
  EXPECT_EQ(ok, 1);
  EXPECT_EQ(sum, 0u);
  EXPECT_LT(grew_small, 32ull << 20) << "peak RSS grew by " << grew_small << " bytes reading a 16-byte tensor";
  EXPECT_GT(grew_large, 200ull << 20) << "touching the 256 MB tensor should raise the peak; the measurement is broken";
  RecordProperty("peak_rss_growth_small_bytes", std::to_string(grew_small));
}

}  // namespace
}  // namespace shardtune::checkpoint
