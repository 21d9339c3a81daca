// Streaming shard loader.
#include "runtime/fsdp/shard_loader.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/ScalarType.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <utility>


#include <cstring>

#include "common/aligned_vector.h"
#include "common/error.h"
#include "common/log.h"
#include "runtime/dist/staging_group.h"
#include "runtime/dist/agree.h"
#include "runtime/fsdp/load_plan.h"
#include "runtime/fsdp/replica_parts.h"
#include "runtime/model/lora.h"

namespace shardtune::fsdp {
namespace {

using Clock = std::chrono::steady_clock;
using common::ErrorKind;

}  // namespace

void TensorSource::read_nf4_records(const std::string& name, int64_t, int64_t, uint8_t*) {
  common::raise(ErrorKind::kInternal, fmt::format("{} is not stored in NF4 by this source", name));
}

std::vector<std::string> weight_mismatches(model::LlamaForCausalLM& model, const TensorSource& source,
                                           std::vector<std::string>* ignored,
                                           const std::optional<quant::Nf4Format>& nf4_base) {
  std::map<std::string, SourceTensor> have;
  for (const SourceTensor& t : source.tensors()) have.emplace(t.name, t);
  const std::map<std::string, Nf4Stored> nf4 = source.nf4_weights();
  size_t projections = 0;
  auto where = [&](const std::string& name) {
    const std::string file = source.location(name);
    return file.empty() ? std::string() : " in " + file;
  };
  std::vector<std::string> problems;
  std::set<std::string> needed;
  for (const model::NamedParam& p : model.named_parameters()) {
    if (model::is_adapter_parameter(p.name)) continue;  // LoRA adapters are not part of the base weights
    const std::vector<int64_t> shape(p.tensor->sizes().begin(), p.tensor->sizes().end());
    needed.insert(p.name);
    projections += quant::is_nf4_weight(p.name) ? 1 : 0;
    if (const auto q = nf4.find(p.name); q != nf4.end()) {
      if (!nf4_base) {
        problems.push_back(fmt::format("{} is stored in NF4 (a bitsandbytes 4-bit folder){}: only [peft] method = "
                                       "\"qlora\" trains on such a base",
                                       p.name, where(p.name)));
      } else if (q->second.format.block_size != nf4_base->block_size ||
                 q->second.format.double_quant != nf4_base->double_quant) {
        problems.push_back(fmt::format(
            "{} is stored in NF4 blocks of {} with {} scales{}, but [peft] nf4_block_size = {} and nf4_double_quant = {}",
            p.name, q->second.format.block_size, q->second.format.double_quant ? "double-quantised" : "fp32", where(p.name),
            nf4_base->block_size, nf4_base->double_quant));
      } else if (!quant::is_nf4_weight(p.name)) {
        problems.push_back(fmt::format("{} is stored in NF4{}, but QLoRA keeps only the blocks' projections in NF4",
                                       p.name, where(p.name)));
      }
      if (q->second.shape != shape)
        problems.push_back(fmt::format("{} has shape [{}] in its NF4 state{}, but config.json implies [{}]", p.name,
                                       fmt::join(q->second.shape, ", "), where(p.name), fmt::join(shape, ", ")));
      continue;
    }
    auto it = have.find(p.name);
    if (it == have.end()) {
      problems.push_back(fmt::format("missing tensor {} (shape [{}])", p.name, fmt::join(shape, ", ")));
      continue;
    }
    if (it->second.shape != shape)
      problems.push_back(fmt::format("{} has shape [{}]{}, but config.json implies [{}]", p.name,
                                     fmt::join(it->second.shape, ", "), where(p.name), fmt::join(shape, ", ")));
    if (!it->second.trainable)
      problems.push_back(fmt::format("{} is stored as {}{}: only F32, F16, BF16 and F64 weights can be trained "
                                     "(quantized checkpoints are not supported)",
                                     p.name, it->second.stored_dtype, where(p.name)));
  }
  if (!nf4.empty() && nf4.size() != projections)
    problems.push_back(fmt::format("{} of the {} block projections are stored in NF4: QLoRA needs all of them or none",
                                   nf4.size(), projections));
  for (const auto& [name, t] : have) {
    if (needed.count(name) || (name == "lm_head.weight" && model.config().tie_word_embeddings)) continue;
    if (source.nf4_storage(name)) continue;
    if (model::is_ignored_checkpoint_tensor(name)) {
      if (ignored != nullptr) ignored->push_back(name);
      continue;
    }
    problems.push_back(fmt::format("unexpected tensor {}{} (not part of this Llama config)", name, where(name)));
  }
  return problems;
}

std::string ignored_tensors_note(const std::vector<std::string>& ignored) {
  if (ignored.empty()) return "";
  return fmt::format("ignoring {} tensor(s) that transformers does not load either (RoPE frequencies, computed from "
                     "config.json): {}{}",
                     ignored.size(), fmt::join(ignored.begin(), ignored.begin() + std::min<size_t>(ignored.size(), 3), ", "),
                     ignored.size() > 3 ? fmt::format(" and {} more", ignored.size() - 3) : "");
}

void validate_source(model::LlamaForCausalLM& model, const SourceFactory& open_source, dist::Communicator& world,
                     const std::optional<quant::Nf4Format>& nf4_base) {
  dist::decide_on_root(world, [&] {
    std::vector<std::string> ignored;
    const std::vector<std::string> problems = weight_mismatches(model, *open_source(), &ignored, nf4_base);
    if (!ignored.empty()) spdlog::info("{}", ignored_tensors_note(ignored));
    ST_CHECK(problems.empty(), ErrorKind::kConfig, "the weights do not match the model ({} problem(s)):\n  {}",
             problems.size(), fmt::join(problems, "\n  "));
    return std::string();
  });
}

namespace {

constexpr int64_t kBuffers = 2;  // staged rounds in flight: one being read, one being taken

// Everything one rank needs to know about streaming: who reads, how the source stores the
// parameters, and the shared staging window of the reader's node.
struct Plan {
  std::unique_ptr<dist::StagingGroup> ranks;  // the reader (rank 0) and the ranks it serves
  bool reader = false;
  bool local = false;  // on the reader's node: takes its parts from the shared window
  int shard = 0;       // this rank's shard index
  // The reader and the ranks it serves, by group rank: which shard each holds, which part of it
  // (replicas split a shard between them), and whether it is on the reader's node.
  struct Member {
    int shard = 0;
    int replica = 0;
    bool local = true;
  };
  std::vector<Member> members;
  int me = 0;  // this rank's group rank
  int replicas = 1;  // ranks holding each shard
  // Per flat parameter, per parameter: stored dtype and its size; and the storage order.
  std::vector<std::vector<at::ScalarType>> stored;
  std::vector<std::vector<int64_t>> stored_size;
  std::vector<std::vector<size_t>> storage_order;
  int64_t round_numel = 0;
  int64_t stage_bytes = 0;  // one staged round
  char* staging = nullptr;  // kBuffers x stage_bytes, on the reader's node

