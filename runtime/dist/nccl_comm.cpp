// NcclComm: bootstrap over MPI, non-blocking init, collectives on raw device pointers, and waits
// that poll for completion and async errors instead of blocking (as nccl-tests'
// testStreamSynchronize does), so a dead peer ends in an error rather than a hang.
#include "runtime/dist/nccl_comm.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>

#include "common/error.h"
#include "runtime/dist/cuda_check.h"
#include "runtime/dist/mpi_check.h"

namespace shardtune::dist {
namespace {

using common::ErrorKind;

std::string nccl_version() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return "NCCL (unknown version)";
  // NCCL changed its version encoding at 2.9: X*1000+Y*100+Z before, X*10000+Y*100+Z since.
  if (code >= 10000) return fmt::format("NCCL {}.{}.{}", code / 10000, code % 10000 / 100, code % 100);
  return fmt::format("NCCL {}.{}.{}", code / 1000, code % 1000 / 100, code % 100);
}

std::string nccl_error_message(ncclResult_t rc, ncclComm_t comm, std::string_view call) {
  const char* last = ncclGetLastError(comm);
  std::string detail = (last != nullptr && last[0] != '\0') ? fmt::format("; NCCL says: {}", last) : "";
  return fmt::format("{} failed: {}{} ({})", call, ncclGetErrorString(rc), detail, nccl_version());
}

// Calls `done` until it returns true or `timeout_s` passes; false on timeout. The pause between
// polls grows from a yield to 1 ms: short waits (most collectives) stay fast, long ones do not
// burn a core that the data loader could use.
template <class Done>
bool poll_until(double timeout_s, Done&& done) {
  using Clock = std::chrono::steady_clock;
  // Clamped so an "infinite" timeout cannot overflow the clock's representation.
  const auto budget = std::chrono::duration<double>(std::min(timeout_s, 1e9));
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(budget);
  std::chrono::microseconds pause{0};
  while (true) {
    if (done()) return true;
    // One last look after the deadline, so a poller descheduled for a while is not blamed.
    if (Clock::now() >= deadline) return done();
    if (pause.count() == 0) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(pause);
    }
    pause = std::min(pause * 2 + std::chrono::microseconds(1), std::chrono::microseconds(1000));
  }
}

// The state of a non-blocking communicator: ncclInProgress while an init or enqueue is under way.
ncclResult_t async_state(ncclComm_t comm) {
  ncclResult_t state = ncclSuccess;
  ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
  return rc != ncclSuccess ? rc : state;
}

// Makes `device` current for CUDA calls on the communicator's resources, and puts back the
// caller's device afterwards, so a call never changes which GPU the calling thread uses.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    ST_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) {
      ST_CUDA_CHECK(cudaSetDevice(device));
      switched_ = true;
    }
  }
  ~DeviceGuard() {
    if (switched_ && cudaSetDevice(previous_) != cudaSuccess) {
      (void)cudaGetLastError();
      spdlog::warn("could not restore CUDA device {} after an NCCL communicator call", previous_);
    }
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};

// What rank 0 broadcasts: the unique id, or why it could not make one, so the other ranks fail
// with rank 0 instead of waiting for an id that never comes.
struct UniqueIdMessage {
  int status = ncclSuccess;
  ncclUniqueId id{};
};

}  // namespace

void check_nccl(ncclResult_t rc, ncclComm_t comm, const char* expr, const std::source_location& loc) {
  if (rc == ncclSuccess) return;
  common::raise(ErrorKind::kNccl, nccl_error_message(rc, comm, expr), loc);
}

ncclDataType_t to_nccl(common::Dtype t) {
  switch (t) {
    case common::Dtype::kF32: return ncclFloat32;
    case common::Dtype::kF64: return ncclFloat64;
    case common::Dtype::kBF16: return ncclBfloat16;
    case common::Dtype::kF16: return ncclFloat16;
    case common::Dtype::kI32: return ncclInt32;
    case common::Dtype::kI64: return ncclInt64;
    case common::Dtype::kU8:
    case common::Dtype::kBool: return ncclUint8;
    case common::Dtype::kI8: return ncclInt8;
    case common::Dtype::kI16:
    case common::Dtype::kF8E4M3:
    case common::Dtype::kF8E5M2: break;
  }
  common::raise(ErrorKind::kInternal, fmt::format("NCCL has no type for {} tensors", short_name(t)));
}

