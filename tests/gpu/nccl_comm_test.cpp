// NcclComm at world size 1 on device 0: every collective, in fp32, bf16 and fp16, against results
// computed on the host; and the error reporting of check_nccl, which needs no GPU.
#include "runtime/dist/nccl_comm.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "runtime/dist/cuda_check.h"

namespace shardtune::dist {
namespace {

constexpr double kTimeoutS = 60.0;
constexpr size_t kCount = 1000;  // elements per rank; not a power of two on purpose

// 16-bit float bit patterns made on the host with round-to-nearest-even, so the test needs
// neither LibTorch nor cuda_fp16.h.

uint16_t float_to_bf16(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x0040);  // stay a quiet NaN
  // Adding 0x7fff plus the lowest kept bit rounds half-way cases to the even neighbour.
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

float bf16_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

uint16_t float_to_fp16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  uint32_t magnitude = bits & 0x7fffffff;
  if (magnitude > 0x7f800000) return sign | 0x7e00;   // NaN
  if (magnitude >= 0x477ff000) return sign | 0x7c00;  // >= 65520 rounds to infinity
  if (magnitude < 0x38800000) {
    // Below 2^-14: fp16 subnormals count in units of 2^-24. Scaling by 2^24 is exact and
    // nearbyint rounds half to even; 1024 units is the smallest normal, whose encoding it is.
    return sign | static_cast<uint16_t>(std::nearbyint(std::fabs(f) * 16777216.0f));
  }
  // Normal: rebias the exponent (127 -> 15) and round the mantissa from 23 to 10 bits; a carry
  // out of the mantissa correctly bumps the exponent.
  magnitude += 0x0fff + ((magnitude >> 13) & 1);
  magnitude -= (127u - 15u) << 23;
  return sign | static_cast<uint16_t>(magnitude >> 13);
}

float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ff;
  if (exponent == 0) {
    const float value = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -value : value;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000 | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

// Host buffers in the device layout of each element type.
std::vector<std::byte> encode(common::Dtype dtype, const std::vector<float>& values) {
  std::vector<std::byte> bytes(values.size() * element_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == common::Dtype::kF32) {
      std::memcpy(bytes.data() + 4 * i, &values[i], 4);
    } else {
      const uint16_t bits = dtype == common::Dtype::kBF16 ? float_to_bf16(values[i]) : float_to_fp16(values[i]);
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
    }
  }
  return bytes;
}

std::vector<float> decode(common::Dtype dtype, const std::vector<std::byte>& bytes) {
  std::vector<float> values(bytes.size() / element_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == common::Dtype::kF32) {
      std::memcpy(&values[i], bytes.data() + 4 * i, 4);
    } else {
      uint16_t bits = 0;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      values[i] = dtype == common::Dtype::kBF16 ? bf16_to_float(bits) : fp16_to_float(bits);
    }
  }
  return values;
}

// What rank `rank` contributes at element `i`: small multiples of 1/2, exact in all three types,
// different on every rank, so each rank can work out every other rank's input.
float input_value(int rank, size_t i) {
  return static_cast<float>(static_cast<int>((i * 7 + static_cast<size_t>(rank) * 3) % 23) - 11) * 0.5f;
}

std::vector<float> rank_input(int rank, size_t count) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = input_value(rank, i);
  return values;
}

float reduce_reference(ReduceOp op, int size, size_t i) {
  float acc = input_value(0, i);
  for (int r = 1; r < size; ++r) {
    const float v = input_value(r, i);
    if (op == ReduceOp::kMax) acc = std::max(acc, v);
    else if (op == ReduceOp::kMin) acc = std::min(acc, v);
    else acc += v;
  }
  return op == ReduceOp::kAvg ? acc / static_cast<float>(size) : acc;
}

// Half a unit in the last place of the type, relative: the most one rounding can move a value.
float tolerance(common::Dtype dtype, float expected) {
  const float eps = dtype == common::Dtype::kF32 ? 0x1p-24f : dtype == common::Dtype::kBF16 ? 0x1p-8f : 0x1p-11f;
  return eps * std::max(1.0f, std::fabs(expected));
}

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) { ST_CUDA_CHECK(cudaMalloc(&ptr_, std::max<size_t>(bytes, 1))); }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

