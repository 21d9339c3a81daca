// The device layer of a build whose LibTorch has no CUDA: only the CPU exists.
#include "common/error.h"
#include "runtime/dist/device.h"

namespace shardtune::dist {

bool cuda_build() { return false; }

void bind_device(int device) {
  common::raise(common::ErrorKind::kConfig,
                fmt::format("cannot use CUDA device {}: this shardtune was built with a CPU-only LibTorch", device));
}

void allow_cudnn_attention(bool) {}

void synchronize(const c10::Device&) {}

DeviceMemoryStats memory_stats(const c10::Device&) { return {}; }

void reset_peak_memory(const c10::Device&) {}

std::string device_name(const c10::Device&) { return "cpu"; }

void empty_cache(const c10::Device&) {}

CopyStreamScope::CopyStreamScope(const c10::Device& device) : device_(device) {
  ST_CHECK(device.is_cpu(), common::ErrorKind::kInternal, "a {} copy stream in a build without CUDA", device.str());
}
CopyStreamScope::~CopyStreamScope() = default;
CopyStreamScope::Mark CopyStreamScope::done() const { return {}; }
void wait_for_copies(const CopyStreamScope::Mark&) {}

at::Tensor copy_to_host_async(const at::Tensor& t) {
  ST_CHECK(t.is_cpu(), common::ErrorKind::kInternal, "a {} tensor in a build without CUDA", t.device().str());
  return t;
}

void record_memory_history(size_t) {
  common::raise(common::ErrorKind::kConfig, "no CUDA caching allocator to record: this shardtune has a CPU-only LibTorch");
}

std::string memory_snapshot_pickled() {
  common::raise(common::ErrorKind::kConfig, "no CUDA caching allocator to snapshot: this shardtune has a CPU-only LibTorch");
}

}  // namespace shardtune::dist
