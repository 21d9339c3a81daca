// LoRA against full fine-tuning on one model and one batch: the same weights streamed from a
// Hugging Face folder into FULL_SHARD units, the same micro-batch, and either every parameter
// trained (--mode full), the base frozen in the compute dtype with adapters on the given modules
// (--mode lora), or the same with the blocks' projections in NF4 (--mode qlora, blocks of 64,
// double-quantised scales). Rank 0 prints one JSON object with, per rank: trainable parameters,
// gradient and optimizer-state bytes, persistent shard bytes, the frozen base's bytes (and those
// of the blocks' projections), peak memory (the device's allocator on a GPU, the process's
// resident set on the CPU), the median step time, and the bytes handed to collectives per step:
// gradients reduced, parameters gathered (and the blocks' frozen flats' share of them).
// bench/lora.sh compares lora with full, bench/qlora.sh qlora with lora.
//   mpirun -np W lora_bench MODEL_DIR --mode full|lora|qlora [--device cuda|cpu] [--seq 512]
//       [--micro-batch 1] [--r 16] [--targets all-linear] [--steps 3] [--warmup 1] [--checkpointing] [--bf16]
#include <ATen/ops/empty.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>

#include "checkpoint/hf/hf_tensor_source.h"
#include "common/process_memory.h"
#include "runtime/dist/device.h"
#include "runtime/dist/gpu_sharing.h"
#include "runtime/dist/mpi_runtime.h"
#include "runtime/dist/topology.h"
#include "runtime/fsdp/adamw.h"
#include "runtime/fsdp/fsdp_llama.h"
#include "runtime/fsdp/shard_loader.h"
#include "runtime/model/lora.h"
#include "runtime/train/train_step.h"

using namespace shardtune;

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string model_dir;
  std::string mode = "lora";
  std::string device = "cuda";
  int64_t seq = 512;
  int64_t micro_batch = 1;
  int64_t r = 16;
  std::vector<std::string> targets = {"all-linear"};
  int steps = 3;
  int warmup = 1;
  bool checkpointing = false;
  bool bf16 = false;  // mixed precision on the CPU too (on a GPU always)
};

// A flat parameter of a block's frozen weights ("model.layers.N...."): what QLoRA stores in NF4.
bool block_frozen(fsdp::FlatParam* f) {
  return !f->trainable() && f->layout().params().front().name.rfind("model.layers.", 0) == 0;
}