const common::Dtype kFloatTypes[] = {common::Dtype::kF32, common::Dtype::kBF16, common::Dtype::kF16};

class NcclCommTest : public ::testing::Test {
 protected:
  // One communicator for the suite, torn down before main() calls MPI_Finalize.
  static void SetUpTestSuite() {
    if (visible_gpu_count() == 0) return;
    comm_ = NcclComm::create(MPI_COMM_SELF, 0, kTimeoutS);
  }
  static void TearDownTestSuite() { comm_.reset(); }

  void SetUp() override {
    if (visible_gpu_count() == 0) return;
    ASSERT_TRUE(comm_.has_value()) << "NcclComm::create failed in SetUpTestSuite (see above)";
    ST_CUDA_CHECK(cudaStreamCreate(&stream_));
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // Uploads `input`, runs `collective(send, recv)` on the stream, waits, and returns recv
  // (`out_count` elements) decoded to float.
  std::vector<float> run(common::Dtype dtype, const std::vector<float>& input, size_t out_count,
                         const std::function<void(const void*, void*)>& collective) {
    const std::vector<std::byte> host_in = encode(dtype, input);
    DeviceBuffer send(host_in.size());
    DeviceBuffer recv(out_count * element_size(dtype));
    ST_CUDA_CHECK(cudaMemcpyAsync(send.get(), host_in.data(), host_in.size(), cudaMemcpyHostToDevice, stream_));
    ST_CUDA_CHECK(cudaMemsetAsync(recv.get(), 0xff, recv.bytes(), stream_));  // NaN/garbage if untouched
    collective(send.get(), recv.get());
    comm_->synchronize(stream_, "test collective");
    std::vector<std::byte> host_out(recv.bytes());
    ST_CUDA_CHECK(cudaMemcpyAsync(host_out.data(), recv.get(), recv.bytes(), cudaMemcpyDeviceToHost, stream_));
    ST_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return decode(dtype, host_out);
  }

  static void expect_close(common::Dtype dtype, const std::vector<float>& got, const std::vector<float>& want) {
    ASSERT_EQ(got.size(), want.size());
    size_t reported = 0;
    for (size_t i = 0; i < got.size() && reported < 5; ++i) {
      if (!(std::fabs(got[i] - want[i]) <= tolerance(dtype, want[i]))) {
        ADD_FAILURE() << short_name(dtype) << " element " << i << ": got " << got[i] << ", want " << want[i];
        ++reported;
      }
    }
  }

  static inline std::optional<NcclComm> comm_;
  cudaStream_t stream_ = nullptr;
};

TEST_F(NcclCommTest, ReportsItsPlaceInTheGroup) {
  if (shardtune::dist::visible_gpu_count() == 0) GTEST_SKIP() << "no GPU visible: NCCL tests need one";
  ASSERT_TRUE(comm_.has_value());
  EXPECT_TRUE(comm_->valid());
  EXPECT_EQ(comm_->rank(), 0);
  EXPECT_EQ(comm_->size(), 1);
  EXPECT_EQ(comm_->device(), 0);
}

TEST_F(NcclCommTest, AllGather) {
  if (shardtune::dist::visible_gpu_count() == 0) GTEST_SKIP() << "no GPU visible: NCCL tests need one";
  const int size = comm_->size();
  std::vector<float> want;
  for (int r = 0; r < size; ++r) {
    const std::vector<float> part = rank_input(r, kCount);
    want.insert(want.end(), part.begin(), part.end());
  }
  for (common::Dtype dtype : kFloatTypes) {
    SCOPED_TRACE(short_name(dtype));
    const auto got = run(dtype, rank_input(comm_->rank(), kCount), size * kCount, [&](const void* s, void* r) {
      comm_->all_gather(s, r, kCount, dtype, stream_);
    });
    expect_close(dtype, got, want);
  }
}

TEST_F(NcclCommTest, ReduceScatterSumAndAvg) {
  if (shardtune::dist::visible_gpu_count() == 0) GTEST_SKIP() << "no GPU visible: NCCL tests need one";
  const int size = comm_->size();
  const int rank = comm_->rank();
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    std::vector<float> want(kCount);
    for (size_t i = 0; i < kCount; ++i) want[i] = reduce_reference(op, size, rank * kCount + i);
    for (common::Dtype dtype : kFloatTypes) {
      SCOPED_TRACE(fmt::format("{} {}", to_string(op), short_name(dtype)));
      const auto got = run(dtype, rank_input(rank, size * kCount), kCount, [&](const void* s, void* r) {
        comm_->reduce_scatter(s, r, kCount, dtype, op, stream_);
      });
      expect_close(dtype, got, want);
    }
  }
}

