// Every collective, for every dtype and uneven sizes, against answers each rank computes locally
// from the same per-rank formula; for each backend: MPI on CPU tensors, MPI staged through host
// buffers (what ranks sharing a GPU use; here on CPU tensors, so CI runs it) and, with
// ST_TEST_DEVICE=cuda, the device communicator on GPU tensors (NCCL, or staged when ranks share
// the GPU). Also non-blocking starts: several in flight at once, waited in any order, their
// buffers kept alive by the Work.
#include <ATen/ops/empty.h>
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "common/error.h"
#include "runtime/dist/host_staged_communicator.h"
#include "runtime/dist/mpi_communicator.h"
#include "runtime/dist/mpi_check.h"
#include "runtime/dist/mpi_dtype.h"
#include "runtime/dist/ring_collectives.h"
#include "tests/mpi/test_device.h"

namespace shardtune::dist {
namespace {

const std::vector<at::ScalarType> kFloatTypes = {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf};
const std::vector<at::ScalarType> kAllTypes = {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf,
                                               at::kInt,   at::kLong,   at::kByte};
// 70001: past the size from which MpiCommunicator all-reduces around its ring, in uneven blocks.
const std::vector<int64_t> kSizes = {1, 7, 1000, 4099, 70001};

bool is_float(at::ScalarType t) { return t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf; }

// Rank r's element i: small quarter-steps, exact in every dtype and in their sums (|sum| <= 4 * 11).
double exact_value(int rank, int64_t i, at::ScalarType t) {
  const double v = static_cast<double>((rank * 131 + i * 17) % 23);
  return is_float(t) ? (v - 11.0) * 0.25 : (t == at::kByte ? v : v - 11.0);
}

// Rank r's element i for rounding tests: values with full mantissas.
double rough_value(int rank, int64_t i) { return std::sin(rank * 1.3 + i * 0.7) * (1.0 + i % 5); }

// The device the current test's tensors live on.
c10::Device g_device = c10::kCPU;

at::Tensor make(int64_t n, at::ScalarType t, const std::function<double(int64_t)>& f) {
  at::Tensor d = at::empty({n}, at::kDouble);
  double* p = d.data_ptr<double>();
  for (int64_t i = 0; i < n; ++i) p[i] = f(i);
  return d.to(t).to(g_device);
}

at::Tensor empty_on(at::IntArrayRef sizes, at::ScalarType t) {
  return at::empty(sizes, at::TensorOptions().dtype(t).device(g_device));
}

std::vector<double> values(const at::Tensor& t) {
  at::Tensor d = t.to(at::kCPU).to(at::kDouble).contiguous();
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

// The value a dtype stores for x (the inputs' own rounding).
double stored(double x, at::ScalarType t) { return values(make(1, t, [x](int64_t) { return x; }))[0]; }

// Unit roundoff of a dtype.
double unit_roundoff(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16: return std::ldexp(1.0, -8);
    case at::kHalf: return std::ldexp(1.0, -11);
    case at::kFloat: return std::ldexp(1.0, -24);
    default: return std::ldexp(1.0, -53);
  }
}

enum class Backend { kMpi, kHostStaged, kDevice };

std::string backend_name(const testing::TestParamInfo<Backend>& info) {
  switch (info.param) {
    case Backend::kMpi: return "Mpi";
    case Backend::kHostStaged: return "HostStaged";
    case Backend::kDevice: return "Device";
  }
  return "?";
}

class Collectives : public testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    g_device = c10::kCPU;
    if (GetParam() == Backend::kDevice) {
      if (testing_support::test_device().is_cpu()) GTEST_SKIP() << "no device: run with ST_TEST_DEVICE=cuda";
      g_device = testing_support::test_device();
      groups_ = testing_support::make_test_groups(1);
      comm_ = groups_->world.get();
    } else {
      MPI_Comm dup;
      ST_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
      mpi_ = std::make_unique<MpiCommunicator>(dup, "world", 60.0);
      comm_ = mpi_.get();
      if (GetParam() == Backend::kHostStaged) {
        staged_ = std::make_unique<HostStagedCommunicator>(*mpi_);
        comm_ = staged_.get();
      }
    }
    rank_ = comm_->rank();
    size_ = comm_->size();
  }
  void TearDown() override { g_device = c10::kCPU; }

