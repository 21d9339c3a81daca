// CUDA on the CPU (cuda_emu.h): the block scheduler over fibers (ucontext), and the runtime calls.
#include "cuda_emu.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "cuda_runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define ST_EMU_ASAN 1
#else
#define ST_EMU_ASAN 0
#endif

namespace cuda_emu {
namespace {

constexpr unsigned kWarp = 32;
// A fiber's stack, below it a page that faults: the kernels' frames take a few KiB. (AddressSanitizer
// clears the stack's shadow at each start: a larger stack costs that much more.)
constexpr size_t kStackBytes = 64 * 1024;
constexpr size_t kGuardBytes = 4096;

enum class Wait { kRun, kBarrier, kShuffle, kDone };

// A stack of kStackBytes above a guard page, unmapped with the lane.
struct Stack {
  char* base = nullptr;  // the guard page; the stack starts kGuardBytes above
  Stack() {
    void* p = mmap(nullptr, kGuardBytes + kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED || mprotect(p, kGuardBytes, PROT_NONE) != 0) {
      std::perror("cuda_emu: a fiber's stack");
      std::abort();
    }
    base = static_cast<char*>(p);
  }
  Stack(Stack&& other) noexcept : base(std::exchange(other.base, nullptr)) {}
  Stack& operator=(Stack&&) = delete;
  ~Stack() {
    if (base != nullptr) munmap(base, kGuardBytes + kStackBytes);
  }
  char* bottom() const { return base + kGuardBytes; }
};

struct Lane {
  ucontext_t context{};
  Stack stack;
  uint3 tid{};
  Wait wait = Wait::kRun;
  unsigned shuffles = 0;  // how many this lane has made in the block: picks the exchange's buffer
  void* fake_stack = nullptr;
};

struct State {
  uint3 block{};
  dim3 grid, block_dim;
  const char* where = "";
  void (*body)(void*) = nullptr;
  void* arg = nullptr;
  std::vector<Lane> lanes;
  Lane* current = nullptr;  // the fiber running, or null while threads run without fibers
  uint3 direct_tid{};       // the thread running without a fiber
  ucontext_t scheduler{};
  const void* scheduler_bottom = nullptr;
  size_t scheduler_size = 0;
  std::vector<float> exchange[2];  // a shuffle's values by thread, two buffers used in turn
};

State& state() {
  static State s;
  return s;
}

[[noreturn]] void fail(const char* what) {
  const State& s = state();
  std::fprintf(stderr, "cuda_emu: %s: %s (block %u,%u,%u)\n", s.where, what, s.block.x, s.block.y, s.block.z);
  std::fflush(stderr);
  std::abort();
}

void asan_start(void** fake_stack_save, const void* bottom, size_t size) {
#if ST_EMU_ASAN
  __sanitizer_start_switch_fiber(fake_stack_save, bottom, size);
#else
  (void)fake_stack_save, (void)bottom, (void)size;
#endif
}

void asan_finish(void* fake_stack_save, const void** bottom_old, size_t* size_old) {
#if ST_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake_stack_save, bottom_old, size_old);
#else
  (void)fake_stack_save, (void)bottom_old, (void)size_old;
#endif
}

// On a lane: back to the scheduler, which resumes it when what it waits for has come.
void yield(Wait wait) {
  State& s = state();
  Lane& lane = *s.current;
  lane.wait = wait;
  asan_start(wait == Wait::kDone ? nullptr : &lane.fake_stack, s.scheduler_bottom, s.scheduler_size);
  swapcontext(&lane.context, &s.scheduler);
  asan_finish(lane.fake_stack, &s.scheduler_bottom, &s.scheduler_size);
}

void lane_main() {
  State& s = state();
  asan_finish(nullptr, &s.scheduler_bottom, &s.scheduler_size);
  s.body(s.arg);
  yield(Wait::kDone);
  fail("a finished thread was resumed");
}

void resume(Lane& lane) {
  State& s = state();
  s.current = &lane;
  lane.wait = Wait::kRun;
  void* fake = nullptr;
  asan_start(&fake, lane.stack.bottom(), kStackBytes);
  swapcontext(&s.scheduler, &lane.context);
  asan_finish(fake, nullptr, nullptr);
  s.current = nullptr;
}

void start(Lane& lane, unsigned index) {
  State& s = state();
#if ST_EMU_ASAN
  ASAN_UNPOISON_MEMORY_REGION(lane.stack.bottom(), kStackBytes);  // what an earlier fiber's frames left
#endif
  getcontext(&lane.context);
  lane.context.uc_stack.ss_sp = lane.stack.bottom();
  lane.context.uc_stack.ss_size = kStackBytes;
  lane.context.uc_link = nullptr;
  makecontext(&lane.context, lane_main, 0);
  const dim3& b = s.block_dim;
  lane.tid = {index % b.x, index / b.x % b.y, index / (b.x * b.y)};
  lane.wait = Wait::kRun;
  lane.shuffles = 0;
  lane.fake_stack = nullptr;
}

// After every lane has stopped: releases the warps whose lanes all wait at a shuffle; else the
// block's barrier, if every lane waits there. False when every lane is done.
bool release(Lane* lanes, size_t count) {
  bool shuffled = false;
  for (size_t w = 0; w < count; w += kWarp) {
    const size_t end = std::min(count, w + kWarp);
    size_t at = 0;
    for (size_t i = w; i < end; ++i) at += lanes[i].wait == Wait::kShuffle;
    if (at == 0) continue;
    if (at != end - w) fail("a full-mask shuffle that not every lane of the warp reaches");
    for (size_t i = w; i < end; ++i) lanes[i].wait = Wait::kRun;
    shuffled = true;
  }
  if (shuffled) return true;
  size_t barrier = 0;
  for (size_t i = 0; i < count; ++i) barrier += lanes[i].wait == Wait::kBarrier;
  if (barrier == 0) return false;
  if (barrier != count) fail("a __syncthreads that not every thread of the block reaches");
  for (size_t i = 0; i < count; ++i) lanes[i].wait = Wait::kRun;
  return true;
}

void run_block() {
  State& s = state();
  const dim3& b = s.block_dim;
  const unsigned threads = b.x * b.y * b.z;
  if (s.lanes.size() < threads) s.lanes.resize(threads);  // between blocks: no fiber is suspended
  Lane* lanes = s.lanes.data();
  start(lanes[0], 0);
  resume(lanes[0]);
  // The other threads from the last: a thread that reads what a lower one writes without a barrier
  // between them reads it unwritten.
  if (lanes[0].wait == Wait::kDone) {
    // No barrier nor shuffle in thread 0's path: the others run one after another.
    for (unsigned i = threads - 1; i >= 1; --i) {
      s.direct_tid = {i % b.x, i / b.x % b.y, i / (b.x * b.y)};
      s.body(s.arg);
    }
    return;
  }
  for (unsigned i = 1; i < threads; ++i) start(lanes[i], i);  // thread 0 waits where it stopped
  do {
    for (unsigned i = threads; i-- > 0;)
      if (lanes[i].wait == Wait::kRun) resume(lanes[i]);
  } while (release(lanes, threads));
}

bool valid(const dim3& grid, const dim3& block) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  return grid.x >= 1 && grid.y >= 1 && grid.z >= 1 && grid.x <= 2147483647u && grid.y <= 65535 &&
         grid.z <= 65535 && block.x >= 1 && block.y >= 1 && block.z >= 1 && block.x <= 1024 && block.y <= 1024 &&
         block.z <= 64 && threads <= 1024;
}

cudaError_t last_error = cudaSuccess;

}  // namespace

