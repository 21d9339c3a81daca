// Training throughput of shardtune on its ranks' devices for one model and configuration:
// tokens/s, achieved TFLOP/s by torchtitan's FLOP estimate (runtime/train/flops.h), and peak
// device memory. The weights are streamed from a Hugging Face folder (shardtune-make-model makes
// one) into FULL_SHARD units with bf16 mixed precision. Rank 0 prints one JSON object; a
// micro-batch that does not fit exits with code 3, so bench/gpu.sh can look for the largest that
// does, and compares the figures with PyTorch measured on the same GPU in the same run.
//   mpirun -np W train_bench MODEL_DIR [--device cuda|cpu] [--seq 2048] [--micro-batch 4]
//       [--checkpointing [--uncheckpointed-blocks K]] [--packed] [--attention measured|no-cudnn|cudnn] [--steps 10] [--warmup 3] [--fp32]
//       [--strategy full_shard|no_shard] [--threads N] [--trace DIR] [--unfused rmsnorm,rope,...|all]
//       [--cpu-offload] [--adamw-ops | --adamw-torch-fused]
// --fp32: no mixed precision (parameters, products and gradients in fp32), as CPU training runs.
// --threads: CPU threads per rank (0: the rank's share of the node, as jobs choose; -1: leave
// LibTorch's and OpenBLAS's own defaults, to measure what that choice gains).
// --uncheckpointed-blocks: with --checkpointing, the last K blocks keep their activations
// ([fsdp] uncheckpointed_blocks).
// --packed: each row holds documents of 64 to 1024 tokens whose positions restart (per-document
// attention); otherwise each row is one document (plain causal attention), at equal tokens.
// --attention: the attention kernel per shape as training chooses it (measured: cuDNN's where it
// was the faster, runtime/model/attention_choice.h), or cuDNN's left out, or allowed, everywhere:
// what the choice is worth.
// --unfused: the named fusions (runtime/model/fused_ops.h) run as ATen operations instead, to price
// each; the fused kernels run on CUDA tensors of a build with them ("fused_kernels" in the output).
// --cpu-offload: [fsdp] cpu_offload (the trainable shards, gradients and AdamW's moments in host
// memory, the optimizer stepping there), to price it against the same run without.
// --trace DIR: after the timed steps, three more of which the last two are traced by the step
// profiler (GPU kernels included on CUDA) into DIR/rank-NNNNN.trace.json; the figures are of the
// timed steps alone.
#include <ATen/ops/empty.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <ATen/Parallel.h>
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/hf/hf_tensor_source.h"
#include "common/error.h"
#include "common/process_memory.h"
#include "runtime/dist/cpu_threads.h"
#include "runtime/dist/device.h"
#include "runtime/dist/gpu_sharing.h"
#include "runtime/dist/mpi_runtime.h"
#include "runtime/dist/topology.h"
#include "runtime/fsdp/adamw.h"
#include "runtime/fsdp/fsdp_llama.h"
#include "runtime/fsdp/shard_loader.h"
#include "runtime/model/attention_choice.h"
#include "runtime/model/fused_ops.h"
#include "runtime/model/kernel_calls.h"
#include "runtime/train/flops.h"
#include "runtime/train/host_allocator.h"
#include "runtime/train/profiler.h"
#include "runtime/train/train_step.h"

using namespace shardtune;

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kOutOfMemory = 3;
constexpr double kLr = 1e-5;  // bench/torch_baseline.py uses the same AdamW: this, and AdamWConfig's defaults
// Allocator events a --memory-snapshot keeps (bench/torch_baseline.py keeps as many): the latest,
// where the timed steps make more.
constexpr size_t kSnapshotEvents = 200000;

struct Args {
  std::string model_dir;
  std::string device = "cuda";
  int64_t seq = 2048;
  int64_t micro_batch = 4;
  bool checkpointing = false;
  int64_t uncheckpointed_blocks = 0;
  bool packed = false;
  std::string attention = "measured";
  int steps = 10;
  int warmup = 3;
  bool fp32 = false;
  std::string strategy = "full_shard";
  int threads = 0;
  std::string trace_dir;
  bool adamw_ops = false;
  bool adamw_torch = false;
  bool cpu_offload = false;
  // Fusions turned off (the ablation): rmsnorm, residual_norm, rope, swiglu, cross_entropy, gqa, gate_up,
  // qkv.
  std::vector<std::string> unfused;
  std::string memory_snapshot;       // rank 0's allocator history over two more steps, to this file
};