  std::unique_ptr<MpiCommunicator> mpi_;
  std::unique_ptr<HostStagedCommunicator> staged_;
  std::optional<ProcessGroups> groups_;
  Communicator* comm_ = nullptr;
  int rank_ = 0;
  int size_ = 1;
};

INSTANTIATE_TEST_SUITE_P(Backends, Collectives, testing::Values(Backend::kMpi, Backend::kHostStaged, Backend::kDevice),
                         backend_name);

// The ring itself in pieces of 3 elements: many messages a step, two in flight, blocks of
// uneven lengths (all-reduce), empty blocks; exact sums and maxima in fp32, bf16 (MPI's
// user-defined operator) and int64.
TEST(Ring, ReduceScatterAndAllReduceInSmallPieces) {
  int rank = 0, size = 1;
  ST_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  ST_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  for (at::ScalarType t : {at::kFloat, at::kBFloat16, at::kLong}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      for (int64_t n : {0, 1, 2, 5, 13, 1000}) {
        SCOPED_TRACE(testing::Message() << c10::toString(t) << " n=" << n << " op=" << to_string(op));
        const common::Dtype d = dtype_of(at::empty({0}, t));
        RingOptions o;
        o.comm = MPI_COMM_WORLD;
        o.rank = rank;
        o.size = size;
        o.type = mpi_datatype(d);
        o.op = mpi_op(d, op);
        o.element_size = static_cast<int64_t>(at::elementSize(t));
        o.piece_elements = 3;
        o.wait = [](MPI_Request& r) { ST_MPI_CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE)); };
        auto want = [&](int64_t i) {
          double sum = 0, hi = -1e300;
          for (int r = 0; r < size; ++r) {
            sum += exact_value(r, i, t);
            hi = std::max(hi, exact_value(r, i, t));
          }
          return op == ReduceOp::kSum ? sum : hi;
        };
        at::Tensor in = make(n * size, t, [&](int64_t i) { return exact_value(rank, i, t); });
        at::Tensor out = at::empty({n}, t);
        ring_reduce_scatter(static_cast<char*>(in.data_ptr()), static_cast<char*>(out.data_ptr()), n, o);
        std::vector<double> got = values(out);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], want(rank * n + i)) << "reduce_scatter element " << i;
        at::Tensor x = make(n, t, [&](int64_t i) { return exact_value(rank, i, t); });
        ring_all_reduce(static_cast<char*>(x.data_ptr()), n, o);
        got = values(x);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], want(i)) << "all_reduce element " << i;
      }
    }
  }
}

TEST_P(Collectives, AllReduceEveryOpEveryDtypeExact) {
  for (at::ScalarType t : kAllTypes) {
    for (int64_t n : kSizes) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
        if (op == ReduceOp::kAvg && !is_float(t)) continue;
        if (op == ReduceOp::kSum && t == at::kByte) continue;  // uint8 sums overflow by design
        SCOPED_TRACE(testing::Message() << c10::toString(t) << " n=" << n << " op=" << to_string(op));
        at::Tensor x = make(n, t, [&](int64_t i) { return exact_value(rank_, i, t); });
        comm_->all_reduce(x, op);
        const std::vector<double> got = values(x);
        for (int64_t i = 0; i < n; ++i) {
          double sum = 0, hi = -1e300, lo = 1e300;
          for (int r = 0; r < size_; ++r) {
            const double v = exact_value(r, i, t);
            sum += v;
            hi = std::max(hi, v);
            lo = std::min(lo, v);
          }
          const double want = op == ReduceOp::kSum ? sum
                              : op == ReduceOp::kAvg ? stored(sum / size_, t)
                              : op == ReduceOp::kMax ? hi
                                                     : lo;
          if (got[i] != want) {
            ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << want;
            break;
          }
        }
      }
    }
  }
}