int run(const Args& a) {
  int rank = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const dist::Topology topo = dist::discover_topology(MPI_COMM_WORLD);
  const dist::DeviceChoice choice =
      dist::choose_device(a.device == "cpu" ? dist::DeviceRequest::kCpu : dist::DeviceRequest::kCuda, topo.local_rank,
                          topo.local_size, dist::visible_gpus(), dist::cuda_build());
  const at::Device device =
      choice.device >= 0 ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(choice.device)) : at::Device(at::kCPU);
  if (choice.device >= 0) dist::bind_device(choice.device);
  const bool lora = a.mode == "lora" || a.mode == "qlora";

  // bf16 mixed precision on a GPU; fp32 on the CPU, whose bf16 matrix products are slow.
  job::Job job;
  job.slurm.ntasks_per_node = world;
  job.train.mixed_precision = device.is_cuda() || a.bf16;
  job.fsdp.activation_checkpointing = a.checkpointing;
  fsdp::FsdpOptions options = fsdp::fsdp_options(job.fsdp, job.train, world, world, device, /*lora=*/lora);
  if (a.mode == "qlora") options.nf4_base = quant::Nf4Format{64, true};
  dist::ProcessGroups groups = dist::make_process_groups(
      MPI_COMM_WORLD, options.shard_size,
      {600.0, choice.device, dist::choose_device_collectives(MPI_COMM_WORLD, choice.device)});
  const model::LlamaConfig config = model::LlamaConfig::from_file(a.model_dir + "/config.json");
  model::LlamaForCausalLM skeleton(config, at::TensorOptions().device(at::kMeta));
  if (lora) model::add_lora(skeleton, {a.r, 2.0 * static_cast<double>(a.r), 0.0, a.targets}, 42);
  std::set<std::string> frozen;
  int64_t trainable = 0;
  for (const model::NamedParam& p : skeleton.named_parameters()) {
    if (lora && !model::is_adapter_parameter(p.name)) {
      frozen.insert(p.name);
    } else {
      trainable += p.tensor->numel();
    }
  }
  const checkpoint::HfFolderSourceFactory source{a.model_dir};
  fsdp::validate_source(skeleton, source, *groups.world);
  fsdp::FsdpLlama model(skeleton, groups, options, frozen);
  fsdp::load_shards(model, source);
  fsdp::AdamW optimizer({});
  train::add_trainable_shards(model, optimizer);

  std::mt19937_64 rng(static_cast<uint64_t>(rank) + 1);
  std::uniform_int_distribution<int64_t> token(0, config.vocab_size - 1);
  std::vector<double> seconds;
  int64_t grad_bytes = 0, gathered_bytes = 0, block_gathered_bytes = 0;
  for (int s = 0; s < a.warmup + a.steps; ++s) {
    at::Tensor ids = at::empty({a.micro_batch, a.seq}, at::kLong);
    for (int64_t i = 0; i < ids.numel(); ++i) ids.data_ptr<int64_t>()[i] = token(rng);
    if (s == a.warmup) {
      dist::reset_peak_memory(device);
      common::reset_peak_resident();
    }
    const int64_t reduced_before = model.wire_bytes().reduced, gathered_before = model.wire_bytes().gathered;
    int64_t block_before = 0;
    for (fsdp::FlatParam* f : model.flat_params())
      if (block_frozen(f)) block_before += f->wire_bytes().gathered;
    groups.world->barrier();
    const auto start = Clock::now();
    train::train_step(model, optimizer, {{ids, ids, {}, 1.0, {}}}, {1e-5}, *groups.world);  // ends reading the loss
    if (s >= a.warmup) seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    grad_bytes = model.wire_bytes().reduced - reduced_before;
    gathered_bytes = model.wire_bytes().gathered - gathered_before;
    block_gathered_bytes = -block_before;
    for (fsdp::FlatParam* f : model.flat_params())
      if (block_frozen(f)) block_gathered_bytes += f->wire_bytes().gathered;
  }
  int64_t grad_state = 0, shard_bytes = 0, base_bytes = 0, block_base_bytes = 0;
  for (fsdp::FlatParam* f : model.flat_params()) {
    shard_bytes += f->shard().nbytes();
    if (f->trainable()) grad_state += f->grad_shard().nbytes();
    if (!f->trainable()) base_bytes += f->shard().nbytes();
    if (block_frozen(f)) block_base_bytes += f->shard().nbytes();
  }
  const dist::DeviceMemoryStats memory = dist::memory_stats(device);
  const int64_t peak = device.is_cuda() ? memory.peak_allocated : common::peak_resident_bytes();
  std::sort(seconds.begin(), seconds.end());
  // The largest peak over the ranks: the one that would run out first.
  int64_t peak_max = 0;
  MPI_Allreduce(&peak, &peak_max, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) {
    const nlohmann::json out = {{"mode", a.mode},
                                {"device", device.str()},
                                {"world_size", world},
                                {"parameters", config.num_parameters()},
                                {"trainable_parameters", trainable},
                                {"seq", a.seq},
                                {"micro_batch", a.micro_batch},
                                {"lora_r", lora ? a.r : 0},
                                {"step_seconds_median", seconds[seconds.size() / 2]},
                                {"gradient_bytes_per_step_per_rank", grad_bytes},
                                {"gradient_state_bytes_per_rank", grad_state},
                                {"optimizer_state_bytes_per_rank", optimizer.state_bytes()},
                                {"shard_bytes_per_rank", shard_bytes},
                                {"base_bytes_per_rank", base_bytes},
                                {"block_base_bytes_per_rank", block_base_bytes},
                                {"gathered_bytes_per_step_per_rank", gathered_bytes},
                                {"block_gathered_bytes_per_step_per_rank", block_gathered_bytes},
                                {"compute_dtype", c10::toString(options.precision.compute)},
                                {"peak_memory_bytes_per_rank", peak_max},
                                {"peak_memory_kind", device.is_cuda() ? "device allocator" : "resident set"}};
    fmt::print("{}\n", out.dump());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"LoRA against full fine-tuning: memory, step time, gradient traffic"};
  Args a;
  app.add_option("model_dir", a.model_dir, "Hugging Face model folder (shardtune-make-model)")->required();
  app.add_option("--mode", a.mode, "full, lora or qlora")->required()->check(CLI::IsMember({"full", "lora", "qlora"}));
  app.add_option("--device", a.device, "cuda or cpu")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--seq", a.seq, "Tokens per row")->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  app.add_option("--micro-batch", a.micro_batch, "Rows per rank")->check(CLI::Range(int64_t{1}, int64_t{4096}));
  app.add_option("--r", a.r, "LoRA rank")->check(CLI::Range(int64_t{1}, int64_t{4096}));
  app.add_option("--targets", a.targets, "LoRA target modules");
  app.add_option("--steps", a.steps, "Timed steps")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", a.warmup, "Untimed steps first")->check(CLI::Range(0, 100000));
  app.add_flag("--checkpointing", a.checkpointing, "Activation checkpointing");
  app.add_flag("--bf16", a.bf16, "bf16 mixed precision on the CPU too");
  CLI11_PARSE(app, argc, argv);
  dist::MpiRuntime mpi(&argc, &argv);
  try {
    return run(a);
  } catch (const std::exception& e) {
    fmt::print(stderr, "lora_bench: {}\n", e.what());
    dist::MpiRuntime::abort(1);
  }
}