// The fusions a run keeps: all but those named ("all": none), and its attention kernels.
model::Fusions fusions_of(const std::vector<std::string>& unfused, const std::string& attention) {
  model::Fusions f;
  f.attention = attention == "cudnn"      ? model::AttentionKernels::kCudnn
                : attention == "no-cudnn" ? model::AttentionKernels::kNoCudnn
                                          : model::AttentionKernels::kMeasured;
  for (const std::string& name : unfused) {
    const bool all = name == "all";
    if (all || name == "rmsnorm") f.rmsnorm = false;
    if (all || name == "residual_norm") f.residual_norm = false;
    if (all || name == "rope") f.rope = false;
    if (all || name == "swiglu") f.swiglu = false;
    if (all || name == "cross_entropy") f.cross_entropy = false;
    if (all || name == "gqa") f.gqa_attention = false;
    if (all || name == "gate_up") f.joined_gate_up = false;
    if (all || name == "qkv") f.joined_qkv = false;
  }
  return f;
}

// Deterministic tokens for step `step` of rank `rank`; with `packed`, positions restarting at the
// start of each document (64 to 1024 tokens long, the last one cut at the row's end).
train::Batch make_batch(const Args& a, int64_t vocab, int step, int rank) {
  std::mt19937_64 rng(static_cast<uint64_t>(step) * 1000003u + static_cast<uint64_t>(rank));
  at::Tensor ids = at::empty({a.micro_batch, a.seq}, at::kLong);
  at::Tensor positions = at::empty({a.micro_batch, a.seq}, at::kLong);
  std::uniform_int_distribution<int64_t> token(0, vocab - 1), length(64, 1024);
  int64_t* id = ids.data_ptr<int64_t>();
  int64_t* pos = positions.data_ptr<int64_t>();
  for (int64_t r = 0; r < a.micro_batch; ++r) {
    int64_t next_start = a.packed ? length(rng) : a.seq, p = 0;
    for (int64_t t = 0; t < a.seq; ++t, ++p) {
      if (t == next_start) {
        p = 0;
        next_start += length(rng);
      }
      id[r * a.seq + t] = token(rng);
      pos[r * a.seq + t] = p;
    }
  }
  return {ids, ids, a.packed ? positions : at::Tensor(), 1.0, {}};
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  ST_CHECK(out.good(), common::ErrorKind::kIo, "could not write {}", path);
}

bool is_out_of_memory(const std::exception& e) {
  const std::string what = e.what();
  return what.find("out of memory") != std::string::npos || what.find("CUDA_ERROR_OUT_OF_MEMORY") != std::string::npos;
}

