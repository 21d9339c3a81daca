// MPI collectives on CPU tensors.
#include "runtime/dist/mpi_communicator.h"

#include <fmt/format.h>

#include <climits>

#include "common/error.h"
#include "runtime/dist/mpi_check.h"
#include "runtime/dist/mpi_dtype.h"

namespace shardtune::dist {
namespace {

using common::ErrorKind;

void check_cpu_contiguous(const at::Tensor& t, std::string_view op, std::string_view what) {
  ST_CHECK(t.defined() && t.device().is_cpu() && t.is_contiguous(), ErrorKind::kInternal,
           "{}: the {} must be a defined, contiguous CPU tensor", op, what);
}

void check_same_dtype(const at::Tensor& a, const at::Tensor& b, std::string_view op) {
  ST_CHECK(a.scalar_type() == b.scalar_type(), ErrorKind::kInternal, "{}: input is {} but output is {}", op,
           c10::toString(a.scalar_type()), c10::toString(b.scalar_type()));
}

int checked_count(int64_t count, std::string_view op) {
  ST_CHECK(count <= INT_MAX, ErrorKind::kInternal,
           "{}: {} elements per rank exceed MPI's int count; split the buffer", op, count);
  return static_cast<int>(count);
}

void divide_for_avg(at::Tensor& t, ReduceOp op, int size) {
  if (op == ReduceOp::kAvg) t.div_(size);
}

}  // namespace

DType dtype_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return DType::kFloat32;
    case at::kDouble: return DType::kFloat64;
    case at::kBFloat16: return DType::kBFloat16;
    case at::kHalf: return DType::kFloat16;
    case at::kInt: return DType::kInt32;
    case at::kLong: return DType::kInt64;
    case at::kByte:
    case at::kBool: return DType::kUInt8;
    default:
      common::raise(ErrorKind::kInternal,
                    fmt::format("collectives do not carry {} tensors", c10::toString(t.scalar_type())));
  }
}

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

void MpiCommunicator::wait(MPI_Request& request, std::string_view op) {
  watchdog_->wait(
      [&] {
        int done = 0;
        ST_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
        return done != 0;
      },
      CollectiveDesc{op, ++seq_});
}

void MpiCommunicator::all_gather(const at::Tensor& input, at::Tensor& output) {
  check_cpu_contiguous(input, "all_gather", "input");
  check_cpu_contiguous(output, "all_gather", "output");
  check_same_dtype(input, output, "all_gather");
  ST_CHECK(output.numel() == input.numel() * size_, ErrorKind::kInternal,
           "all_gather on '{}': output has {} elements, expected {} ranks x {}", name_, output.numel(), size_,
           input.numel());
  const DType t = dtype_of(input);
  const int count = checked_count(input.numel(), "all_gather");
  auto* out = static_cast<char*>(output.data_ptr());
  const void* send = input.data_ptr();
  // The input already in its slot of the output (FSDP keeps its shard there): gather in place.
  if (send == out + static_cast<size_t>(rank_) * count * element_size(t)) send = MPI_IN_PLACE;
  MPI_Request req;
  ST_MPI_CHECK(MPI_Iallgather(send, count, mpi_datatype(t), out, count, mpi_datatype(t), comm_, &req));
  wait(req, "all_gather");
}

void MpiCommunicator::reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) {
  check_cpu_contiguous(input, "reduce_scatter", "input");
  check_cpu_contiguous(output, "reduce_scatter", "output");
  check_same_dtype(input, output, "reduce_scatter");
  ST_CHECK(input.numel() == output.numel() * size_, ErrorKind::kInternal,
           "reduce_scatter on '{}': input has {} elements, expected {} ranks x {}", name_, input.numel(), size_,
           output.numel());
  const DType t = dtype_of(input);
  const int count = checked_count(output.numel(), "reduce_scatter");
  MPI_Request req;
  ST_MPI_CHECK(MPI_Ireduce_scatter_block(input.data_ptr(), output.data_ptr(), count, mpi_datatype(t), mpi_op(t, op),
                                         comm_, &req));
  wait(req, "reduce_scatter");
  divide_for_avg(output, op, size_);
}

void MpiCommunicator::all_reduce(at::Tensor& tensor, ReduceOp op) {
  check_cpu_contiguous(tensor, "all_reduce", "tensor");
  const DType t = dtype_of(tensor);
  auto* data = static_cast<char*>(tensor.data_ptr());
  // Element-wise, so a buffer beyond MPI's int count goes in pieces.
  for (int64_t done = 0; done < tensor.numel() || done == 0;) {
    const int count = static_cast<int>(std::min<int64_t>(tensor.numel() - done, INT_MAX / 2));
    MPI_Request req;
    ST_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data + done * element_size(t), count, mpi_datatype(t), mpi_op(t, op),
                                comm_, &req));
    wait(req, "all_reduce");
    done += count;
    if (count == 0) break;
  }
  divide_for_avg(tensor, op, size_);
}

void MpiCommunicator::broadcast(at::Tensor& tensor, int root) {
  check_cpu_contiguous(tensor, "broadcast", "tensor");
  ST_CHECK(root >= 0 && root < size_, ErrorKind::kInternal, "broadcast on '{}': root {} outside 0..{}", name_, root,
           size_ - 1);
  const DType t = dtype_of(tensor);
  auto* data = static_cast<char*>(tensor.data_ptr());
  for (int64_t done = 0; done < tensor.numel() || done == 0;) {
    const int count = static_cast<int>(std::min<int64_t>(tensor.numel() - done, INT_MAX / 2));
    MPI_Request req;
    ST_MPI_CHECK(MPI_Ibcast(data + done * element_size(t), count, mpi_datatype(t), root, comm_, &req));
    wait(req, "broadcast");
    done += count;
    if (count == 0) break;
  }
}

void MpiCommunicator::gather(const at::Tensor& input, at::Tensor& output, int root) {
  check_cpu_contiguous(input, "gather", "input");
  ST_CHECK(root >= 0 && root < size_, ErrorKind::kInternal, "gather on '{}': root {} outside 0..{}", name_, root,
           size_ - 1);
  void* out = nullptr;
  if (rank_ == root) {
    check_cpu_contiguous(output, "gather", "output");
    check_same_dtype(input, output, "gather");
    ST_CHECK(output.numel() == input.numel() * size_, ErrorKind::kInternal,
             "gather on '{}': output has {} elements, expected {} ranks x {}", name_, output.numel(), size_,
             input.numel());
    out = output.data_ptr();
  }
  const DType t = dtype_of(input);
  const int count = checked_count(input.numel(), "gather");
  MPI_Request req;
  ST_MPI_CHECK(MPI_Igather(input.data_ptr(), count, mpi_datatype(t), out, count, mpi_datatype(t), root, comm_, &req));
  wait(req, "gather");
}

void MpiCommunicator::barrier() {
  MPI_Request req;
  ST_MPI_CHECK(MPI_Ibarrier(comm_, &req));
  wait(req, "barrier");
}

}  // namespace shardtune::dist