TEST_F(NcclCommTest, AllReduceSumAndMax) {
  if (shardtune::dist::visible_gpu_count() == 0) GTEST_SKIP() << "no GPU visible: NCCL tests need one";
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    std::vector<float> want(kCount);
    for (size_t i = 0; i < kCount; ++i) want[i] = reduce_reference(op, comm_->size(), i);
    for (common::Dtype dtype : kFloatTypes) {
      SCOPED_TRACE(fmt::format("{} {}", to_string(op), short_name(dtype)));
      const auto got = run(dtype, rank_input(comm_->rank(), kCount), kCount, [&](const void* s, void* r) {
        comm_->all_reduce(s, r, kCount, dtype, op, stream_);
      });
      expect_close(dtype, got, want);
    }
  }
}

TEST_F(NcclCommTest, Broadcast) {
  if (shardtune::dist::visible_gpu_count() == 0) GTEST_SKIP() << "no GPU visible: NCCL tests need one";
  const int root = comm_->size() - 1;
  for (common::Dtype dtype : kFloatTypes) {
    SCOPED_TRACE(short_name(dtype));
    const auto got = run(dtype, rank_input(comm_->rank(), kCount), kCount, [&](const void* s, void* r) {
      comm_->broadcast(s, r, kCount, dtype, root, stream_);
    });
    expect_close(dtype, got, rank_input(root, kCount));
  }
}

TEST_F(NcclCommTest, BroadcastRootOutsideGroupThrowsWithoutAborting) {
  if (shardtune::dist::visible_gpu_count() == 0) GTEST_SKIP() << "no GPU visible: NCCL tests need one";
  DeviceBuffer buf(sizeof(float));
  EXPECT_THROW(comm_->broadcast(buf.get(), buf.get(), 1, common::Dtype::kF32, comm_->size(), stream_), common::Error);
  EXPECT_TRUE(comm_->valid());
}

TEST_F(NcclCommTest, BarrierCompletesRepeatedly) {
  if (shardtune::dist::visible_gpu_count() == 0) GTEST_SKIP() << "no GPU visible: NCCL tests need one";
  for (int i = 0; i < 3; ++i) comm_->barrier(stream_);
  EXPECT_TRUE(comm_->valid());
}

TEST_F(NcclCommTest, MoveLeavesTheSourceEmpty) {
  if (shardtune::dist::visible_gpu_count() == 0) GTEST_SKIP() << "no GPU visible: NCCL tests need one";
  NcclComm moved = std::move(*comm_);
  EXPECT_TRUE(moved.valid());
  EXPECT_FALSE(comm_->valid());
  EXPECT_THROW(comm_->barrier(stream_), common::Error);
  *comm_ = std::move(moved);
  EXPECT_TRUE(comm_->valid());
  comm_->barrier(stream_);
}

// No GPU needed from here on.

TEST(CheckNccl, FailureNamesTheCallAndNcclsReason) {
  try {
    check_nccl(ncclInvalidArgument, nullptr, "ncclCommInitRank(&comm, 4, id, 7)", std::source_location::current());
    FAIL() << "check_nccl did not throw";
  } catch (const common::Error& e) {
    EXPECT_EQ(e.kind(), common::ErrorKind::kNccl);
    std::string message = e.what();
    EXPECT_NE(message.find("ncclCommInitRank(&comm, 4, id, 7)"), std::string::npos) << message;
    // ncclGetErrorString(ncclInvalidArgument) is "invalid argument (run with NCCL_DEBUG=WARN for details)".
    std::transform(message.begin(), message.end(), message.begin(), [](unsigned char c) { return std::tolower(c); });
    EXPECT_NE(message.find("invalid argument"), std::string::npos) << message;
    EXPECT_NE(message.find("nccl 2."), std::string::npos) << message;
    EXPECT_NE(message.find("tests/gpu/nccl_comm_test.cpp:"), std::string::npos) << message;
  }
}

