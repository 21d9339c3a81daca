// NCCL collectives on CUDA tensors: a stream per group, events for ordering, a monitor thread for
// timeouts (see the header for why).
#include "runtime/dist/nccl_communicator.h"

#if __has_include(<c10/cuda/CUDAEvent.h>)
// LibTorch 2.9 and later: the event alone, without ATen's CUDA context header, which includes the
// cuBLAS, cuSPARSE and cuSOLVER headers a CUDA toolkit need not have.
#include <c10/cuda/CUDAEvent.h>
#else
#include <ATen/cuda/CUDAEvent.h>
#endif
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <exception>

#include "common/error.h"
#include "runtime/dist/process_groups.h"

namespace shardtune::dist {
namespace {

#if __has_include(<c10/cuda/CUDAEvent.h>)
using CudaEvent = c10::cuda::CUDAEvent;
#else
using CudaEvent = at::cuda::CUDAEvent;
#endif

using common::ErrorKind;

void check_cuda_tensor(const at::Tensor& t, int device, std::string_view op, std::string_view group) {
  ST_CHECK(t.defined() && t.is_cuda() && t.is_contiguous() && t.get_device() == device, ErrorKind::kInternal,
           "{} on '{}': expected a contiguous CUDA tensor on device {}, got {}", op, group, device,
           t.defined() ? t.device().str() : std::string("an undefined tensor"));
}

c10::cuda::CUDAStream caller_stream(int device) {
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device));
}

}  // namespace

struct NcclCommunicator::StreamHolder {
  c10::cuda::CUDAStream stream;
};

// What the monitor watches: a collective's "done" event.
struct NcclCommunicator::InFlight {
  std::string_view op;
  uint64_t seq = 0;
  CudaEvent done;
};

class NcclCommunicator::NcclWork final : public Work {
 public:
  NcclWork(NcclCommunicator* comm, std::shared_ptr<InFlight> flight, std::vector<at::Tensor> keep)
      : comm_(comm), flight_(std::move(flight)), keep_(std::move(keep)) {}
  ~NcclWork() override {
    // Never free the buffers while the group's stream may still use them: order the caller's
    // stream after the collective (no host wait), as wait() would, and keep quiet about errors.
    if (waited_) return;
    try {
      flight_->done.block(caller_stream(comm_->device_));
    } catch (const std::exception& e) {
      spdlog::error("ordering after an unwaited {} failed: {}", flight_->op, e.what());
    }
  }
  void wait() override {
    comm_->throw_if_failed();
    if (!waited_) flight_->done.block(caller_stream(comm_->device_));
    waited_ = true;
    // The caller's stream now runs after the collective: its later allocations may reuse these
    // buffers safely.
    keep_.clear();
  }

 private:
  NcclCommunicator* comm_;
  std::shared_ptr<InFlight> flight_;
  std::vector<at::Tensor> keep_;
  bool waited_ = false;
};

NcclCommunicator::NcclCommunicator(const MpiCommunicator& host, int device, double timeout_s)
    : name_(host.name()), rank_(host.rank()), size_(host.size()), device_(device), world_ranks_(host.world_ranks()) {
  int provided = 0;
  MPI_Query_thread(&provided);
  ST_CHECK(provided == MPI_THREAD_MULTIPLE, ErrorKind::kInternal,
           "NCCL group '{}' needs MPI initialised with MPI_THREAD_MULTIPLE (its watchdog thread uses MPI)", name_);
  comm_ = NcclComm::create(host.comm(), device, timeout_s);
  watchdog_ = std::make_unique<Watchdog>(host.comm(), name_, world_ranks_, timeout_s);
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  stream_ = std::make_unique<StreamHolder>(
      StreamHolder{c10::cuda::getStreamFromPool(/*isHighPriority=*/true, static_cast<c10::DeviceIndex>(device))});
  monitor_ = std::thread([this] { monitor(); });
}

NcclCommunicator::~NcclCommunicator() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    // Unwinding after an error: what is in flight may never finish (a peer is gone). Abort now
    // rather than wait for the timeout, so the rank leaves at once.
    if (std::uncaught_exceptions() > 0 && !in_flight_.empty()) comm_.abort();
  }
  wake_.notify_all();
  if (monitor_.joinable()) monitor_.join();
}

void NcclCommunicator::throw_if_failed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failure_.empty()) common::raise(failure_kind_, failure_);
}

template <class Enqueue>
WorkHandle NcclCommunicator::launch(std::string_view op, std::vector<at::Tensor> keep, Enqueue&& enqueue) {
  throw_if_failed();
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
  const c10::cuda::CUDAStream caller = caller_stream(device_);
  const c10::cuda::CUDAStream& mine = stream_->stream;
  // The inputs were produced on the caller's stream: the group's stream starts after them.
  CudaEvent ready;
  ready.record(caller);
  ready.block(mine);
  auto flight = std::make_shared<InFlight>();
  flight->op = op;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    enqueue(mine.stream());
    flight->seq = ++seq_;
    flight->done.record(mine);
    in_flight_.push_back(flight);
  }
  wake_.notify_all();
  return std::make_unique<NcclWork>(this, std::move(flight), std::move(keep));
}