const uint3& thread_idx() {
  const State& s = state();
  return s.current != nullptr ? s.current->tid : s.direct_tid;
}
const uint3& block_idx() { return state().block; }
const dim3& block_dim() { return state().block_dim; }
const dim3& grid_dim() { return state().grid; }

void sync_threads() {
  if (state().current == nullptr) fail("a __syncthreads that thread 0 of the block never reached");
  yield(Wait::kBarrier);
}

float shfl_xor(unsigned mask, float v, int lane_mask) {
  State& s = state();
  if (mask != 0xffffffffu) fail("a shuffle with a partial mask (not emulated)");
  if (s.current == nullptr) fail("a shuffle that thread 0 of the block never reached");
  if (lane_mask < 0 || lane_mask >= static_cast<int>(kWarp)) fail("a shuffle's lane mask outside the warp");
  Lane& lane = *s.current;
  const unsigned flat = lane.tid.x + s.block_dim.x * (lane.tid.y + s.block_dim.y * lane.tid.z);
  std::vector<float>& buffer = s.exchange[lane.shuffles++ % 2];
  buffer[flat] = v;
  yield(Wait::kShuffle);
  const unsigned partner = (flat & ~(kWarp - 1)) | ((flat % kWarp) ^ static_cast<unsigned>(lane_mask));
  return buffer[partner];
}

void run(const dim3& grid, const dim3& block, void (*body)(void*), void* arg, const char* where) {
  State& s = state();
  if (!valid(grid, block)) {
    std::fprintf(stderr, "cuda_emu: %s: invalid launch configuration: grid %u,%u,%u, block %u,%u,%u\n", where, grid.x,
                 grid.y, grid.z, block.x, block.y, block.z);
    last_error = cudaErrorInvalidValue;
    return;
  }
  s.grid = grid;
  s.block_dim = block;
  s.body = body;
  s.arg = arg;
  s.where = where;
  const unsigned threads = block.x * block.y * block.z;
  for (auto& b : s.exchange) b.assign(threads, 0.0f);
  // CUDA runs blocks in no order it promises: here block (a * i + 1) mod count i-th, a coprime to
  // the count, so that a block that reads what another writes finds it unwritten or overwritten.
  const uint64_t count = uint64_t{grid.x} * grid.y * grid.z;
  uint64_t a = 40503;
  while (std::gcd(a, count) != 1) ++a;
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t k = static_cast<uint64_t>((static_cast<unsigned __int128>(a) * i + 1) % count);
    s.block = {static_cast<unsigned>(k % grid.x), static_cast<unsigned>(k / grid.x % grid.y),
               static_cast<unsigned>(k / (uint64_t{grid.x} * grid.y))};
    run_block();
  }
}

}  // namespace cuda_emu

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  // Exactly the bytes asked for, so that AddressSanitizer sees an access past them.
  return posix_memalign(p, 256, bytes == 0 ? 1 : bytes) == 0 ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  std::memcpy(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

cudaError_t cudaGetLastError() {
  const cudaError_t e = cuda_emu::last_error;
  cuda_emu::last_error = cudaSuccess;
  return e;
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    default:
      return "invalid argument";
  }
}