TEST_P(Collectives, SixteenBitSumsRoundLikeFloatArithmetic) {
  // Full-mantissa inputs: the reduction computes in fp32 and rounds each partial sum, so the error
  // against the exact sum is at most (size-1) roundings of partial sums no larger than sum|v|.
  for (at::ScalarType t : kFloatTypes) {
    const int64_t n = 4099;
    at::Tensor x = make(n, t, [&](int64_t i) { return rough_value(rank_, i); });
    comm_->all_reduce(x, ReduceOp::kSum);
    const std::vector<double> got = values(x);
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      double exact = 0, magnitude = 0;
      for (int r = 0; r < size_; ++r) {
        const double v = stored(rough_value(r, i), t);
        exact += v;
        magnitude += std::abs(v);
      }
      const double bound = (size_ - 1) * unit_roundoff(t) * magnitude * 1.0000001 + 1e-300;
      if (std::abs(got[i] - exact) > bound && bad++ < 3)
        ADD_FAILURE() << c10::toString(t) << " element " << i << ": got " << got[i] << ", exact " << exact
                      << ", allowed error " << bound;
    }
  }
}

TEST_P(Collectives, AllGatherUnevenSizesAndInPlace) {
  for (at::ScalarType t : kAllTypes) {
    for (int64_t n : kSizes) {
      SCOPED_TRACE(testing::Message() << c10::toString(t) << " n=" << n);
      at::Tensor mine = make(n, t, [&](int64_t i) { return exact_value(rank_, i, t); });
      at::Tensor out = empty_on({n * size_}, t);
      comm_->all_gather(mine, out);
      // In place: the input is this rank's slot of the output.
      at::Tensor out2 = empty_on({n * size_}, t);
      at::Tensor slot = out2.narrow(0, rank_ * n, n);
      slot.copy_(mine);
      comm_->all_gather(slot, out2);
      const std::vector<double> got = values(out), got2 = values(out2);
      for (int r = 0; r < size_; ++r)
        for (int64_t i = 0; i < n; ++i) {
          const double want = exact_value(r, i, t);
          if (got[r * n + i] != want || got2[r * n + i] != want) {
            ADD_FAILURE() << "rank slot " << r << " element " << i << ": got " << got[r * n + i] << " / "
                          << got2[r * n + i] << ", want " << want;
            r = size_;
            break;
          }
        }
    }
  }
}

TEST_P(Collectives, GatherToEveryRoot) {
  for (at::ScalarType t : kAllTypes) {
    for (int64_t n : {int64_t{0}, int64_t{7}, int64_t{4099}}) {
      for (int root = 0; root < size_; ++root) {
        SCOPED_TRACE(testing::Message() << c10::toString(t) << " n=" << n << " root=" << root);
        at::Tensor mine = make(n, t, [&](int64_t i) { return exact_value(rank_, i, t); });
        at::Tensor out = rank_ == root ? empty_on({n * size_}, t) : at::Tensor();
        comm_->gather(mine, out, root);
        if (rank_ != root) {
          EXPECT_FALSE(out.defined());
          continue;
        }
        const std::vector<double> got = values(out);
        for (int r = 0; r < size_; ++r)
          for (int64_t i = 0; i < n; ++i)
            if (got[r * n + i] != exact_value(r, i, t)) {
              ADD_FAILURE() << "rank slot " << r << " element " << i << ": got " << got[r * n + i];
              r = size_;
              break;
            }
      }
    }
  }
}

TEST_P(Collectives, ReduceScatterSumAndAvg) {
  for (at::ScalarType t : kFloatTypes) {
    for (int64_t n : kSizes) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        SCOPED_TRACE(testing::Message() << c10::toString(t) << " n=" << n << " op=" << to_string(op));
        at::Tensor in = make(n * size_, t, [&](int64_t i) { return exact_value(rank_, i, t); });
        at::Tensor out = empty_on({n}, t);
        comm_->reduce_scatter(in, out, op);
        const std::vector<double> got = values(out);
        for (int64_t i = 0; i < n; ++i) {
          double sum = 0;
          for (int r = 0; r < size_; ++r) sum += exact_value(r, rank_ * n + i, t);
          const double want = op == ReduceOp::kSum ? sum : stored(sum / size_, t);
          if (got[i] != want) {
            ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << want;
            break;
          }
        }
      }
    }
  }
}