WorkHandle NcclCommunicator::start_all_gather(const at::Tensor& input, at::Tensor& output) {
  check_cuda_tensor(input, device_, "all_gather", name_);
  check_cuda_tensor(output, device_, "all_gather", name_);
  check_all_gather_sizes(*this, input, output);
  return launch("all_gather", {input, output}, [&](cudaStream_t s) {
    comm_.all_gather(input.data_ptr(), output.data_ptr(), static_cast<size_t>(input.numel()), dtype_of(input), s);
  });
}

WorkHandle NcclCommunicator::start_reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) {
  check_cuda_tensor(input, device_, "reduce_scatter", name_);
  check_cuda_tensor(output, device_, "reduce_scatter", name_);
  check_reduce_scatter_sizes(*this, input, output);
  return launch("reduce_scatter", {input, output}, [&](cudaStream_t s) {
    comm_.reduce_scatter(input.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()), dtype_of(input), op,
                         s);
  });
}

WorkHandle NcclCommunicator::start_all_reduce(at::Tensor& tensor, ReduceOp op) {
  check_cuda_tensor(tensor, device_, "all_reduce", name_);
  return launch("all_reduce", {tensor}, [&](cudaStream_t s) {
    comm_.all_reduce(tensor.data_ptr(), tensor.data_ptr(), static_cast<size_t>(tensor.numel()), dtype_of(tensor), op,
                     s);
  });
}

void NcclCommunicator::broadcast(at::Tensor& tensor, int root) {
  check_cuda_tensor(tensor, device_, "broadcast", name_);
  check_root(*this, root, "broadcast");
  launch("broadcast", {tensor}, [&](cudaStream_t s) {
    comm_.broadcast(tensor.data_ptr(), tensor.data_ptr(), static_cast<size_t>(tensor.numel()), dtype_of(tensor), root,
                    s);
  })->wait();
}

void NcclCommunicator::gather(const at::Tensor& input, at::Tensor& output, int root) {
  check_cuda_tensor(input, device_, "gather", name_);
  check_gather_sizes(*this, input, output, root);
  if (rank_ == root) check_cuda_tensor(output, device_, "gather", name_);
  launch("gather", {input, output}, [&](cudaStream_t s) {
    comm_.gather(input.data_ptr(), rank_ == root ? output.data_ptr() : nullptr, static_cast<size_t>(input.numel()),
                 dtype_of(input), root, s);
  })->wait();
}

void NcclCommunicator::barrier() {
  throw_if_failed();
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
  std::lock_guard<std::mutex> lock(mutex_);
  comm_.barrier(stream_->stream.stream());
}

std::string NcclCommunicator::backend_failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failure_.empty()) return failure_;
  const std::string async = comm_.async_error();
  return async.empty() ? std::string() : fmt::format("group '{}': {}", name_, async);
}

void NcclCommunicator::monitor() {
  // A new thread's current device is 0: without this, the event queries of a rank bound to GPU k
  // would create a CUDA context on GPU 0 (hundreds of MiB there per rank of the node).
  c10::cuda::CUDAGuard device_guard(static_cast<c10::DeviceIndex>(device_));
  while (true) {
    std::shared_ptr<InFlight> front;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !in_flight_.empty(); });
      if (in_flight_.empty()) return;  // stopping, nothing left to watch
      front = in_flight_.front();
    }
    std::string why;
    try {
      watchdog_->wait(
          [&] {
            if (front->done.query()) return true;
            std::lock_guard<std::mutex> lock(mutex_);
            why = comm_.async_error();
            return !why.empty();
          },
          CollectiveDesc{front->op, front->seq});
      if (!why.empty()) why = fmt::format("{} #{} on group '{}' failed: {}", front->op, front->seq, name_, why);
    } catch (const common::Error& e) {
      why = e.what();  // the watchdog's timeout, naming the ranks that never arrived
      failure_kind_ = e.kind();
    } catch (const std::exception& e) {
      why = e.what();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (!why.empty()) {
      spdlog::error("{}; aborting the NCCL communicator of group '{}'", why, name_);
      failure_ = why;
      comm_.abort();  // kernels waiting for peers end; every later call throws `failure_`
      in_flight_.clear();
      return;
    }
    in_flight_.pop_front();
  }
}

}  // namespace shardtune::dist

namespace shardtune::dist {

std::unique_ptr<Communicator> make_nccl_communicator(const MpiCommunicator& host, int device, double timeout_s) {
  return std::make_unique<NcclCommunicator>(host, device, timeout_s);
}

}  // namespace shardtune::dist