  char* buffer(int64_t round) const { return staging + (round % kBuffers) * stage_bytes; }
};

// The ranks' roles: who reads for whom.
Plan join_groups(const std::vector<FlatParam*>& flats, dist::Communicator& world, const LoadOptions& options,
                 const dist::Communicator& replicas) {
  Plan plan;
  plan.ranks = std::make_unique<dist::StagingGroup>(world, dist::StagingOptions{options.reader_per_node, options.node});
  plan.reader = plan.ranks->reader();
  plan.me = plan.ranks->rank();
  plan.shard = flats.empty() ? 0 : flats.front()->shard_rank();
  plan.replicas = replicas.size();
  // Each member's shard, replica and node.
  const std::vector<int32_t> all = plan.ranks->all_gather({plan.shard, replicas.rank(), plan.ranks->node_id()});
  for (size_t j = 0; j < static_cast<size_t>(plan.ranks->size()); ++j)
    plan.members.push_back({all[3 * j], all[3 * j + 1], all[3 * j + 2] == all[2]});
  plan.local = plan.members[static_cast<size_t>(plan.me)].local;
  return plan;
}

// Every parameter's stored dtype and place in the storage order, as world rank 0's source says
// (it always reads).
void agree_storage(Plan& plan, const std::vector<FlatParam*>& flats, const TensorSource* source,
                   dist::Communicator& world) {
  std::map<std::string, std::pair<at::ScalarType, int32_t>> stored;  // name -> dtype, position
  if (source) {
    std::map<std::string, at::ScalarType> dtypes;  // validate_source refused untrainable ones
    for (const SourceTensor& t : source->tensors()) dtypes.emplace(t.name, t.trainable.value_or(at::kFloat));
    int32_t position = 0;
    for (const std::string& name : source->storage_order()) stored.emplace(name, std::make_pair(dtypes.at(name), position++));
  }
  std::vector<int32_t> codes;  // per parameter: scalar type, position
  for (FlatParam* flat : flats) {
    for (const ParamSpan& p : flat->layout().params()) {
      const auto [dtype, position] = source ? stored.at(p.name) : std::make_pair(at::kFloat, 0);
      codes.push_back(source ? static_cast<int32_t>(dtype) : 0);
      codes.push_back(position);
    }
  }
  at::Tensor agreed = at::from_blob(codes.data(), {static_cast<int64_t>(codes.size())}, at::kInt);
  world.broadcast(agreed, 0);
  size_t next = 0;
  for (FlatParam* flat : flats) {
    const size_t params = flat->layout().params().size();
    auto& types = plan.stored.emplace_back();
    auto& sizes = plan.stored_size.emplace_back();
    std::vector<int32_t> positions;
    for (size_t i = 0; i < params; ++i, next += 2) {
      types.push_back(static_cast<at::ScalarType>(codes[next]));
      sizes.push_back(static_cast<int64_t>(c10::elementSize(types.back())));
      positions.push_back(codes[next + 1]);
    }
    auto& order = plan.storage_order.emplace_back(params);
    for (size_t i = 0; i < params; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return positions[a] < positions[b]; });
  }
}

// Sizes a round and, on the reader's node, allocates the shared staging window.
void allocate_staging(Plan& plan, const LoadOptions& options) {
  int64_t max_size = 1;
  size_t max_params = 0;
  for (const std::vector<int64_t>& sizes : plan.stored_size) {
    for (int64_t size : sizes) max_size = std::max(max_size, size);
    max_params = std::max(max_params, sizes.size());
  }
  plan.round_numel = std::max<int64_t>(1, options.stage_bytes / max_size);
  plan.stage_bytes = stage_capacity(plan.round_numel, max_params, max_size);
  plan.staging = plan.ranks->share(kBuffers * plan.stage_bytes, plan.local);  // null: served by messages
}

// Conversions run on one thread per rank while loading: the ranks of a node convert in parallel
// already, and each rank's OpenMP threads, spinning after every parallel region, would take the
// cores from the reader (measured: 1.3 vs 2.1 GB/s at world size 4 on 2 cores).
class OneThread {
 public:
  OneThread() : threads_(at::get_num_threads()) { at::set_num_threads(1); }
  ~OneThread() { at::set_num_threads(threads_); }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int threads_;
};

void convert(const char* in, at::ScalarType from, char* out, const at::TensorOptions& to, int64_t count) {
  if (from == to.dtype().toScalarType()) {
    std::memcpy(out, in, static_cast<size_t>(count) * c10::elementSize(from));
  } else {
    at::from_blob(out, {count}, to).copy_(at::from_blob(const_cast<char*>(in), {count}, at::TensorOptions().dtype(from)));
  }
}

// The flat parameters of the base model the rounds stream: LoRA adapters hold their initial values
// already, and NF4 flats of a source that stores them in NF4 read their records themselves.
std::vector<FlatParam*> base_flats(FsdpLlama& model, bool nf4_stored) {
  std::vector<FlatParam*> out;
  for (FlatParam* f : model.flat_params()) {
    if (nf4_stored && f->nf4()) continue;
    size_t adapters = 0;
    for (const ParamSpan& p : f->layout().params()) adapters += model::is_adapter_parameter(p.name) ? 1 : 0;
    ST_CHECK(adapters == 0 || adapters == f->layout().params().size(), ErrorKind::kInternal,
             "a flat parameter mixes LoRA adapters with base weights");
    if (adapters == 0) out.push_back(f);
  }
  return out;
}

}  // namespace

