// The device layer of a CUDA build, through LibTorch's CUDA API.
#include <ATen/Context.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#if __has_include(<c10/cuda/CUDAEvent.h>)
#include <c10/cuda/CUDAEvent.h>
#else
#include <ATen/cuda/CUDAEvent.h>
#endif
#include <torch/csrc/cuda/memory_snapshot.h>

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "runtime/dist/cuda_check.h"
#include "runtime/dist/device.h"

namespace shardtune::dist {
namespace {

#if __has_include(<c10/cuda/CUDAEvent.h>)
using CudaEvent = c10::cuda::CUDAEvent;  // LibTorch 2.9 on: without ATen's CUDA context header
#else
using CudaEvent = at::cuda::CUDAEvent;
#endif

// Index 0 of the allocator's per-pool statistics is the aggregate over all pools (StatType::AGGREGATE).
constexpr size_t kAggregate = 0;

// A CUDA device without an index means the current one, as in LibTorch.
c10::DeviceIndex index_of(const c10::Device& device) {
  return device.has_index() ? device.index() : c10::cuda::current_device();
}

// The device's copy streams, one each way (up to the device, down to the host), so that a
// prefetch's copy up never queues behind a gradient's copy down: each from LibTorch's pool, kept
// for the process.
enum class Way { kUp, kDown };
c10::cuda::CUDAStream copy_stream(c10::DeviceIndex index, Way way) {
  static std::mutex mutex;
  static std::map<std::pair<c10::DeviceIndex, Way>, c10::cuda::CUDAStream> streams;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(index, way);
  auto found = streams.find(key);
  if (found == streams.end()) found = streams.emplace(key, c10::cuda::getStreamFromPool(false, index)).first;
  return found->second;
}

// `copy` waits for what the current stream of its device has queued so far.
void order_after_current(const c10::cuda::CUDAStream& copy) {
  CudaEvent queued;
  queued.record(c10::cuda::getCurrentCUDAStream(copy.device_index()));
  queued.block(copy);
}

}  // namespace

bool cuda_build() { return true; }

void bind_device(int device) {
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(device));
  allow_cudnn_attention(false);
}

void allow_cudnn_attention(bool allow) { at::globalContext().setSDPUseCuDNN(allow); }

void synchronize(const c10::Device& device) {
  if (device.is_cuda()) c10::cuda::device_synchronize();
}

DeviceMemoryStats memory_stats(const c10::Device& device) {
  if (!device.is_cuda()) return {};
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index_of(device));
  return {stats.allocated_bytes[kAggregate].current, stats.allocated_bytes[kAggregate].peak,
          stats.reserved_bytes[kAggregate].current, stats.reserved_bytes[kAggregate].peak};
}

void reset_peak_memory(const c10::Device& device) {
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(index_of(device));
}

std::string device_name(const c10::Device& device) {
  if (!device.is_cuda()) return "cpu";
  cudaDeviceProp props{};
  ST_CUDA_CHECK(cudaGetDeviceProperties(&props, index_of(device)));
  return props.name;
}

void empty_cache(const c10::Device& device) {
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
}

CopyStreamScope::CopyStreamScope(const c10::Device& device) : device_(device) {
  if (!device.is_cuda()) return;
  const c10::cuda::CUDAStream copy = copy_stream(index_of(device), Way::kUp);
  order_after_current(copy);
  guard_ = std::make_shared<c10::cuda::CUDAStreamGuard>(copy);
}

CopyStreamScope::~CopyStreamScope() = default;

CopyStreamScope::Mark CopyStreamScope::done() const {
  if (!device_.is_cuda()) return {};
  auto event = std::make_shared<CudaEvent>();
  event->record(copy_stream(index_of(device_), Way::kUp));
  return {event};
}

void wait_for_copies(const CopyStreamScope::Mark& mark) {
  if (!mark.event) return;
  auto* event = static_cast<CudaEvent*>(mark.event.get());
  event->block(c10::cuda::getCurrentCUDAStream(event->device_index()));
}

at::Tensor copy_to_host_async(const at::Tensor& t) {
  if (!t.is_cuda()) return t;
  const c10::DeviceIndex index = t.device().index();
  const c10::cuda::CUDAGuard device_guard(index);
  const c10::cuda::CUDAStream copy = copy_stream(index, Way::kDown);
  order_after_current(copy);
  at::Tensor host = at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(true));
  {
    const c10::cuda::CUDAStreamGuard on_copy(copy);
    host.copy_(t, /*non_blocking=*/true);
  }
  c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), copy);
  return host;
}

void record_memory_history(size_t max_entries) {
  // Every event ("all"), with its stack where it was allocated and freed ("all"), C++ frames
  // included ("all": no Python here).
  const std::optional<std::string> all = std::string("all");
  torch::cuda::_record_memory_history(all, all, std::string("all"), max_entries);
}

std::string memory_snapshot_pickled() { return torch::cuda::_memory_snapshot_pickled(); }

}  // namespace shardtune::dist
