// Checkpoint tensors through bounded host staging: written in pieces smaller than the tensor (an
// uneven number of them), the file holds exactly the fp32 values and the checksums of writing
// the whole tensor at once; read back in pieces, the tensor gets them again. CPU bf16 and fp64
// tensors take the staged path that GPU shards take; fp32 on the host goes straight through.
#include "checkpoint/tensor_io.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/sin.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include "checkpoint/h5_check.h"
#include "checkpoint/h5_handle.h"
#include "checkpoint/h5_range.h"
#include "tests/unit/temp_dir.h"

namespace shardtune::checkpoint {
namespace {

constexpr int64_t kN = 1000;

H5Handle new_dataset(hid_t file, const char* name, int64_t n) {
  const hsize_t dims[1] = {static_cast<hsize_t>(n)};
  H5Handle space(ST_H5_CHECK(H5Screate_simple(1, dims, nullptr)), H5Sclose);
  return H5Handle(
      ST_H5_CHECK(H5Dcreate2(file, name, H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
      H5Dclose);
}

TEST(TensorIo, StagedPiecesEqualTheWholeTensor) {
  testing_support::TempDir dir("tensor_io_test");
  H5Handle file(ST_H5_CHECK(H5Fcreate(dir.file("t.h5").c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT)), H5Fclose);
  const at::Tensor values = at::sin(at::arange(kN, at::kDouble) * 0.37) * 100;
  int i = 0;
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kDouble}) {
    for (int64_t stage : {int64_t{7}, int64_t{kN}, int64_t{4096}}) {
      SCOPED_TRACE(testing::Message() << c10::toString(dtype) << " stage " << stage);
      const at::Tensor src = values.to(dtype);
      const at::Tensor want = src.to(at::kFloat);  // what the file must hold
      H5Handle ds = new_dataset(file.get(), ("d" + std::to_string(i++)).c_str(), kN);
      const std::vector<uint32_t> crcs = write_tensor(ds.get(), src, stage);
      at::Tensor stored = at::empty({kN}, at::kFloat);
      read_flat_range(ds.get(), 0, kN, stored.data_ptr<float>());
      EXPECT_TRUE(at::equal(stored, want));
      EXPECT_EQ(crcs, block_crcs(want.data_ptr<float>(), kN));

      // Back into a tensor of the same dtype, in pieces of 13 (odd on purpose).
      at::Tensor back = at::empty({kN}, src.options());
      int calls = 0;
      read_tensor(back, [&](int64_t offset, int64_t count, float* out) {
        ++calls;
        EXPECT_LE(count, dtype == at::kFloat ? kN : 13);
        read_flat_range(ds.get(), offset, count, out);
      }, 13);
      EXPECT_TRUE(at::equal(back, want.to(dtype)));  // fp64 keeps what fp32 stored
      EXPECT_EQ(calls, dtype == at::kFloat ? 1 : (kN + 12) / 13);
    }
  }
}

TEST(TensorIo, ASliceOfAShardKeepsItsOffset) {
  testing_support::TempDir dir("tensor_io_test");
  H5Handle file(ST_H5_CHECK(H5Fcreate(dir.file("t.h5").c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT)), H5Fclose);
  const at::Tensor shard = at::arange(100, at::kBFloat16);
  H5Handle ds = new_dataset(file.get(), "slice", 30);
  write_tensor(ds.get(), shard.narrow(0, 40, 30), 8);
  at::Tensor stored = at::empty({30}, at::kFloat);
  read_flat_range(ds.get(), 0, 30, stored.data_ptr<float>());
  EXPECT_TRUE(at::equal(stored, at::arange(40, 70, at::kFloat)));
  at::Tensor target = at::zeros({100}, at::kBFloat16);
  read_tensor(target.narrow(0, 10, 30), [&](int64_t o, int64_t c, float* out) { read_flat_range(ds.get(), o, c, out); }, 8);
  EXPECT_TRUE(at::equal(target.narrow(0, 10, 30), shard.narrow(0, 40, 30)));
  EXPECT_EQ(target[9].item<float>(), 0.0f);
  EXPECT_EQ(target[40].item<float>(), 0.0f);
}

}  // namespace
}  // namespace shardtune::checkpoint