ncclRedOp_t to_nccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  common::raise(ErrorKind::kInternal, fmt::format("no NCCL operator for ReduceOp {}", static_cast<int>(op)));
}

NcclComm NcclComm::create(MPI_Comm mpi_comm, int device, double timeout_s) {
  if (!(timeout_s > 0)) {
    common::raise(ErrorKind::kConfig, fmt::format("NCCL timeout must be positive seconds, got {}", timeout_s));
  }
  int rank = 0;
  int size = 0;
  ST_MPI_CHECK(MPI_Comm_rank(mpi_comm, &rank));
  ST_MPI_CHECK(MPI_Comm_size(mpi_comm, &size));

  UniqueIdMessage message;
  if (rank == 0) message.status = ncclGetUniqueId(&message.id);
  ST_MPI_CHECK(MPI_Bcast(&message, sizeof(message), MPI_BYTE, 0, mpi_comm));
  if (message.status != ncclSuccess) {
    const auto rc = static_cast<ncclResult_t>(message.status);
    if (rank == 0) check_nccl(rc, nullptr, "ncclGetUniqueId", std::source_location::current());
    common::raise(ErrorKind::kNccl, fmt::format("rank 0 could not create the NCCL unique id: {} ({})",
                                                ncclGetErrorString(rc), nccl_version()));
  }

  // NCCL binds a communicator to the device current at init.
  ST_CUDA_CHECK(cudaSetDevice(device));
  // NCCL (>= 2.22) connects each algorithm and protocol lazily, at the first collective that uses
  // it: its buffers would then be allocated in the first step, at peak activation memory. Connecting
  // at init puts them before the model instead, where the planner counts them. A value the user set
  // is kept. (NCCL reads it once, at its first communicator: every group of the job.)
  ::setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0);

  // Non-blocking, so a peer that never joins leaves this rank polling (and timing out) rather than
  // stuck inside NCCL.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t rc = ncclCommInitRankConfig(&comm, size, message.id, rank, &config);
  if (rc == ncclInProgress) {
    const bool finished = poll_until(timeout_s, [&] {
      rc = async_state(comm);
      return rc != ncclInProgress;
    });
    if (!finished) {
      ncclCommAbort(comm);
      common::raise(ErrorKind::kTimeout,
                    fmt::format("ncclCommInitRankConfig did not finish within {} s on rank {} of {} "
                                "(device {}); the communicator was aborted. HINT: every rank of the "
                                "group must create it; look for a rank that died or is stuck before "
                                "this point, and rerun with NCCL_DEBUG=INFO to see how far init got",
                                timeout_s, rank, size, device));
    }
  }
  if (rc != ncclSuccess) {
    std::string text = nccl_error_message(rc, comm, "ncclCommInitRankConfig");
    if (comm != nullptr) ncclCommAbort(comm);
    common::raise(ErrorKind::kNccl, fmt::format("{} on rank {} of {} (device {})", text, rank, size, device));
  }
  return NcclComm(comm, rank, size, device, timeout_s);
}

NcclComm::NcclComm(ncclComm_t comm, int rank, int size, int device, double timeout_s)
    : comm_(comm), rank_(rank), size_(size), device_(device), timeout_s_(timeout_s) {}

NcclComm::~NcclComm() { release(); }

NcclComm::NcclComm(NcclComm&& other) noexcept
    : comm_(std::exchange(other.comm_, nullptr)),
      rank_(other.rank_),
      size_(other.size_),
      device_(other.device_),
      timeout_s_(other.timeout_s_),
      aborted_(other.aborted_),
      barrier_buf_(std::exchange(other.barrier_buf_, nullptr)),
      done_event_(std::exchange(other.done_event_, nullptr)) {}

NcclComm& NcclComm::operator=(NcclComm&& other) noexcept {
  if (this == &other) return *this;
  release();
  comm_ = std::exchange(other.comm_, nullptr);
  rank_ = other.rank_;
  size_ = other.size_;
  device_ = other.device_;
  timeout_s_ = other.timeout_s_;
  aborted_ = other.aborted_;
  barrier_buf_ = std::exchange(other.barrier_buf_, nullptr);
  done_event_ = std::exchange(other.done_event_, nullptr);
  return *this;
}

