// The memory model of a training rank.
#include "launcher/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/lora_targets.h"
#include "runtime/data/job_data.h"
#include "runtime/model/loss_chunk.h"
#include "runtime/model/job_model_config.h"
#include "runtime/quant/nf4.h"
#include "runtime/quant/state_8bit.h"

namespace shardtune::launcher {
namespace {

// The runtime's own resident memory on a CPU rank: LibTorch, Open MPI, HDF5, tcmalloc and the C++
// runtime, mapped and touched. A 0.16M-parameter model's run, whose tensors take 3 MiB, peaks at
// 131-134 MiB a rank on a 2-core AMD EPYC (bench/plan.sh, 2026-11-28), with the build's trimmed
// libtorch_cpu.so (cmake/ShardtuneDeps.cmake; about 30 MiB more with LibTorch's own).
constexpr double kCpuRuntimeBytes = 130.0 * (1 << 20);
// NCCL's buffers per communicator on a GPU: 544 MB (2 ranks) to 688 MB (more) measured on four
// NVLink A100s (NVIDIA/nccl#964); H100s open more channels. Not measured here.
constexpr double kNcclBytesPerCommunicator = 0.75 * (1 << 30);

const char* dtype_name(double bytes) { return bytes == 2 ? "bf16" : "fp32"; }

struct Shapes {
  double d, kv, q, f, v, layers, heads;
  double embed, block, head;  // parameters per FSDP unit (head: its norm and, untied, lm_head)
  double adapters_per_block = 0, adapters_head = 0;
  // The block's adapters: their input widths and ranks, summed (what their activations scale by).
  double adapter_inputs_per_block = 0, adapter_ranks_per_block = 0;
  // Which of the block's inputs to its projections have an adapter: the first norm's output (q,
  // k, v), the second's (gate, up), SwiGLU's (down).
  bool adapted_attention_input = false, adapted_mlp_input = false, adapted_down_input = false;
  double projections = 0;     // weights of a block's seven projections
  // 8-bit AdamW: elements of trainable tensors that keep fp32 moments (runtime/fsdp/adam8bit.h,
  // quantized_state: fewer than 4096 elements), per block and in the head unit; the embedding too.
  double small_per_block = 0, small_head = 0, small_adapters_per_block = 0, small_adapters_head = 0;
  double nf4_block = 0;       // QLoRA: their NF4 records' bytes, each tensor in whole records
  // Adafactor: statistics per tensor (a matrix's rows plus columns, a vector's elements), per block,
  // in the embedding and in the head unit, and of the adapters.
  double stats_per_block = 0, stats_embed = 0, stats_head = 0, stats_adapters_per_block = 0, stats_adapters_head = 0;
};

Shapes shapes_of(const model::LlamaConfig& c, const job::PeftSection& peft) {
  Shapes s{};
  s.d = static_cast<double>(c.hidden_size);
  s.q = static_cast<double>(c.num_attention_heads * c.head_dim);
  s.kv = static_cast<double>(c.num_key_value_heads * c.head_dim);
  s.f = static_cast<double>(c.intermediate_size);
  s.v = static_cast<double>(c.vocab_size);
  s.layers = static_cast<double>(c.num_hidden_layers);
  s.heads = static_cast<double>(c.num_attention_heads);
  s.embed = s.v * s.d;
  s.block = (2 * s.d * s.q + 2 * s.d * s.kv) + 3 * s.d * s.f + 2 * s.d;
  if (c.attention_bias) s.block += s.q + 2 * s.kv + s.d;
  if (c.mlp_bias) s.block += 2 * s.f + s.d;
  s.head = s.d + (c.tie_word_embeddings ? 0 : s.embed);
  s.projections = 2 * s.d * s.q + 2 * s.d * s.kv + 3 * s.d * s.f;
  const auto small = [](double n) { return n < static_cast<double>(quant::kMin8bitSize) ? n : 0.0; };
  for (double n : {s.d * s.q, s.d * s.kv, s.d * s.kv, s.q * s.d, s.d * s.f, s.d * s.f, s.f * s.d, s.d, s.d})
    s.small_per_block += small(n);
  if (c.attention_bias) s.small_per_block += small(s.q) + 2 * small(s.kv) + small(s.d);
  if (c.mlp_bias) s.small_per_block += 2 * small(s.f) + small(s.d);
  s.small_head = small(s.d) + (c.tie_word_embeddings ? 0 : small(s.embed));
  s.stats_per_block = 2 * (s.q + s.d) + 2 * (s.kv + s.d) + 3 * (s.f + s.d) + 2 * s.d;
  if (c.attention_bias) s.stats_per_block += s.q + 2 * s.kv + s.d;
  if (c.mlp_bias) s.stats_per_block += 2 * s.f + s.d;
  s.stats_embed = s.v + s.d;
  s.stats_head = s.d + (c.tie_word_embeddings ? 0 : s.v + s.d);
  if (peft.method == job::PeftMethod::kQlora) {
    const quant::Nf4Format nf4{peft.nf4_block_size, peft.nf4_double_quant};
    for (double n : {s.d * s.q, s.d * s.kv, s.d * s.kv, s.d * s.q, s.d * s.f, s.d * s.f, s.d * s.f})
      s.nf4_block += static_cast<double>(nf4.records(static_cast<int64_t>(n)) * nf4.record_bytes());
  }
  if (peft.adapters()) {
    const double r = static_cast<double>(peft.lora_r);
    auto targeted = [&](std::string_view m) {
      return std::find(peft.target_modules.begin(), peft.target_modules.end(), m) != peft.target_modules.end() ||
             (m != common::kLoraHeadModule &&
              std::find(peft.target_modules.begin(), peft.target_modules.end(), common::kLoraAllLinear) !=
                  peft.target_modules.end());
    };
    const std::pair<std::string_view, std::pair<double, double>> modules[] = {
        {"q_proj", {s.d, s.q}},    {"k_proj", {s.d, s.kv}}, {"v_proj", {s.d, s.kv}},   {"o_proj", {s.q, s.d}},
        {"gate_proj", {s.d, s.f}}, {"up_proj", {s.d, s.f}}, {"down_proj", {s.f, s.d}},
    };
    for (const auto& [name, in_out] : modules)
      if (targeted(name)) {
        s.adapters_per_block += r * (in_out.first + in_out.second);
        s.adapter_inputs_per_block += in_out.first;
        s.adapter_ranks_per_block += r;
        if (name == "q_proj" || name == "k_proj" || name == "v_proj") s.adapted_attention_input = true;
        if (name == "gate_proj" || name == "up_proj") s.adapted_mlp_input = true;
        if (name == "down_proj") s.adapted_down_input = true;
        s.stats_adapters_per_block += in_out.first + in_out.second + 2 * r;
        s.small_adapters_per_block += small(r * in_out.first) + small(r * in_out.second);
      }
    if (targeted(common::kLoraHeadModule)) {
      s.adapters_head = r * (s.d + s.v);
      s.stats_adapters_head = s.d + s.v + 2 * r;
      s.small_adapters_head = small(r * s.d) + small(r * s.v);
    }
  }
  return s;
}

}  // namespace

model::LlamaConfig job_model_config(const job::Job& job) {
  return model::job_model_config(job, data::tokenizer_path(job));
}

MemoryPlan plan_memory(const job::Job& job, const model::LlamaConfig& config) {
  const job::TrainSection& t = job.train;
  const bool lora = job.peft.adapters();
  const Shapes s = shapes_of(config, job.peft);
  MemoryPlan plan;
  plan.cuda = job.launch.device == job::Device::kCuda ||
              (job.launch.device == job::Device::kAuto && job.slurm.gpus_per_node > 0);
  plan.world = job.slurm.world_size();
  plan.ranks_per_node = job.slurm.ranks_per_node();
  plan.shard_size = job::shard_group_size(job);
  const double shards = static_cast<double>(plan.shard_size);

  // Bytes per element of the job's dtypes (job::precision, as the ranks train in).
  const job::Precision precision = job::precision(t, job.fsdp, lora);
  const double master = static_cast<double>(common::element_size(precision.master));
  const double compute = static_cast<double>(common::element_size(precision.compute));
  const double reduce = static_cast<double>(common::element_size(precision.reduce));
  const double frozen = static_cast<double>(common::element_size(precision.frozen));

  const double base = s.embed + s.layers * s.block + s.head;
  const double adapters = s.layers * s.adapters_per_block + s.adapters_head;
  plan.parameters = base + adapters;
  double frozen_base = lora ? base : 0;
  if (!lora && t.freeze_layers) frozen_base = std::min(static_cast<double>(t.num_freeze_layers), s.layers) * s.block;
  plan.trainable = plan.parameters - frozen_base;
  const double block_trainable = lora ? s.adapters_per_block : s.block;
  // A tied head's gradient goes into the embedding's unsharded buffer, which then waits for the
  // embedding's own backward at the very end: the whole vocabulary x hidden, all backward long.
  const double head_trainable = lora ? s.adapters_head : s.head + (config.tie_word_embeddings ? s.embed : 0);

  auto add = [&](std::string name, std::string detail, double bytes) {
    plan.parts.push_back({std::move(name), std::move(detail), bytes});
    plan.total_bytes += bytes;
  };
  const std::string over = plan.shard_size > 1 ? fmt::format("sharded over {} ranks", plan.shard_size) : "unsharded";
  // QLoRA: the blocks' projections in NF4 records, the rest of the frozen base in the frozen dtype.
  const bool qlora = job.peft.method == job::PeftMethod::kQlora;
  const double nf4_bytes = s.layers * s.nf4_block;
  const double plain_base = qlora ? base - s.layers * s.projections : base;
  if (qlora) {
    add("parameters",
        fmt::format("{}: the blocks' projections in NF4 records ({:.3f} bytes per weight), the rest of the frozen "
                    "base in {}, adapters in {}",
                    over, s.nf4_block / s.projections, dtype_name(frozen), dtype_name(master)),
        plain_base / shards * frozen + nf4_bytes / shards + adapters / shards * master);
  } else if (lora) {
    add("parameters", fmt::format("{}: frozen base in {}, adapters in {}", over, dtype_name(frozen), dtype_name(master)),
        base / shards * frozen + adapters / shards * master);
  } else {
    add("parameters", fmt::format("{}, {}", over, dtype_name(master)), plan.parameters / shards * master);
  }
  add("gradients", fmt::format("{} of the trainable parameters, {}", over, dtype_name(master)),
      plan.trainable / shards * master);
  // 8-bit AdamW: a byte per moment element and an fp32 scale per block of each moment; fp32
  // moments for the embedding and tensors of fewer than 4096 elements.
  const bool eight_bit = job.train.optimizer == job::Optimizer::kAdamW8bit;
  constexpr auto kBlock = static_cast<double>(quant::kAdam8bitBlock);
  const double trainable_blocks = s.layers - (frozen_base > 0 && !lora ? frozen_base / s.block : 0);
  const double fp32_state = lora ? s.layers * s.small_adapters_per_block + s.small_adapters_head
                                 : s.embed + trainable_blocks * s.small_per_block + s.small_head;
  // Adafactor: every rank of a shard group keeps the statistics of all its trainable tensors whole,
  // and each step sums them (and each tensor's norms) in a vector as long; it computes a piece of
  // a tensor at a time, in blocks of at most 4 Mi elements, two fp32 temporaries of a block alive.
  const bool adafactor = job.train.optimizer == job::Optimizer::kAdafactor;
  const bool first_moment = adafactor && job.train.adafactor_beta1 > 0;
  const double stats = lora ? s.layers * s.stats_adapters_per_block + s.stats_adapters_head
                            : s.stats_embed + trainable_blocks * s.stats_per_block + s.stats_head;
  if (adafactor) {
    const double largest = lora ? std::max(s.adapters_per_block, s.adapters_head)
                                : std::max({s.embed, s.d * s.f, s.d * s.q});
    const double block = std::min(4.0 * (1 << 20), largest / shards);
    add("optimizer states",
        fmt::format("Adafactor's row and column means of each matrix and second moment of each vector, fp32, whole on "
                    "every rank, the step's sums of them and two blocks of its temporaries{}",
                    first_moment ? "; an fp32 first moment, sharded" : ""),
        2 * stats * 4 + 2 * block * 4 + (first_moment ? plan.trainable / shards * 4 : 0));
  } else if (eight_bit)
    add("optimizer states",
        "8-bit AdamW's two moments: a code per element and an fp32 scale per 256 elements; fp32 for the embedding "
        "and tensors of fewer than 4096 elements",
        (plan.trainable - fp32_state) / shards * (2 + 2 * 4 / kBlock) + fp32_state / shards * 8);
  else
    add("optimizer states", fmt::format("AdamW's two moments, {}", dtype_name(master)),
        2 * plan.trainable / shards * master);

  // cpu_offload on a GPU: the trainable shards, their gradients and the optimizer's state (with
  // offload_params the frozen shards too) are host memory, pinned: off the GPU's parts.
  if (job.fsdp.cpu_offload && plan.cuda) {
    const double trainable_shards = (lora ? adapters : plan.trainable) / shards * master;
    for (MemoryPart& part : plan.parts) {
      if (part.name != "parameters" && part.name != "gradients" && part.name != "optimizer states") continue;
      double moved = part.bytes;
      if (part.name == "parameters" && !job.fsdp.offload_params) moved = std::min(part.bytes, trainable_shards);
      part.bytes -= moved;
      plan.total_bytes -= moved;
      plan.offload_bytes += moved;
      part.detail += moved == 0 ? "" : part.bytes == 0 ? "; in host memory (cpu_offload)"
                                                        : "; the trainable shards in host memory (cpu_offload)";
    }
  }

  // Gathered units in the compute dtype. One shard of the master dtype is its own full buffer.
  const bool strategy_reshards = job.fsdp.sharding_strategy == job::ShardingStrategy::kFullShard ||
                                 job.fsdp.sharding_strategy == job::ShardingStrategy::kHybridShard;
  const bool tied = config.tie_word_embeddings;
  const bool base_aliased = !qlora && plan.shard_size == 1 && compute == frozen && !job.fsdp.offload_params;
  if (!base_aliased) {
    double gathered = 0;
    std::string detail;
    if (strategy_reshards) {
      // The head stays gathered from the end of forward into backward, and the last block is
      // prefetched for backward meanwhile; in forward, a unit and the next one.
      const double head_units = s.head + (tied ? s.embed : 0);
      gathered = std::max({s.embed + s.block, 2 * s.block, s.block + head_units}) * compute;
      detail = fmt::format("two units at a time (the unit computing and the one prefetched), {}", dtype_name(compute));
    } else {
      gathered = base * compute;
      detail = fmt::format("every unit stays gathered between forward and backward, {}", dtype_name(compute));
    }
    add("gathered parameters", detail, gathered);
  }
  // cpu_offload on a GPU, the master dtype wider than the compute dtype: a trainable shard's copy up
  // converts on the device, from a copy of the shard in the master dtype that ATen stages there
  // (FlatParam::start_gather), kept by the copy stream's pool for the next; the largest unit's.
  if (job.fsdp.cpu_offload && plan.cuda && master != compute) {
    const double largest = std::max({lora ? 0.0 : s.embed, block_trainable, head_trainable});
    add("offload staging",
        fmt::format("the largest unit's trainable shard in {}, staged on the device to convert it to {} (cpu_offload)",
                    dtype_name(master), dtype_name(compute)),
        largest / shards * master);
  }
  if (qlora) {
    // A unit's records, gathered packed, live until they are dequantised, 4 Mi weights at a time
    // through a kept workspace (each code byte as an int64 index, each weight's fp32 value).
    constexpr double kChunk = 4 << 20;
    add("NF4 dequantisation", "one unit's gathered records and the workspace of dequantising them",
        (plan.shard_size > 1 ? s.nf4_block : 0) + std::min(kChunk, s.projections) * 8);
  }
  // Unsharded gradients of the units whose reduction is in flight (the head's and the last
  // block's at the start of backward), in the reduce dtype, and the compute-dtype gradients
  // autograd hands over for one unit. A rank alone reduces nothing: its gradients go straight into
  // their shards (FlatParam::accumulate_grad), unless offloaded or reduced in another dtype.
  const bool alone = plan.world == 1 && !job.fsdp.cpu_offload && reduce == master;
  if (alone) {
    add("gradient buffers", fmt::format("one unit's gradients as autograd hands them over, {}", dtype_name(compute)),
        std::max(head_trainable, block_trainable) * compute);
  } else {
    add("gradient buffers",
        fmt::format("two units' unsharded gradients in flight, {}{}", dtype_name(reduce),
                    config.tie_word_embeddings && !lora ? " (the tied head's is the embedding's)" : ""),
        (head_trainable + block_trainable) * reduce + std::max(head_trainable, block_trainable) * compute);
  }

  // DPO's reference = "model": a frozen copy of the starting weights, sharded as the policy is and
  // held in the compute dtype (QLoRA's block projections in NF4). Its forward runs before the
  // policy's and keeps nothing, so only its shards are there at the peak. The base with adapters
  // off and precomputed log-probabilities add nothing there.
  const bool dpo = t.objective == job::Objective::kDpo;
  if (dpo && job::dpo_reference(job) == job::DpoReference::kModel) {
    const bool offloaded = job.fsdp.cpu_offload && job.fsdp.offload_params && plan.cuda;
    const double copy = qlora ? plain_base / shards * compute + nf4_bytes / shards : base / shards * compute;
    if (offloaded) {
      plan.offload_bytes += copy;
    } else {
      add("DPO reference",
          fmt::format("a frozen copy of the starting weights, {}{}", over,
                      qlora ? ": the blocks' projections in NF4, the rest in " + std::string(dtype_name(compute))
                            : ", " + std::string(dtype_name(compute))),
          copy);
    }
  }
  // Activations of one micro-batch (B rows of T tokens; packing fills rows to context_length). DPO
  // runs a pair's two answers as two rows: 2 B rows, each at most context_length.
  const double tokens = static_cast<double>((dpo ? 2 : 1) * t.batch_size_training * t.context_length);
  const double context = static_cast<double>(t.context_length);
  plan.tokens_per_micro_batch = static_cast<int64_t>(tokens);
  // Per token, what a block keeps for backward. Through ATen's operations (the CPU): its input and
  // normed inputs (norms in fp32), q, k, v and their rotated copies, k and v repeated to the query
  // heads, the attention output, and the MLP's gate, up, activation and product; attention
  // without fused kernels (LibTorch 1.x) also keeps its fp32 softmax and the probabilities it
  // multiplies, H x T each. On a GPU the block runs the fused operations (runtime/model/
  // fused_ops.cpp) and LibTorch 2's flash attention, which keep less: RMSNorm its input and an
  // fp32 inverse per row, RoPE nothing of its input, SwiGLU gate and up (one product's two
  // halves), attention q, k and v as given (k and v not repeated: enable_gqa) with its output and
  // an fp32 log-sum-exp per head. So: the block's input and the residual after attention, the two
  // normed inputs, rotated q and k, v, the attention output (o_proj's input too), gate and up,
  // and their SwiGLU (down_proj's input); with packed rows also each document's attention output
  // before the rows' concatenation. Each LoRA adapter keeps A x (its rank), and with dropout also
  // its input's mask and the dropped input (runtime/model/lora.cpp: seeded_dropout), each in the
  // compute dtype. A frozen projection keeps nothing of its input: under LoRA the two normed inputs
  // and SwiGLU's output are kept only by adapters without dropout on their projections.
  // plan_activations_test measures the GPU's count on the CPU through the same operations.
  const double norms = 2 * 2 * s.d * 4;
  const bool packed = t.batching_strategy == job::BatchingStrategy::kPacking;
  const bool dropout = job.peft.lora_dropout > 0;
  const double adapters_per_token =
      compute * (s.adapter_ranks_per_block + (dropout ? 2 * s.adapter_inputs_per_block : 0));
  const auto kept = [&](bool adapted) { return !lora || (adapted && !dropout) ? 1.0 : 0.0; };
  const double projection_inputs =
      compute * (s.d * kept(s.adapted_attention_input) + s.d * kept(s.adapted_mlp_input) +
                 s.f * kept(s.adapted_down_input));
  const double block_per_token =
      adapters_per_token + projection_inputs +
      (plan.cuda ? compute * (2 * s.d + 2 * s.q + 2 * s.kv + 2 * s.f + (packed ? s.q : 0)) + 2 * 4 + s.heads * 4
                 : compute * (6 * s.d + 3 * s.kv + 3 * s.f) + norms + s.heads * context * (4 + compute));
  const std::string per_block = fmt::format("{:.0f} bytes per token per block", block_per_token);
  // Blocks exempt from checkpointing are the last: their backward runs first and frees what they
  // kept before the first block is recomputed, so the peak is theirs or one recomputed block's.
  const double uncheckpointed = std::min(static_cast<double>(job.fsdp.uncheckpointed_blocks), s.layers);
  if (job.fsdp.activation_checkpointing && uncheckpointed > 0) {
    add("activations",
        fmt::format("checkpointed: the first {:.0f} blocks' inputs; the last {:.0f} blocks' saved tensors ({})",
                    s.layers - uncheckpointed, uncheckpointed, per_block),
        tokens * ((s.layers - uncheckpointed) * s.d * compute + uncheckpointed * block_per_token));
  } else if (job.fsdp.activation_checkpointing) {
    add("activations", fmt::format("checkpointed: each block's input, and one block recomputed ({})", per_block),
        tokens * (s.layers * s.d * compute + block_per_token));
  } else {
    add("activations", fmt::format("every block's saved tensors ({})", per_block), tokens * s.layers * block_per_token);
  }
  // On a GPU the head's loss is fused (runtime/model/fused_ops.h: linear_cross_entropy) unless the
  // head has LoRA: a chunk of rows' logits at a time in the compute dtype, their gradient written
  // over them, and the gradients it yields: the hidden rows', and a trainable head's weight's (DPO's
  // per-token losses with a trainable head make them in the backward, from the chunks' logits
  // computed again). Otherwise the logits, their fp32 log-softmax for the loss, and its gradient.
  const bool head_weight_trainable = !lora;
  if (plan.cuda && s.adapters_head == 0) {
    const double chunk = std::clamp(std::floor(static_cast<double>(model::kLossChunkLogits) / s.v), 1.0, tokens);
    add("logits and loss",
        fmt::format("{:.0f} of {:.0f} rows x {:.0f} vocabulary at a time (fused), the hidden rows' gradient{}", chunk,
                    tokens, s.v, head_weight_trainable ? " and the head weight's" : ""),
        (chunk * s.v + tokens * s.d + (head_weight_trainable ? s.v * s.d : 0)) * compute);
  } else {
    add("logits and loss", fmt::format("{:.0f} x {:.0f} vocabulary: logits, fp32 log-softmax and its gradient", tokens, s.v),
        tokens * s.v * (compute + 4 + 4 + (compute == 2 ? 4 : 0)));
  }
  if (!plan.cuda) add("runtime", "LibTorch, Open MPI and HDF5 themselves", kCpuRuntimeBytes);
  if (plan.cuda) {
    // NCCL's own buffers, outside the caching allocator: every group of more than one rank is a
    // communicator (world, shard, replicate; a group of every rank is the world's), whose buffers
    // grow with its channels and peers, not with the world size beyond two nodes.
    const int replicas = plan.world / plan.shard_size;
    const int communicators = (plan.world > 1) + (plan.shard_size > 1 && plan.shard_size < plan.world) +
                              (replicas > 1 && replicas < plan.world);
    if (communicators > 0)
      add("NCCL buffers",
          fmt::format("{} communicator(s) of more than one rank, {:.2f} GiB each (0.53-0.67 GiB reported on A100s, "
                      "NVIDIA/nccl#964; more channels on H100s; NCCL_BUFFSIZE scales it)",
                      communicators, kNcclBytesPerCommunicator / (1 << 30)),
          communicators * kNcclBytesPerCommunicator);
    // A full checkpoint gathers each unit whole to rank 0's device before writing it; the caching
    // allocator keeps the largest such block from the first save on.
    if (job.fsdp.checkpoint_type == job::CheckpointType::kFull) {
      const double largest = lora ? std::max(s.adapters_per_block, s.adapters_head) : std::max({s.embed, s.block, s.head});
      add("full-checkpoint gather", fmt::format("rank 0: the largest unit gathered whole to be written, {}", dtype_name(master)),
          largest * master);
    }
  }
  // What a checkpoint holds of the rank: its shards (a LoRA model's adapters alone) and, saved with
  // the optimizer, AdamW's moments of what trains, in the shards' dtype (8-bit AdamW's decoded in
  // fp32, with their scales); Adafactor's first moment and its share of the statistics.
  const double moment_bytes = eight_bit ? 2 * 4 + 2 * 4 / kBlock : adafactor ? (first_moment ? 4 : 0) : 2 * master;
  const double saved_stats = adafactor ? stats / shards * 4 : 0;
  plan.checkpoint_state_bytes = (lora ? adapters : plan.parameters) / shards * master +
                                (job.fsdp.save_optimizer ? plan.trainable / shards * moment_bytes + saved_stats : 0);
  if (job.checkpoint.async && plan.cuda) plan.checkpoint_copy_bytes = plan.checkpoint_state_bytes;

  // Loading: a streamed load holds a unit at a time; otherwise every rank builds the whole model
  // in fp32 and keeps its shards of it.
  const bool streamed = model::streams_weights(job, config);
  const double shards_held = qlora ? plain_base / shards * frozen + nf4_bytes / shards + adapters / shards * master
                                   : plan.parameters / shards * master;
  if (streamed && qlora) {
    // A unit's projections staged (this rank's part, the frozen dtype) until they are quantised.
    plan.loading_bytes = std::max({s.embed, s.block, s.head}) * 4 + shards_held + s.projections / shards * frozen;
    plan.loading_detail = "streamed (low_cpu_fsdp): one unit at a time in fp32, the rank's part of its projections "
                          "until quantised, and the rank's shards";
  } else if (streamed) {
    plan.loading_bytes = std::max({s.embed, s.block, s.head}) * 4 + plan.parameters / shards * master;
    plan.loading_detail = "streamed (low_cpu_fsdp): one unit at a time in fp32, and the rank's shards";
  } else {
    plan.loading_bytes = plan.parameters * 4 + shards_held;
    plan.loading_detail = "every rank builds the whole model in fp32, then keeps its shards (low_cpu_fsdp streams it)";
  }
  if (!plan.cuda) plan.loading_bytes += kCpuRuntimeBytes;
  return plan;
}

}  // namespace shardtune::launcher
