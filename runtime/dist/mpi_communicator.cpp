// MPI collectives on CPU tensors.
#include "runtime/dist/mpi_communicator.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>
#include <functional>

#include "common/error.h"
#include "runtime/dist/mpi_check.h"
#include "runtime/dist/mpi_dtype.h"
#include "runtime/dist/ring_collectives.h"

namespace shardtune::dist {
namespace {

using common::ErrorKind;

void check_cpu_contiguous(const at::Tensor& t, std::string_view op, std::string_view what) {
  ST_CHECK(t.defined() && t.device().is_cpu() && t.is_contiguous(), ErrorKind::kInternal,
           "{}: the {} must be a defined, contiguous CPU tensor", op, what);
}

int checked_count(int64_t count, std::string_view op) {
  ST_CHECK(count <= INT_MAX, ErrorKind::kInternal,
           "{}: {} elements per rank exceed MPI's int count; split the buffer", op, count);
  return static_cast<int>(count);
}

// Element-wise collectives go in pieces below MPI's int count.
constexpr int64_t kPiece = INT_MAX / 2;

// All-reduces of at least this many elements go around the ring (MPI's own need a temporary copy
// of the whole buffer); smaller ones, which are about latency, through MPI_Iallreduce.
constexpr int64_t kRingAllReduceElements = int64_t{1} << 16;

// Ring messages are tagged with the collective's number modulo this (MPI_TAG_UB is at least
// 32767), so a ring only ever matches the same collective on its peers.
constexpr uint64_t kRingTags = 32768;
// Messages' tag: above every ring collective's (Open MPI's tags reach 2^31 - 1).
constexpr int kMessageTag = static_cast<int>(kRingTags);
constexpr int64_t kMessagePiece = int64_t(1) << 30;  // MPI counts are ints: long messages go in pieces

}  // namespace

// The requests of one started collective, its tensors (kept alive until it completes), and what
// to do once the data is there (kAvg divides after the sum).
class MpiCommunicator::MpiWork final : public Work {
 public:
  MpiWork(MpiCommunicator* comm, std::string_view op, std::vector<at::Tensor> keep)
      : comm_(comm), op_(op), seq_(++comm->seq_), keep_(std::move(keep)) {}
  ~MpiWork() override {
    if (waited_) return;
    try {
      wait();
    } catch (const std::exception& e) {
      spdlog::error("a {} that nobody waited for failed: {}", op_, e.what());
    }
  }

  // A new request slot, MPI_REQUEST_NULL until an MPI call fills it (a failed start leaves
  // nothing to wait for).
  MPI_Request* add_request() { return &requests_.emplace_back(MPI_REQUEST_NULL); }
  // Run by wait() once the requests are done: a ring collective itself, then kAvg's division.
  std::function<void()> then;

  // A ring collective's options; its messages are waited for as this collective's.
  RingOptions ring(common::Dtype t, ReduceOp op) {
    RingOptions o;
    o.comm = comm_->comm_;
    o.rank = comm_->rank_;
    o.size = comm_->size_;
    o.type = mpi_datatype(t);
    o.op = mpi_op(t, op);
    o.element_size = static_cast<int64_t>(element_size(t));
    o.tag = static_cast<int>(seq_ % kRingTags);
    o.wait = [this](MPI_Request& r) { comm_->wait(r, op_, seq_); };
    return o;
  }

  void wait() override {
    if (waited_) return;
    waited_ = true;
    try {
      for (MPI_Request& r : requests_) comm_->wait(r, op_, seq_);
      if (then) then();
    } catch (...) {
      // Requests that never completed may still be written into by MPI: their buffers are never
      // freed (the rank is ending with this error).
      (void)new std::vector<at::Tensor>(std::move(keep_));
      throw;
    }
    keep_.clear();
  }

 private:
  MpiCommunicator* comm_;
  std::string_view op_;
  uint64_t seq_;
  std::vector<MPI_Request> requests_;
  std::vector<at::Tensor> keep_;
  bool waited_ = false;
};

std::vector<int> world_ranks_of(MPI_Comm comm) {
  int size = 0;
  ST_MPI_CHECK(MPI_Comm_size(comm, &size));
  MPI_Group group, world_group;
  ST_MPI_CHECK(MPI_Comm_group(comm, &group));
  ST_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
  std::vector<int> mine(size), world(size);
  for (int i = 0; i < size; ++i) mine[i] = i;
  ST_MPI_CHECK(MPI_Group_translate_ranks(group, size, mine.data(), world_group, world.data()));
  ST_MPI_CHECK(MPI_Group_free(&group));
  ST_MPI_CHECK(MPI_Group_free(&world_group));
  return world;
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, double timeout_s)
    : comm_(comm), name_(std::move(name)) {
  ST_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  ST_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  ST_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  world_ranks_ = world_ranks_of(comm_);
  watchdog_ = std::make_unique<Watchdog>(comm_, name_, world_ranks_, timeout_s);
}

MpiCommunicator::~MpiCommunicator() {
  watchdog_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_SELF) MPI_Comm_free(&comm_);
}

void MpiCommunicator::wait(MPI_Request& request, std::string_view op, uint64_t seq, int peer) {
  watchdog_->wait(
      [&] {
        int done = 0;
        ST_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
        return done != 0;
      },
      CollectiveDesc{op, seq, peer});
}