int run(const Args& a) {
  int rank = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const dist::Topology topo = dist::discover_topology(MPI_COMM_WORLD);
  const int gpus = dist::visible_gpus();
  const dist::DeviceChoice choice =
      dist::choose_device(a.device == "cpu" ? dist::DeviceRequest::kCpu : dist::DeviceRequest::kCuda, topo.local_rank,
                          topo.local_size, gpus, dist::cuda_build());
  const at::Device device =
      choice.device >= 0 ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(choice.device)) : at::Device(at::kCPU);
  if (choice.device >= 0) dist::bind_device(choice.device);
  ST_CHECK(a.memory_snapshot.empty() || device.is_cuda(), common::ErrorKind::kConfig,
           "--memory-snapshot records the CUDA caching allocator's history: it needs a GPU");
  if (device.is_cpu()) train::use_large_block_cache();  // as shardtune-rank
  model::set_fusions(fusions_of(a.unfused, a.attention));
  std::string threads_reason =
      fmt::format("defaults: LibTorch {}, {}", at::get_num_threads(), dist::blas_description());
  if (a.threads >= 0) {
    const dist::ThreadChoice t = dist::choose_threads(dist::thread_inputs(a.threads, topo.local_size));
    dist::use_threads(t.threads);
    threads_reason = t.reason;
  }

  job::Job job;
  job.slurm.ntasks_per_node = world;
  job.train.mixed_precision = !a.fp32;
  job.fsdp.sharding_strategy = a.strategy == "no_shard" ? job::ShardingStrategy::kNoShard
                                                        : job::ShardingStrategy::kFullShard;
  job.fsdp.activation_checkpointing = a.checkpointing;
  job.fsdp.uncheckpointed_blocks = a.uncheckpointed_blocks;
  job.fsdp.cpu_offload = a.cpu_offload;
  const fsdp::FsdpOptions options =
      fsdp::fsdp_options(job.fsdp, job.train, world, static_cast<int>(job.slurm.ranks_per_node()), device);
  dist::ProcessGroups groups = dist::make_process_groups(
      MPI_COMM_WORLD, options.shard_size,
      {600.0, choice.device, dist::choose_device_collectives(MPI_COMM_WORLD, choice.device)});
  const model::LlamaConfig config = model::LlamaConfig::from_file(a.model_dir + "/config.json");
  model::LlamaForCausalLM skeleton(config, at::TensorOptions().device(at::kMeta));
  const checkpoint::HfFolderSourceFactory source{a.model_dir};
  fsdp::validate_source(skeleton, source, *groups.world);
  fsdp::FsdpLlama model(skeleton, groups, options);
  const fsdp::LoadStats load = fsdp::load_shards(model, source);
  fsdp::AdamWConfig adamw;
  adamw.fused = !a.adamw_ops;
  adamw.device_kernel = !a.adamw_torch;
  fsdp::AdamW optimizer(adamw);
  train::add_trainable_shards(model, optimizer);

  std::vector<double> step_seconds;
  try {
    for (int s = 0; s < a.warmup + a.steps; ++s) {
      const train::Batch batch = make_batch(a, config.vocab_size, s, rank);
      if (s == a.warmup) dist::reset_peak_memory(device);
      // The clock reads the whole step, AdamW included: the device is idle at both reads (the same
      // window as bench/torch_baseline.py's), so no step's work runs into the next one's time.
      dist::synchronize(device);
      groups.world->barrier();
      const auto start = Clock::now();
      train::train_step(model, optimizer, {batch}, {kLr}, *groups.world);
      dist::synchronize(device);
      if (s >= a.warmup) step_seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
    if (!a.memory_snapshot.empty()) {
      // Two more steps with the allocator's history recorded (it slows them: not timed), as
      // bench/torch_baseline.py --memory-snapshot records its own.
      if (rank == 0) dist::record_memory_history(kSnapshotEvents);
      for (int n = 1; n <= 2; ++n)
        train::train_step(model, optimizer, {make_batch(a, config.vocab_size, a.warmup + a.steps + n, rank)}, {kLr},
                          *groups.world);
      dist::synchronize(device);
      if (rank == 0) write_file(a.memory_snapshot, dist::memory_snapshot_pickled());
    }
    if (!a.trace_dir.empty()) {
      train::ProfilerOptions trace;
      trace.trace = true;
      trace.dir = a.trace_dir;
      trace.wait = 0;
      trace.warmup = 1;
      trace.active = 2;
      trace.cuda = device.is_cuda();
      train::StepProfiler profiler(trace, rank);
      for (int64_t n = 1; n <= trace.warmup + trace.active; ++n) {
        const train::Batch batch = make_batch(a, config.vocab_size, a.warmup + a.steps + static_cast<int>(n), rank);
        profiler.begin_step(n);
        train::train_step(model, optimizer, {batch}, {kLr}, *groups.world);
        profiler.end_step(n);
      }
      if (rank == 0) fmt::print(stderr, "trace: {}\n", profiler.trace_path());
    }
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e)) throw;
    if (rank == 0) fmt::print(stderr, "micro-batch {} does not fit: {}\n", a.micro_batch, e.what());
    return kOutOfMemory;
  }
  const dist::DeviceMemoryStats memory = dist::memory_stats(device);
  std::sort(step_seconds.begin(), step_seconds.end());
  // The slowest rank's median and the largest peak RSS of any rank (every rank's whole process).
  double median = step_seconds[step_seconds.size() / 2];
  MPI_Allreduce(MPI_IN_PLACE, &median, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  // The fastest and slowest step of any rank, which bound every rank's median.
  double fastest = step_seconds.front(), slowest = step_seconds.back();
  MPI_Allreduce(MPI_IN_PLACE, &fastest, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  double peak_rss_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;
  MPI_Allreduce(MPI_IN_PLACE, &peak_rss_mib, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  const double tokens_per_s = static_cast<double>(a.micro_batch * a.seq * world) / median;
  const double flops_per_token = train::training_flops_per_token(config, a.seq);
  if (rank == 0) {
    const nlohmann::json out = {
        {"engine", "shardtune"},
        {"device", device.str()},
        {"world_size", world},
        {"parameters", config.num_parameters()},
        {"seq", a.seq},
        {"precision", a.fp32 ? "fp32" : "bf16 mixed"},
        {"strategy", a.strategy},
        {"adamw", a.adamw_ops ? "ops" : a.adamw_torch ? "torch-fused" : "fused"},
        {"cpu_offload", a.cpu_offload},
        {"unfused", a.unfused},
        {"fused_kernels", device.is_cuda() && model::kernel_calls::cuda_kernels_built()},
        {"adamw_hyper", {{"lr", kLr}, {"betas", {adamw.beta1, adamw.beta2}}, {"eps", adamw.eps},
                         {"weight_decay", adamw.weight_decay}}},
        {"timing", "device synchronised before and after each step, AdamW included"},
        {"threads", at::get_num_threads()},
        {"blas_threads", dist::blas_threads()},
        {"threads_reason", threads_reason},
        {"blas", dist::blas_description()},
        {"peak_rss_mib", peak_rss_mib},
        {"micro_batch", a.micro_batch},
        {"activation_checkpointing", a.checkpointing},
        {"uncheckpointed_blocks", a.uncheckpointed_blocks},
        {"packed", a.packed},
        {"attention", a.attention},
        {"attention_choices", model::attention_choice().choices()},
        {"steps", a.steps},
        {"step_seconds_median", median},
        {"step_seconds_min", fastest},
        {"step_seconds_max", slowest},
        {"tokens_per_s", tokens_per_s},
        {"flops_per_token", flops_per_token},
        {"tflops_per_s_per_device", tokens_per_s * flops_per_token / world / 1e12},
        {"gflops_per_s", tokens_per_s * flops_per_token / 1e9},
        {"peak_allocated_gib", static_cast<double>(memory.peak_allocated) / (1 << 30)},
        {"peak_reserved_gib", static_cast<double>(memory.peak_reserved) / (1 << 30)},
        {"load_seconds", load.seconds}};
    fmt::print("{}\n", out.dump());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  common::keep_freed_host_memory();  // as shardtune-rank
  CLI::App app{"shardtune training throughput on one model and configuration"};
  Args a;
  app.add_option("model_dir", a.model_dir, "Hugging Face model folder (shardtune-make-model)")->required();
  app.add_option("--device", a.device, "cuda or cpu")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--seq", a.seq, "Tokens per row")->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  app.add_option("--micro-batch", a.micro_batch, "Rows per rank")->check(CLI::Range(int64_t{1}, int64_t{4096}));
  app.add_flag("--checkpointing", a.checkpointing, "Activation checkpointing");
  app.add_option("--uncheckpointed-blocks", a.uncheckpointed_blocks,
                 "With --checkpointing: the last K blocks keep their activations")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->needs("--checkpointing");
  app.add_flag("--packed", a.packed, "Packed documents (per-document attention)");
  app.add_option("--attention", a.attention, "Attention's kernels: measured per shape (as training), no-cudnn, cudnn")
      ->check(CLI::IsMember({"measured", "no-cudnn", "cudnn"}));
  app.add_option("--steps", a.steps, "Timed steps")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", a.warmup, "Untimed steps first")->check(CLI::Range(0, 100000));
  app.add_flag("--fp32", a.fp32, "fp32 throughout (no mixed precision)");
  app.add_option("--strategy", a.strategy, "full_shard or no_shard")->check(CLI::IsMember({"full_shard", "no_shard"}));
  app.add_flag("--adamw-ops", a.adamw_ops, "AdamW an operation at a time (LibTorch's single-tensor path), not fused");
  app.add_flag("--adamw-torch-fused", a.adamw_torch, "On a GPU, LibTorch's fused AdamW kernel instead of shardtune's");
  app.add_flag("--cpu-offload", a.cpu_offload, "Shards, gradients and AdamW's state in host memory ([fsdp] cpu_offload)");
  app.add_option("--unfused", a.unfused, "Fusions to turn off (the ablation), comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember(
          {"rmsnorm", "residual_norm", "rope", "swiglu", "cross_entropy", "gqa", "gate_up", "qkv", "all"}));
  app.add_option("--memory-snapshot", a.memory_snapshot,
                 "After the timed steps, two more with the caching allocator's history recorded (a GPU only), rank "
                 "0's snapshot written to this file (PyTorch's pickle; bench/memory_peak.py reads it)");
  app.add_option("--trace", a.trace_dir, "Trace two more steps with the step profiler into this folder");
  app.add_option("--threads", a.threads, "CPU threads per rank (0: the rank's share; -1: the libraries' defaults)")
      ->check(CLI::Range(-1, 4096));
  CLI11_PARSE(app, argc, argv);
  dist::MpiRuntime mpi(&argc, &argv);
  try {
    return run(a);
  } catch (const std::exception& e) {
    fmt::print(stderr, "train_bench: {}\n", e.what());
    dist::MpiRuntime::abort(1);
  }
}