TEST_P(Collectives, BroadcastFromEveryRoot) {
  for (at::ScalarType t : kAllTypes) {
    for (int root = 0; root < size_; ++root) {
      at::Tensor x = make(1000, t, [&](int64_t i) { return exact_value(rank_, i, t); });
      comm_->broadcast(x, root);
      const std::vector<double> got = values(x);
      for (int64_t i = 0; i < 1000; ++i)
        if (got[i] != exact_value(root, i, t)) {
          ADD_FAILURE() << c10::toString(t) << " root " << root << " element " << i;
          break;
        }
    }
  }
}

TEST_P(Collectives, BarrierAndEmptyTensors) {
  comm_->barrier();
  at::Tensor empty = empty_on({0}, at::kFloat);
  comm_->all_reduce(empty, ReduceOp::kSum);
  at::Tensor out = empty_on({0}, at::kFloat);
  comm_->all_gather(empty, out);
  comm_->barrier();
}

TEST_P(Collectives, MisuseIsAnErrorBeforeAnyCommunication) {
  at::Tensor in = empty_on({4}, at::kFloat);
  at::Tensor wrong = empty_on({4 * size_ + 1}, at::kFloat);
  EXPECT_THROW(comm_->all_gather(in, wrong), common::Error);
  at::Tensor half = empty_on({4 * size_}, at::kHalf);
  EXPECT_THROW(comm_->all_gather(in, half), common::Error);
  if (GetParam() == Backend::kMpi) {  // NCCL averages integers; staging copies strided tensors
    at::Tensor ints = empty_on({4}, at::kInt);
    EXPECT_THROW(comm_->all_reduce(ints, ReduceOp::kAvg), common::Error);
    at::Tensor strided = empty_on({4, 4}, at::kFloat).t();
    EXPECT_THROW(comm_->all_reduce(strided, ReduceOp::kSum), common::Error);
  }
  EXPECT_THROW(comm_->broadcast(in, size_), common::Error);
  at::Tensor none;
  EXPECT_THROW(comm_->gather(in, none, -1), common::Error);
  comm_->barrier();  // still usable afterwards
}

TEST_P(Collectives, StartedCollectivesRunTogetherAndKeepTheirBuffers) {
  const int64_t n = 1000;
  at::Tensor gathered = empty_on({n * size_}, at::kFloat);
  at::Tensor scattered = empty_on({n}, at::kFloat);
  at::Tensor summed = make(n, at::kFloat, [&](int64_t i) { return exact_value(rank_, i, at::kFloat); });
  WorkHandle a, b, c;
  {
    // The inputs go out of scope before the waits: the Works keep them.
    const at::Tensor mine = make(n, at::kFloat, [&](int64_t i) { return exact_value(rank_, i, at::kFloat); });
    const at::Tensor to_scatter = make(n * size_, at::kFloat, [&](int64_t i) { return exact_value(rank_, i, at::kFloat); });
    a = comm_->start_all_gather(mine, gathered);
    b = comm_->start_reduce_scatter(to_scatter, scattered, ReduceOp::kSum);
    c = comm_->start_all_reduce(summed, ReduceOp::kMax);
  }
  c->wait();
  a->wait();
  b->wait();
  const std::vector<double> g = values(gathered), s = values(scattered), m = values(summed);
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0, hi = -1e300;
    for (int r = 0; r < size_; ++r) {
      sum += exact_value(r, rank_ * n + i, at::kFloat);
      hi = std::max(hi, exact_value(r, i, at::kFloat));
      ASSERT_EQ(g[r * n + i], exact_value(r, i, at::kFloat)) << "all_gather slot " << r << " element " << i;
    }
    ASSERT_EQ(s[i], sum) << "reduce_scatter element " << i;
    ASSERT_EQ(m[i], hi) << "all_reduce element " << i;
  }
}

}  // namespace
}  // namespace shardtune::dist
