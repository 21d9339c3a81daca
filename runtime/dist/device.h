// The few device facts and calls that are not tensor operations, so that everything above this
// layer stays device-generic. A CUDA build defines them through LibTorch's CUDA API
// (device_cuda.cpp); a build with a CPU-only LibTorch defines them for a machine without GPUs
// (device_cpu.cpp), which is what CI compiles and runs.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace shardtune::dist {

// Whether this build's LibTorch can run CUDA tensors.
bool cuda_build();

// Makes `device` the current CUDA device of this thread (LibTorch's and the CUDA runtime's), and
// leaves cuDNN out of scaled_dot_product_attention (see allow_cudnn_attention).
void bind_device(int device);

// Whether scaled_dot_product_attention may use cuDNN's kernels (LibTorch 2.x on a GPU; no-op
// otherwise). Off once a device is bound: cuDNN builds and keeps a plan for every shape it meets,
// per thread, and shardtune's shapes vary from batch to batch (padded batches take their longest
// sample's length, packed rows attend per document), where flash attention serves any length.
// model::causal_attention allows it for its own calls, per shape, where it timed faster.
void allow_cudnn_attention(bool allow);

// The host waits until everything queued on `device` has finished (benchmarks and tests; never
// inside a training step). No-op on the CPU.
void synchronize(const c10::Device& device);

struct DeviceMemoryStats {
  int64_t allocated = 0;       // bytes in live tensors now
  int64_t peak_allocated = 0;  // since the last reset
  int64_t reserved = 0;        // held by the caching allocator now
  int64_t peak_reserved = 0;
};

// The caching allocator's figures for a CUDA device; zeros for the CPU.
DeviceMemoryStats memory_stats(const c10::Device& device);
void reset_peak_memory(const c10::Device& device);

// The name the driver gives a CUDA device (e.g. "NVIDIA H100 80GB HBM3"); "cpu" for the CPU.
std::string device_name(const c10::Device& device);

// Returns the caching allocator's unused blocks to the device (after an out-of-memory error).
void empty_cache(const c10::Device& device);

// While one lives, work queued on `device` goes to the device's stream for copies up (one of its
// own; copy_to_host_async's copies down have another, so neither queues behind the other), ordered
// after what the caller's stream had queued when it began: memory that stream just freed may be
// written. Memory allocated meanwhile (ATen's temporaries: an upload that converts its dtype
// stages the source's dtype on the device) belongs to that stream. done() marks what was queued
// on it so far; a later wait_for_copies(mark) makes the current stream wait for that, and no
// more. A no-op on the CPU (one stream: program order).
class CopyStreamScope {
 public:
  explicit CopyStreamScope(const c10::Device& device);
  ~CopyStreamScope();
  CopyStreamScope(const CopyStreamScope&) = delete;
  CopyStreamScope& operator=(const CopyStreamScope&) = delete;
  struct Mark {
    std::shared_ptr<void> event;  // empty on the CPU
  };
  Mark done() const;

 private:
  std::shared_ptr<void> guard_;  // the stream guard, on a GPU
  c10::Device device_;
};
void wait_for_copies(const CopyStreamScope::Mark& mark);

// A CUDA tensor's copy in pinned host memory, queued on the device's stream for copies down after
// what the current stream has queued so far: neither the host nor the current stream waits for it
// (the copy engine runs it beside the compute that follows), and the source's memory is not reused
// before it is done. synchronize(device) waits for it. A CPU tensor is returned as it is.
at::Tensor copy_to_host_async(const at::Tensor& t);

// The CUDA caching allocator's history (benchmarks): from record_memory_history on, every
// allocation and free on every device, with the C++ stack that made it, the latest `max_entries`
// events kept; memory_snapshot_pickled() then gives the allocator's state and that history in
// PyTorch's snapshot format, the pickle torch.cuda.memory._dump_snapshot writes (bench/
// memory_peak.py reads it). A build without CUDA has no such allocator: both throw.
void record_memory_history(size_t max_entries);
std::string memory_snapshot_pickled();

}  // namespace shardtune::dist