namespace {

// One load: the plan, the rounds of every flat parameter, and what each rank does with them. Every
// communicator and window it makes is the plan's (dist/staging_group.h).
class ShardLoader {
 public:
  ShardLoader(FsdpLlama& model, const SourceFactory& open_source, const LoadOptions& options, bool nf4_stored);
  LoadStats run();

 private:
  std::vector<RoundParam> params_of(size_t flat, int64_t round) const;
  std::vector<RoundParam> reads_of(size_t flat, int64_t round) const;
  std::vector<ShardTake> takes_of(size_t k, const Plan::Member& member) const;
  const Plan::Member& me() const { return plan_.members[static_cast<size_t>(plan_.me)]; }
  std::vector<ReadRequest> requests_of(size_t k) const;
  int64_t round_bytes(size_t k) const;
  void plan_rounds(const LoadOptions& options);
  void fill(size_t k);
  void take(size_t k, const char* src, bool packed);
  void finish_flats(size_t until);
  void send_remote(size_t k);
  void read_rounds();
  void take_shared_rounds();
  void receive_rounds();

  const OneThread one_thread_;
  const Clock::time_point start_ = Clock::now();
  int world_rank_ = 0;
  std::vector<FlatParam*> flats_;
  dist::Communicator& replicas_;
  Plan plan_;
  std::unique_ptr<TensorSource> source_;
  std::vector<NeededRanges> needed_;  // per flat parameter: what the group's ranks need of it
  std::vector<std::pair<size_t, int64_t>> rounds_;  // the rounds the group needs: (flat, round)
  size_t finished_ = 0;  // flats [0, finished_) are complete on this rank
  int64_t device_chunk_ = 0;
  at::Tensor device_stage_;  // shards on a GPU receive their parts through this pinned host buffer
  common::AlignedVector<char> packed_;  // a round's parts of one shard, end to end, for another node
  std::optional<common::Progress> progress_;
};

ShardLoader::ShardLoader(FsdpLlama& model, const SourceFactory& open_source, const LoadOptions& options,
                         bool nf4_stored)
    : world_rank_(model.groups().world->rank()),
      flats_(base_flats(model, nf4_stored)),
      replicas_(*model.groups().replicate),
      plan_(join_groups(flats_, *model.groups().world, options, replicas_)) {
  if (plan_.reader) source_ = open_source();
  agree_storage(plan_, flats_, source_.get(), *model.groups().world);
  allocate_staging(plan_, options);
  plan_rounds(options);
  device_chunk_ = std::min<int64_t>(plan_.round_numel, int64_t{1} << 22);
  if (world_rank_ != 0) return;
  const auto remote = std::count_if(plan_.members.begin(), plan_.members.end(), [](const Plan::Member& m) { return !m.local; });
  spdlog::info("streaming the weights: {}, rounds of {:.1f} MiB staged in shared memory, {} rank(s) served by "
               "messages{}",
               options.reader_per_node ? "one reader per node, reading what its node's ranks hold"
                                       : "world rank 0 reads for every rank",
               static_cast<double>(plan_.stage_bytes) / (1 << 20), remote,
               plan_.replicas > 1 ? fmt::format("; the {} replicas of each shard read a part each and share them",
                                                plan_.replicas)
                                  : "");
  // World rank 0's progress stands for the job's: every node's reader reads its own share alike.
  int64_t total = 0;
  for (size_t k = 0; k < rounds_.size(); ++k) total += round_bytes(k);
  progress_.emplace(common::logged_progress("loading the weights", total));
}

std::vector<RoundParam> ShardLoader::params_of(size_t f, int64_t r) const {
  return round_params(flats_[f]->layout(), plan_.storage_order[f], r, plan_.round_numel, plan_.stored_size[f]);
}

std::vector<RoundParam> ShardLoader::reads_of(size_t f, int64_t r) const {
  return round_reads(params_of(f, r), needed_[f], plan_.stored_size[f]);
}

// What `member` takes of round k: the pieces of its part of its shard.
std::vector<ShardTake> ShardLoader::takes_of(size_t k, const Plan::Member& member) const {
  const auto [f, r] = rounds_[k];
  const FlatLayout& layout = flats_[f]->layout();
  const ShardPart part = replica_part(layout.shard_numel(), plan_.replicas, member.replica);
  return shard_takes(params_of(f, r), layout.pieces_in_part(member.shard, part), plan_.stored_size[f]);
}

std::vector<ReadRequest> ShardLoader::requests_of(size_t k) const {
  const auto [f, r] = rounds_[k];
  std::vector<ReadRequest> requests;
  for (const RoundParam& p : reads_of(f, r))
    requests.push_back({&flats_[f]->layout().params()[p.param].name, p.begin, p.end - p.begin, plan_.stored[f][p.param],
                        plan_.buffer(static_cast<int64_t>(k)) + p.staged_offset});
  return requests;
}

int64_t ShardLoader::round_bytes(size_t k) const {
  const auto [f, r] = rounds_[k];
  int64_t bytes = 0;
  for (const RoundParam& p : reads_of(f, r)) bytes += (p.end - p.begin) * plan_.stored_size[f][p.param];
  return bytes;
}

// What the group's ranks need of each flat parameter (each its part of its shard), and the rounds
// that hold any of it: the reader reads nothing else. Every rank of the group plans the same.
void ShardLoader::plan_rounds(const LoadOptions& options) {
  for (size_t f = 0; f < flats_.size(); ++f) {
    const FlatLayout& layout = flats_[f]->layout();
    std::vector<std::vector<ShardPiece>> pieces;
    for (const Plan::Member& m : plan_.members)
      pieces.push_back(layout.pieces_in_part(m.shard, replica_part(layout.shard_numel(), plan_.replicas, m.replica)));
    std::vector<int64_t> granule;
    for (int64_t size : plan_.stored_size[f])
      granule.push_back(options.granule_bytes > 0 ? std::max<int64_t>(1, options.granule_bytes / size) : 1);
    needed_.push_back(needed_ranges(layout, pieces, granule));
    for (int64_t r = 0; r < round_count(layout.numel(), plan_.round_numel); ++r)
      if (!reads_of(f, r).empty()) rounds_.emplace_back(f, r);
  }
}

// The reader stages round k, reading in storage order; the disk works on round k + 1 meanwhile.
void ShardLoader::fill(size_t k) {
  if (k + 1 < rounds_.size()) source_->prefetch(requests_of(k + 1));
  source_->read_batch(requests_of(k));
}

// This rank converts its parts of round k into its shard; `packed`: they lie end to end at `src`
// (as sent to another node) rather than where the round was staged. Shards on a GPU receive their
// parts through a pinned host buffer of at most 4 Mi elements, copied up piece by piece.
void ShardLoader::take(size_t k, const char* src, bool packed) {
  const size_t f = rounds_[k].first;
  finish_flats(f);
  at::Tensor& shard = flats_[f]->load_target();
  const int64_t esize = static_cast<int64_t>(shard.element_size());
  const bool on_host = shard.device().is_cpu();
  const at::TensorOptions host = shard.options().device(at::kCPU);
  if (!on_host && (!device_stage_.defined() || device_stage_.scalar_type() != shard.scalar_type()))
    device_stage_ = at::empty({device_chunk_}, host.pinned_memory(true));
  int64_t at = 0;
  for (const ShardTake& t : takes_of(k, me())) {
    const char* in = src + (packed ? at : t.staged_offset);
    const int64_t in_size = plan_.stored_size[f][t.param];
    if (on_host) {
      convert(in, plan_.stored[f][t.param], static_cast<char*>(shard.data_ptr()) + t.shard_offset * esize, host,
              t.length);
    } else {
      for (int64_t done = 0; done < t.length; done += device_chunk_) {
        const int64_t n = std::min(device_chunk_, t.length - done);
        convert(in + done * in_size, plan_.stored[f][t.param], static_cast<char*>(device_stage_.data_ptr()), host, n);
        shard.narrow(0, t.shard_offset + done, n).copy_(device_stage_.narrow(0, 0, n));  // blocking: reused next
      }
    }
    at += t.length * in_size;
  }
}

// Completes flats [finished_, until) on this rank: the padding zeroed, the parts the other
// replicas read shared (collective over the replicate group, in the order of the flats on every
// rank), and NF4 staging quantised.
void ShardLoader::finish_flats(size_t until) {
  for (; finished_ < until; ++finished_) {
    FlatParam& flat = *flats_[finished_];
    at::Tensor& target = flat.load_target();
    const std::vector<ShardPiece> mine = flat.layout().pieces_in_shard(plan_.shard);
    const int64_t filled = mine.empty() ? 0 : mine.back().shard_offset + mine.back().length;
    target.narrow(0, filled, target.numel() - filled).zero_();
    share_parts(target, replicas_);
    flat.loaded();  // NF4: quantised now
  }
}

void ShardLoader::send_remote(size_t k) {
  const size_t f = rounds_[k].first;
  for (size_t j = 1; j < plan_.members.size(); ++j) {
    if (plan_.members[j].local) continue;
    int64_t at = 0;
    for (const ShardTake& t : takes_of(k, plan_.members[j])) {
      const int64_t bytes = t.length * plan_.stored_size[f][t.param];
      if (packed_.size() < static_cast<size_t>(at + bytes)) packed_.resize(static_cast<size_t>(at + bytes));
      std::memcpy(packed_.data() + at, plan_.buffer(static_cast<int64_t>(k)) + t.staged_offset,
                  static_cast<size_t>(bytes));
      at += bytes;
    }
    plan_.ranks->send(packed_.data(), at, static_cast<int>(j));
  }
}

// Two staging buffers: while the ranks take round k from one, the reader fills round k + 1 into
// the other. One barrier of the node per round keeps them apart: when it passes, every rank has
// finished round k - 1, whose buffer the reader fills next.
void ShardLoader::read_rounds() {
  if (!rounds_.empty()) fill(0);
  plan_.ranks->node_barrier();
  for (size_t k = 0; k < rounds_.size(); ++k) {
    send_remote(k);
    if (k + 1 < rounds_.size()) fill(k + 1);
    take(k, plan_.buffer(static_cast<int64_t>(k)), false);
    plan_.ranks->node_barrier();
    if (progress_) progress_->add(round_bytes(k));
  }
}

void ShardLoader::take_shared_rounds() {
  plan_.ranks->node_barrier();
  for (size_t k = 0; k < rounds_.size(); ++k) {
    take(k, plan_.buffer(static_cast<int64_t>(k)), false);
    plan_.ranks->node_barrier();
  }
}

void ShardLoader::receive_rounds() {
  common::AlignedVector<char> buffer(static_cast<size_t>(plan_.stage_bytes));
  for (size_t k = 0; k < rounds_.size(); ++k) {
    int64_t bytes = 0;
    for (const ShardTake& t : takes_of(k, me())) bytes += t.length * plan_.stored_size[rounds_[k].first][t.param];
    plan_.ranks->receive_from_reader(buffer.data(), bytes);
    take(k, buffer.data(), true);
  }
}

LoadStats ShardLoader::run() {
  if (plan_.reader) {
    read_rounds();
  } else if (plan_.local) {
    take_shared_rounds();
  } else {
    receive_rounds();
  }
  finish_flats(flats_.size());
  plan_.ranks->close();
  if (progress_) progress_->finish("loaded the weights");
  for (FlatParam* f : flats_) f->reshard();  // the shards were written through their raw data
  LoadStats stats;
  stats.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  stats.bytes_read = source_ ? source_->bytes_read() : 0;
  stats.reader = plan_.reader;
  return stats;
}

}  // namespace