TEST(CheckNccl, SuccessDoesNotThrow) {
  EXPECT_NO_THROW(ST_NCCL_CHECK(ncclSuccess));
}

TEST(CheckCuda, FailureNamesTheCallAndCudasReason) {
  try {
    ST_CUDA_CHECK(cudaErrorMemoryAllocation);
    FAIL() << "check_cuda did not throw";
  } catch (const common::Error& e) {
    EXPECT_EQ(e.kind(), common::ErrorKind::kCuda);
    const std::string message = e.what();
    EXPECT_NE(message.find("cudaErrorMemoryAllocation"), std::string::npos) << message;
    EXPECT_NE(message.find("out of memory"), std::string::npos) << message;
  }
}

TEST(NcclTypes, EveryDTypeAndOpMaps) {
  EXPECT_EQ(to_nccl(common::Dtype::kF32), ncclFloat32);
  EXPECT_EQ(to_nccl(common::Dtype::kF64), ncclFloat64);
  EXPECT_EQ(to_nccl(common::Dtype::kBF16), ncclBfloat16);
  EXPECT_EQ(to_nccl(common::Dtype::kF16), ncclFloat16);
  EXPECT_EQ(to_nccl(common::Dtype::kI32), ncclInt32);
  EXPECT_EQ(to_nccl(common::Dtype::kI64), ncclInt64);
  EXPECT_EQ(to_nccl(common::Dtype::kU8), ncclUint8);
  EXPECT_EQ(to_nccl(ReduceOp::kSum), ncclSum);
  EXPECT_EQ(to_nccl(ReduceOp::kAvg), ncclAvg);
  EXPECT_EQ(to_nccl(ReduceOp::kMax), ncclMax);
  EXPECT_EQ(to_nccl(ReduceOp::kMin), ncclMin);
}

TEST(NcclCommEmpty, CollectivesOnAnEmptyCommunicatorThrow) {
  NcclComm empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_THROW(empty.all_reduce(nullptr, nullptr, 0, common::Dtype::kF32, ReduceOp::kSum, nullptr), common::Error);
}

// The host conversions the GPU tests rely on, against values worked by hand.
TEST(HalfFloatHelpers, Bf16RoundsHalfToEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3f80);      // tie, 1.0 is even
  EXPECT_EQ(float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);  // tie, 1 + 2^-6 is even
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);  // above the tie
  EXPECT_EQ(bf16_to_float(0x3fc0), 1.5f);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
}

TEST(HalfFloatHelpers, Fp16RoundsHalfToEven) {
  EXPECT_EQ(float_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_fp16(1.0f + 0x1p-11f), 0x3c00);      // tie, 1.0 is even
  EXPECT_EQ(float_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);  // tie, 1 + 2^-9 is even
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7bff);             // largest finite
  EXPECT_EQ(float_to_fp16(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00);  // tie with 2^16, rounds to infinity
  EXPECT_EQ(float_to_fp16(0x1p-14f), 0x0400);  // smallest normal
  EXPECT_EQ(float_to_fp16(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_fp16(0x1p-25f), 0x0000);  // tie, 0 is even
  EXPECT_EQ(float_to_fp16(3 * 0x1p-25f), 0x0002);
  EXPECT_EQ(float_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(fp16_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(fp16_to_float(0x3555), 0x1.554p-2f);
  EXPECT_EQ(fp16_to_float(0xfc00), -INFINITY);
  // Every finite fp16 survives the round trip.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;
    ASSERT_EQ(float_to_fp16(fp16_to_float(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
}

}  // namespace
}  // namespace shardtune::dist

int main(int argc, char** argv) {
  // NCCL's bootstrap goes through MPI even at world size 1.
  if (MPI_Init(&argc, &argv) != MPI_SUCCESS) return 1;
  ::testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  MPI_Finalize();
  return result;
}
