// FSDP training throughput against plain single-process training of the same model, measured in
// the same run, and the share of step time spent in FSDP's communication.
// Run: bench/fsdp.sh (world sizes 1, 2 and 4), or mpirun -np W build/bin/fsdp_bench [steps].
// Rank 0 first trains the plain model alone (the others wait), then all ranks train with FSDP on
// W times the tokens per step. Printed: tokens/s of each, the ratio FSDP ÷ plain (ideal: the
// number of cores the ranks really get), and communication ÷ step time.
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros_like.h>
#include <fmt/format.h>
#include <mpi.h>

#include <chrono>
#include <string>

#include "runtime/dist/mpi_runtime.h"
#include "runtime/fsdp/adamw.h"
#include "runtime/fsdp/fsdp_llama.h"
#include "runtime/model/init.h"
#include "runtime/model/loss.h"
#include "runtime/train/train_step.h"

using namespace shardtune;

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kBatch = 4, kTokens = 128, kWarmup = 2;

model::LlamaConfig bench_config() {
  model::LlamaConfig c = model::LlamaConfig::tiny();
  c.hidden_size = 256;
  c.intermediate_size = 704;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = 32;
  c.vocab_size = 4096;
  return c;
}

at::Tensor batch_tokens(int64_t seed, int64_t vocab) {
  at::Tensor ids = at::empty({kBatch, kTokens}, at::kLong);
  int64_t* p = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < kBatch * kTokens; ++i) p[i] = (seed * 7919 + i * 104729) % vocab;
  return ids;
}

// Plain training: the model's own parameters, autograd, AdamW on whole tensors.
double plain_tokens_per_second(int steps) {
  model::LlamaForCausalLM m(bench_config(), at::TensorOptions().dtype(at::kFloat));
  model::init_weights(m, 1);
  fsdp::AdamW opt({});
  std::vector<std::pair<at::Tensor*, at::Tensor>> params;
  for (model::NamedParam& p : m.named_parameters()) {
    p.tensor->requires_grad_(true);
    params.emplace_back(p.tensor, at::zeros_like(*p.tensor));
    opt.add(*p.tensor, params.back().second);
  }
  Clock::time_point start;
  for (int s = 0; s < steps + kWarmup; ++s) {
    if (s == kWarmup) start = Clock::now();
    const at::Tensor ids = batch_tokens(s, m.config().vocab_size);
    model::causal_lm_loss(m.forward(ids), ids).backward();
    for (auto& [p, g] : params) {
      g.copy_(p->grad());
      p->mutable_grad().reset();
    }
    opt.step(1e-4);
  }
  return static_cast<double>(steps * kBatch * kTokens) /
         std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  dist::MpiRuntime mpi(&argc, &argv);
  const int steps = argc > 1 ? std::stoi(argv[1]) : 10;
  int rank = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  double plain = 0;
  if (rank == 0) plain = plain_tokens_per_second(steps);
  MPI_Barrier(MPI_COMM_WORLD);

  job::Job job;
  job.slurm.ntasks_per_node = world;
  job.train.mixed_precision = false;
  job.fsdp.activation_checkpointing = false;  // the plain baseline keeps its activations too
  const fsdp::FsdpOptions options =
      fsdp::fsdp_options(job.fsdp, job.train, world, static_cast<int>(job.slurm.ranks_per_node()));
  dist::ProcessGroups groups = dist::make_mpi_groups(MPI_COMM_WORLD, options.shard_size, 600.0);
  model::LlamaForCausalLM m(bench_config(), at::TensorOptions().dtype(at::kFloat));
  model::init_weights(m, 1);
  fsdp::FsdpLlama sharded(m, groups, options);
  fsdp::AdamW opt({});
  train::add_trainable_shards(sharded, opt);
  Clock::time_point start;
  fsdp::CommStats comm_at_start;
  for (int s = 0; s < steps + kWarmup; ++s) {
    if (s == kWarmup) {
      groups.world->barrier();
      start = Clock::now();
      comm_at_start = sharded.comm_stats();
    }
    const at::Tensor ids = batch_tokens(s * world + rank, m.config().vocab_size);
    train::train_step(sharded, opt, {{ids, ids, {}, 1.0, {}}}, {1e-4}, *groups.world);
  }
  groups.world->barrier();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double fsdp_tps = static_cast<double>(steps * kBatch * kTokens * world) / seconds;
  const double comm_share = (sharded.comm_stats().seconds - comm_at_start.seconds) / seconds;
  if (rank == 0) {
    fmt::print("world {} | model {:.1f}M params, {} tokens/rank/step, FULL_SHARD fp32, {} steps\n", world,
               static_cast<double>(bench_config().num_parameters()) / 1e6, kBatch * kTokens, steps);
    fmt::print("  plain single process: {:9.0f} tok/s\n", plain);
    fmt::print("  FSDP, {} ranks:        {:9.0f} tok/s   ratio FSDP/plain {:.2f} ({:.2f} per rank)\n", world,
               fsdp_tps, fsdp_tps / plain, fsdp_tps / plain / world);
    fmt::print("  communication share of step time (rank 0): {:.1f}%\n", 100.0 * comm_share);
  }
  return 0;
}