WorkHandle MpiCommunicator::start_all_gather(const at::Tensor& input, at::Tensor& output) {
  check_cpu_contiguous(input, "all_gather", "input");
  check_cpu_contiguous(output, "all_gather", "output");
  check_all_gather_sizes(*this, input, output);
  const common::Dtype t = dtype_of(input);
  const int count = checked_count(input.numel(), "all_gather");
  auto* out = static_cast<char*>(output.data_ptr());
  const void* send = input.data_ptr();
  // The input already in its slot of the output (FSDP keeps its shard there): gather in place.
  if (send == out + static_cast<size_t>(rank_) * count * element_size(t)) send = MPI_IN_PLACE;
  auto work = std::make_unique<MpiWork>(this, "all_gather", std::vector<at::Tensor>{input, output});
  ST_MPI_CHECK(MPI_Iallgather(send, count, mpi_datatype(t), out, count, mpi_datatype(t), comm_, work->add_request()));
  return work;
}

WorkHandle MpiCommunicator::start_reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) {
  check_cpu_contiguous(input, "reduce_scatter", "input");
  check_cpu_contiguous(output, "reduce_scatter", "output");
  check_reduce_scatter_sizes(*this, input, output);
  const common::Dtype t = dtype_of(input);
  auto work = std::make_unique<MpiWork>(this, "reduce_scatter", std::vector<at::Tensor>{input, output});
  // Around the ring when waited for, reducing in the input (ring_collectives.h says why not
  // MPI_Ireduce_scatter_block).
  work->then = [ring = work->ring(t, op), input, output, op, n = size_]() mutable {
    ring_reduce_scatter(static_cast<char*>(input.data_ptr()), static_cast<char*>(output.data_ptr()), output.numel(),
                        ring);
    if (op == ReduceOp::kAvg) output.div_(n);
  };
  return work;
}

WorkHandle MpiCommunicator::start_all_reduce(at::Tensor& tensor, ReduceOp op) {
  check_cpu_contiguous(tensor, "all_reduce", "tensor");
  const common::Dtype t = dtype_of(tensor);
  auto* data = static_cast<char*>(tensor.data_ptr());
  auto work = std::make_unique<MpiWork>(this, "all_reduce", std::vector<at::Tensor>{tensor});
  if (tensor.numel() >= kRingAllReduceElements && size_ > 1) {  // a whole model's gradients under NO_SHARD
    work->then = [ring = work->ring(t, op), tensor, op, n = size_]() mutable {
      ring_all_reduce(static_cast<char*>(tensor.data_ptr()), tensor.numel(), ring);
      if (op == ReduceOp::kAvg) tensor.div_(n);
    };
    return work;
  }
  int64_t done = 0;
  do {
    const int count = static_cast<int>(std::min<int64_t>(tensor.numel() - done, kPiece));
    ST_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data + done * element_size(t), count, mpi_datatype(t), mpi_op(t, op),
                                comm_, work->add_request()));
    done += count;
  } while (done < tensor.numel());
  if (op == ReduceOp::kAvg) work->then = [tensor, n = size_]() mutable { tensor.div_(n); };
  return work;
}

void MpiCommunicator::broadcast(at::Tensor& tensor, int root) {
  check_cpu_contiguous(tensor, "broadcast", "tensor");
  check_root(*this, root, "broadcast");
  const common::Dtype t = dtype_of(tensor);
  auto* data = static_cast<char*>(tensor.data_ptr());
  MpiWork work(this, "broadcast", {tensor});
  int64_t done = 0;
  do {
    const int count = static_cast<int>(std::min<int64_t>(tensor.numel() - done, kPiece));
    ST_MPI_CHECK(MPI_Ibcast(data + done * element_size(t), count, mpi_datatype(t), root, comm_, work.add_request()));
    done += count;
  } while (done < tensor.numel());
  work.wait();
}

void MpiCommunicator::gather(const at::Tensor& input, at::Tensor& output, int root) {
  check_cpu_contiguous(input, "gather", "input");
  check_gather_sizes(*this, input, output, root);
  void* out = nullptr;
  if (rank_ == root) {
    check_cpu_contiguous(output, "gather", "output");
    out = output.data_ptr();
  }
  const common::Dtype t = dtype_of(input);
  const int count = checked_count(input.numel(), "gather");
  MpiWork work(this, "gather", {input});
  ST_MPI_CHECK(
      MPI_Igather(input.data_ptr(), count, mpi_datatype(t), out, count, mpi_datatype(t), root, comm_, work.add_request()));
  work.wait();
}

void MpiCommunicator::barrier() {
  MpiWork work(this, "barrier", {});
  ST_MPI_CHECK(MPI_Ibarrier(comm_, work.add_request()));
  work.wait();
}

void MpiCommunicator::send(const void* data, int64_t bytes, int to) {
  for (int64_t done = 0; done < bytes; done += kMessagePiece) {
    MPI_Request r;
    ST_MPI_CHECK(MPI_Isend(static_cast<const char*>(data) + done, static_cast<int>(std::min(kMessagePiece, bytes - done)),
                           MPI_BYTE, to, kMessageTag, comm_, &r));
    wait(r, "send", ++messages_, to);
  }
}

void MpiCommunicator::receive(void* data, int64_t bytes, int from) {
  for (int64_t done = 0; done < bytes; done += kMessagePiece) {
    MPI_Request r;
    ST_MPI_CHECK(MPI_Irecv(static_cast<char*>(data) + done, static_cast<int>(std::min(kMessagePiece, bytes - done)),
                           MPI_BYTE, from, kMessageTag, comm_, &r));
    wait(r, "receive", ++messages_, from);
  }
}

}  // namespace shardtune::dist