LoadStats load_shards(FsdpLlama& model, const SourceFactory& open_source, const LoadOptions& options) {
  dist::Communicator& world = *model.groups().world;
  bool has_nf4 = false;
  for (FlatParam* f : model.flat_params()) has_nf4 = has_nf4 || f->nf4().has_value();
  // Whether the source holds the projections in NF4 already (world rank 0 asks it for everyone).
  const bool nf4_stored =
      has_nf4 && dist::decide_on_root(world, [&] { return std::string(open_source()->nf4_weights().empty() ? "" : "nf4"); }) ==
                     "nf4";
  LoadStats stats = ShardLoader(model, open_source, options, nf4_stored).run();
  if (nf4_stored) {
    // Each rank reads its own records: bitsandbytes' bytes regrouped, nothing converted.
    const auto start = Clock::now();
    const std::unique_ptr<TensorSource> source = open_source();
    for (FlatParam* f : model.flat_params())
      if (f->nf4())
        f->load_records([&](const std::string& name, int64_t first, int64_t count, uint8_t* out) {
          source->read_nf4_records(name, first, count, out);
        });
    stats.seconds += std::chrono::duration<double>(Clock::now() - start).count();
    stats.bytes_read += source->bytes_read();
  }
  model.finish_loading();
  return stats;
}

}  // namespace shardtune::fsdp