void NcclComm::release() noexcept {
  if (comm_ != nullptr) {
    // Finalize flushes what is still in flight; bounded like every other wait, because a peer
    // that died would leave it waiting. Destroy only after a clean finalize, abort otherwise.
    ncclResult_t rc = ncclCommFinalize(comm_);
    if (rc == ncclInProgress) {
      poll_until(timeout_s_, [&] {
        rc = async_state(comm_);
        return rc != ncclInProgress;
      });
    }
    if (rc == ncclSuccess) {
      rc = ncclCommDestroy(comm_);
      if (rc != ncclSuccess) spdlog::warn("ncclCommDestroy on rank {} failed: {}", rank_, ncclGetErrorString(rc));
    } else {
      spdlog::warn("ncclCommFinalize on rank {} {}; aborting the communicator", rank_,
                   rc == ncclInProgress ? fmt::format("did not finish within {} s", timeout_s_)
                                        : fmt::format("failed: {}", ncclGetErrorString(rc)));
      ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }
  // After the communicator, so no collective can still be using the barrier buffer.
  if (barrier_buf_ != nullptr) {
    if (cudaFree(barrier_buf_) != cudaSuccess) {
      spdlog::warn("cudaFree of the NCCL barrier buffer failed: {}", cudaGetErrorString(cudaGetLastError()));
    }
    barrier_buf_ = nullptr;
  }
  if (done_event_ != nullptr) {
    if (cudaEventDestroy(done_event_) != cudaSuccess) {
      spdlog::warn("cudaEventDestroy failed: {}", cudaGetErrorString(cudaGetLastError()));
    }
    done_event_ = nullptr;
  }
}

void NcclComm::abort() noexcept {
  if (comm_ == nullptr) return;
  ncclResult_t rc = ncclCommAbort(comm_);
  if (rc != ncclSuccess) spdlog::warn("ncclCommAbort on rank {} failed: {}", rank_, ncclGetErrorString(rc));
  comm_ = nullptr;
  aborted_ = true;
}

void NcclComm::require_live(std::string_view op) const {
  if (comm_ != nullptr) return;
  common::raise(ErrorKind::kInternal,
                fmt::format("{} on an NCCL communicator that {}", op,
                            aborted_ ? "was aborted after an earlier error" : "was never created or was moved from"));
}

void NcclComm::fail(ncclResult_t rc, std::string_view call) {
  // The text must be read before abort: ncclGetLastError needs the communicator.
  std::string text = nccl_error_message(rc, comm_, call);
  abort();
  common::raise(ErrorKind::kNccl, fmt::format("{} on rank {} of {} (device {}); the communicator was aborted",
                                              text, rank_, size_, device_));
}

void NcclComm::fail_timeout(std::string_view what) {
  abort();
  common::raise(ErrorKind::kTimeout,
                fmt::format("{} did not finish within {} s on rank {} of {} (device {}); the NCCL "
                            "communicator was aborted. HINT: a peer rank may have died or skipped "
                            "this collective; its log shows which, and NCCL_DEBUG=INFO shows where "
                            "NCCL was waiting",
                            what, timeout_s_, rank_, size_, device_));
}

void NcclComm::await_enqueued(ncclResult_t rc, std::string_view call) {
  if (rc == ncclInProgress) {
    const bool finished = poll_until(timeout_s_, [&] {
      rc = async_state(comm_);
      return rc != ncclInProgress;
    });
    if (!finished) fail_timeout(fmt::format("enqueueing {}", call));
  }
  if (rc != ncclSuccess) fail(rc, call);
}

void NcclComm::all_gather(const void* send, void* recv, size_t send_count, common::Dtype dtype, cudaStream_t stream) {
  require_live("all_gather");
  await_enqueued(ncclAllGather(send, recv, send_count, to_nccl(dtype), comm_, stream), "ncclAllGather");
}

void NcclComm::reduce_scatter(const void* send, void* recv, size_t recv_count, common::Dtype dtype, ReduceOp op,
                              cudaStream_t stream) {
  require_live("reduce_scatter");
  // NCCL 2.28.9's one-rank ReduceScatter with ncclAvg left NaN in the last elements of outputs of
  // odd lengths (mpi_collectives_test on an H100, 2026-11-27); the average of one rank is the sum.
  if (size_ == 1 && op == ReduceOp::kAvg) op = ReduceOp::kSum;
  await_enqueued(ncclReduceScatter(send, recv, recv_count, to_nccl(dtype), to_nccl(op), comm_, stream),
                 "ncclReduceScatter");
}

void NcclComm::all_reduce(const void* send, void* recv, size_t count, common::Dtype dtype, ReduceOp op,
                          cudaStream_t stream) {
  require_live("all_reduce");
  await_enqueued(ncclAllReduce(send, recv, count, to_nccl(dtype), to_nccl(op), comm_, stream), "ncclAllReduce");
}

void NcclComm::broadcast(const void* send, void* recv, size_t count, common::Dtype dtype, int root,
                         cudaStream_t stream) {
  require_live("broadcast");
  if (root < 0 || root >= size_) {
    common::raise(ErrorKind::kInternal, fmt::format("broadcast root {} is outside the group of {} ranks", root, size_));
  }
  await_enqueued(ncclBroadcast(send, recv, count, to_nccl(dtype), root, comm_, stream), "ncclBroadcast");
}

void NcclComm::gather(const void* send, void* recv, size_t count, common::Dtype dtype, int root, cudaStream_t stream) {
  require_live("gather");
  if (root < 0 || root >= size_) {
    common::raise(ErrorKind::kInternal, fmt::format("gather root {} is outside the group of {} ranks", root, size_));
  }
  const ncclDataType_t type = to_nccl(dtype);
  const size_t bytes = count * element_size(dtype);
  ncclResult_t rc = ncclGroupStart();
  if (rc == ncclSuccess && rank_ == root) {
    for (int peer = 0; peer < size_ && rc == ncclSuccess; ++peer)
      rc = ncclRecv(static_cast<char*>(recv) + static_cast<size_t>(peer) * bytes, count, type, peer, comm_, stream);
  }
  if (rc == ncclSuccess) rc = ncclSend(send, count, type, root, comm_, stream);
  const ncclResult_t end = ncclGroupEnd();
  await_enqueued(rc != ncclSuccess ? rc : end, "ncclSend/ncclRecv (gather)");
}

std::string NcclComm::async_error() const {
  if (comm_ == nullptr) return aborted_ ? "the communicator was aborted" : "";
  const ncclResult_t rc = async_state(comm_);
  if (rc == ncclSuccess || rc == ncclInProgress) return "";
  return nccl_error_message(rc, comm_, "an NCCL collective");
}

void NcclComm::synchronize(cudaStream_t stream, std::string_view what) {
  require_live(what);
  {
    DeviceGuard guard(device_);
    if (done_event_ == nullptr) ST_CUDA_CHECK(cudaEventCreateWithFlags(&done_event_, cudaEventDisableTiming));
    ST_CUDA_CHECK(cudaEventRecord(done_event_, stream));
  }
  cudaError_t cuda_rc = cudaSuccess;
  ncclResult_t nccl_rc = ncclSuccess;
  const bool finished = poll_until(timeout_s_, [&] {
    cuda_rc = cudaEventQuery(done_event_);
    if (cuda_rc == cudaSuccess) return true;
    if (cuda_rc != cudaErrorNotReady) return true;
    // "Not ready" is also left as this thread's last error, where LibTorch's next launch check
    // would report it as a failure (LibTorch's own event query clears it the same way).
    (void)cudaGetLastError();
    cuda_rc = cudaSuccess;
    nccl_rc = async_state(comm_);
    return nccl_rc != ncclSuccess && nccl_rc != ncclInProgress;
  });
  if (!finished) fail_timeout(what);
  if (nccl_rc != ncclSuccess && nccl_rc != ncclInProgress) fail(nccl_rc, what);
  if (cuda_rc != cudaSuccess) {
    // A device fault while NCCL kernels may still be running: they will not finish on their own.
    abort();
    check_cuda(cuda_rc, fmt::format("cudaEventQuery while waiting for {}", what).c_str(),
               std::source_location::current());
  }
}

void NcclComm::barrier(cudaStream_t stream) {
  require_live("barrier");
  if (barrier_buf_ == nullptr) {
    DeviceGuard guard(device_);
    void* buf = nullptr;
    ST_CUDA_CHECK(cudaMalloc(&buf, sizeof(int32_t)));
    barrier_buf_ = static_cast<int32_t*>(buf);
    ST_CUDA_CHECK(cudaMemsetAsync(barrier_buf_, 0, sizeof(int32_t), stream));
  }
  // Max keeps the value at 0 however many barriers run; only the rendezvous matters.
  all_reduce(barrier_buf_, barrier_buf_, 1, common::Dtype::kI32, ReduceOp::kMax, stream);
  synchronize(stream, "barrier");
}

}  // namespace shardtune::dist
