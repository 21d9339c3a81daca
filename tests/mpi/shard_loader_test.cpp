// Streaming weights into shards: for every strategy and both reader modes, the loaded shards,
// gathered, equal the tensors in the files bitwise (stored dtype) or exactly as converted; bad
// folders fail on every rank before anything is allocated; and each rank's peak memory stays
// within its bound (reader: shard + 2 units; others: shard + 1 unit) whatever the depth. The
// shards live on the test device (a GPU with ST_TEST_DEVICE=cuda: loaded through pinned staging).
// On simulated nodes (pairs of ranks), each node's reader reads exactly what its ranks hold, every
// byte is read once in the job, and the readers' digests, merged, are the digest of the files.
#include <ATen/ops/equal.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <optional>

#include "checkpoint/hf/hf_tensor_source.h"
#include "checkpoint/hf/weights_digest.h"
#include "runtime/dist/text_collectives.h"
#include "common/process_memory.h"
#include "checkpoint/hf/hf_writer.h"
#include "checkpoint/hf/safetensors_torch.h"
#include "common/error.h"
#include "common/job/schema.h"
#include "runtime/fsdp/shard_loader.h"
#include "runtime/model/init.h"
#include "tests/mpi/test_device.h"

namespace shardtune {
namespace {

namespace fs = std::filesystem;
using testing_support::world_rank;
using testing_support::world_size;

// A fresh folder every rank agrees on, made by rank 0.
std::string shared_dir(const std::string& name) { return testing_support::shared_temp_dir(name); }

// Rank 0 writes a random model as a Hugging Face folder; `skip` leaves a tensor out.
void write_folder(const std::string& dir, const model::LlamaConfig& cfg, at::ScalarType dtype,
                  const std::string& skip = "", uint64_t shard_bytes = 400'000) {
  if (world_rank() == 0) {
    model::LlamaForCausalLM m(cfg, at::TensorOptions().dtype(at::kFloat));
    model::init_weights(m, 17);
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const model::NamedParam& p : m.named_parameters())
      if (p.name != skip) tensors.emplace_back(p.name, p.tensor->to(dtype));
    checkpoint::write_hf_folder(dir, tensors, cfg.to_json(), "", shard_bytes);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

fsdp::FsdpOptions options_for(job::ShardingStrategy strategy, int hsdp_shard, bool pure_bf16 = false) {
  job::Job job;
  job.slurm.ntasks_per_node = world_size();
  job.fsdp.sharding_strategy = strategy;
  job.fsdp.hsdp_shard_size = hsdp_shard;
  job.train.pure_bf16 = pure_bf16;
  return fsdp::fsdp_options(job.fsdp, job.train, world_size(), static_cast<int>(job.slurm.ranks_per_node()),
                            testing_support::test_device());
}

fsdp::SourceFactory hf_source(const std::string& dir) {
  return [dir] { return std::make_unique<checkpoint::HfTensorSource>(dir); };
}

// How the weights travel: one reader per node or world rank 0 for all; rounds of 32 MiB (one per
// unit here) or of 4 KiB (rounds that cut parameters and shards); and, with `own_node`, every
// rank treated as a node of its own, so that ranks are served by messages instead of the shared
// staging window (or each reads for itself).
struct LoadMode {
  std::string name;
  fsdp::LoadOptions options;
  bool own_node = false;
};

std::vector<LoadMode> load_modes() {
  std::vector<LoadMode> modes;
  for (bool per_node : {true, false}) {
    for (int64_t stage : {int64_t(32) << 20, int64_t(4096)}) {
      for (bool own_node : {false, true}) {
        if (own_node && stage > 4096) continue;
        fsdp::LoadOptions o;
        o.reader_per_node = per_node;
        o.stage_bytes = stage;
        if (own_node) o.node = world_rank();  // a node of its own
        modes.push_back({fmt::format("{}, {} B rounds{}", per_node ? "node readers" : "rank 0 reads", stage,
                                     own_node ? ", every rank a node" : ""),
                         o, own_node});
      }
    }
  }
  return modes;
}

TEST(ShardLoader, GatheredShardsEqualTheFilesForEveryStrategy) {
  model::LlamaConfig cfg = model::LlamaConfig::tiny();
  std::vector<std::pair<job::ShardingStrategy, int>> strategies = {
      {job::ShardingStrategy::kFullShard, 0}, {job::ShardingStrategy::kShardGradOp, 0}, {job::ShardingStrategy::kNoShard, 0}};
  if (world_size() == 4) strategies.push_back({job::ShardingStrategy::kHybridShard, 2});
  // The groups of each shard size made once (every rank in the same order): a GPU's NCCL
  // communicators take over a second each to make, for each of this test's many loads.
  std::map<int, dist::ProcessGroups> groups_by_size;
  for (at::ScalarType stored : {at::kBFloat16, at::kFloat}) {
    for (bool tied : {false, true}) {
      cfg.tie_word_embeddings = tied;
      const std::string dir = shared_dir("load");
      write_folder(dir, cfg, stored);
      const checkpoint::HfFolder files = checkpoint::HfFolder::open(dir);
      for (const auto& [strategy, hsdp] : strategies) {
        for (const LoadMode& mode : load_modes()) {
          for (bool pure_bf16 : {false, true}) {
            SCOPED_TRACE(testing::Message() << c10::toString(stored) << (tied ? " tied " : " ") << job::enum_name(strategy)
                                            << " " << mode.name << (pure_bf16 ? " bf16 masters" : " fp32 masters"));
            const fsdp::FsdpOptions options = options_for(strategy, hsdp, pure_bf16);
            auto made = groups_by_size.find(options.shard_size);
            if (made == groups_by_size.end())
              made = groups_by_size.emplace(options.shard_size, testing_support::make_test_groups(options.shard_size)).first;
            dist::ProcessGroups& groups = made->second;
            model::LlamaForCausalLM m(cfg, at::TensorOptions().device(at::kMeta));
            fsdp::validate_source(m, hf_source(dir), *groups.world);
            fsdp::FsdpLlama sharded(m, groups, options);
            const fsdp::LoadStats stats = fsdp::load_shards(sharded, hf_source(dir), mode.options);
            const bool reads = world_rank() == 0 || (mode.options.reader_per_node && mode.own_node);
            EXPECT_EQ(stats.reader, reads);
            if (!stats.reader) {
              EXPECT_EQ(stats.bytes_read, 0u);
            }
            for (const auto& [name, value] : sharded.gather_full_parameters()) {
              const at::Tensor want = checkpoint::read_tensor(files.file_of(name), name).to(options.precision.master);
              EXPECT_TRUE(at::equal(value, want)) << name;
            }
          }
        }
      }
      if (world_rank() == 0) fs::remove_all(dir);
    }
  }
}

std::string error_on_every_rank(const std::string& dir, const model::LlamaConfig& cfg) {
  model::LlamaForCausalLM m(cfg, at::TensorOptions().device(at::kMeta));
  static dist::ProcessGroups groups = testing_support::make_test_groups(world_size());
  try {
    fsdp::validate_source(m, hf_source(dir), *groups.world);
  } catch (const common::Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(ShardLoader, BadFoldersFailOnEveryRankBeforeAnythingIsAllocated) {
  const model::LlamaConfig cfg = model::LlamaConfig::tiny();
  const std::string missing = shared_dir("missing");
  write_folder(missing, cfg, at::kBFloat16, "model.layers.1.mlp.up_proj.weight");
  EXPECT_NE(error_on_every_rank(missing, cfg).find("missing tensor model.layers.1.mlp.up_proj.weight (shape [160, 64])"),
            std::string::npos);

  model::LlamaConfig wider = cfg;
  wider.intermediate_size = 192;
  const std::string misshapen = error_on_every_rank(missing, wider);
  EXPECT_NE(misshapen.find("model.layers.0.mlp.up_proj.weight has shape [160, 64] in " + missing), std::string::npos)
      << misshapen;
  EXPECT_NE(misshapen.find(", but config.json implies [192, 64]"), std::string::npos) << misshapen;

  const std::string ints = shared_dir("ints");
  write_folder(ints, cfg, at::kInt);
  EXPECT_NE(error_on_every_rank(ints, cfg).find("is stored as I32"), std::string::npos);

  const std::string shard_gone = shared_dir("gone");
  write_folder(shard_gone, cfg, at::kBFloat16, "", 60'000);  // several shard files
  if (world_rank() == 0) {
    EXPECT_TRUE(fs::remove(fs::path(shard_gone) / "model-00002-of-00005.safetensors"));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const std::string gone = error_on_every_rank(shard_gone, cfg);
  EXPECT_NE(gone.find("model-00002-of-00005.safetensors"), std::string::npos) << gone;
  if (world_rank() == 0)
    for (const std::string& d : {missing, ints, shard_gone}) fs::remove_all(d);
}

// Bytes of the stored weights this rank's shards take from the source: its part of its shard
// (replicas split a shard between them) of every flat parameter.
int64_t part_bytes(fsdp::FsdpLlama& sharded, int64_t stored_size) {
  const int replicas = sharded.groups().replicate->size(), replica = sharded.groups().replicate->rank();
  int64_t bytes = 0;
  for (fsdp::FlatParam* f : sharded.flat_params()) {
    const fsdp::FlatLayout& layout = f->layout();
    for (const fsdp::ShardPiece& p :
         layout.pieces_in_part(f->shard_rank(), fsdp::replica_part(layout.shard_numel(), replicas, replica)))
      bytes += p.length * stored_size;
  }
  return bytes;
}

TEST(ShardLoader, SimulatedNodesReadEachByteOnceAndDigestWhatTheyRead) {
  if (world_size() < 2) GTEST_SKIP() << "nodes of two ranks need two ranks";
  model::LlamaConfig cfg = model::LlamaConfig::tiny();
  const std::string dir = shared_dir("nodes");
  write_folder(dir, cfg, at::kBFloat16);
  const checkpoint::HfFolder files = checkpoint::HfFolder::open(dir);
  MPI_Comm node;  // ranks 0-1, 2-3, ...: nodes of their own
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() / 2, world_rank(), &node);
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  const int nodes = (world_size() + 1) / 2;
  int64_t model_bytes = 0;
  for (const std::string& name : checkpoint::identity_tensors(files)) model_bytes += files.info(name).nbytes;
  std::vector<std::pair<job::ShardingStrategy, int>> strategies = {{job::ShardingStrategy::kFullShard, 0},
                                                                   {job::ShardingStrategy::kNoShard, 0}};
  if (world_size() == 4) strategies.push_back({job::ShardingStrategy::kHybridShard, 2});
  constexpr uint64_t kChunk = 4096;  // a digest chunk: several to a tensor
  for (const auto& [strategy, hsdp] : strategies) {
    const fsdp::FsdpOptions options = options_for(strategy, hsdp);
    dist::ProcessGroups groups = testing_support::make_test_groups(options.shard_size);
    for (int64_t stage : {int64_t(32) << 20, int64_t(4096)}) {
      for (bool digest : {false, true}) {
        SCOPED_TRACE(testing::Message() << job::enum_name(strategy) << ", " << stage << " B rounds"
                                        << (digest ? ", digesting" : ""));
        model::LlamaForCausalLM m(cfg, at::TensorOptions().device(at::kMeta));
        fsdp::FsdpLlama sharded(m, groups, options);
        std::optional<checkpoint::WeightsDigest> mine;
        const fsdp::SourceFactory source = [&]() -> std::unique_ptr<fsdp::TensorSource> {
          auto plain = std::make_unique<checkpoint::HfTensorSource>(dir);
          if (!digest) return plain;
          if (!mine) mine.emplace(checkpoint::HfFolder::open(dir), kChunk);
          return checkpoint::digesting_source(std::move(plain), *mine);
        };
        fsdp::LoadOptions o;
        o.node = world_rank() / 2;
        o.stage_bytes = stage;
        o.granule_bytes = digest ? static_cast<int64_t>(kChunk) : 0;
        const fsdp::LoadStats stats = fsdp::load_shards(sharded, source, o);
        for (const auto& [name, value] : sharded.gather_full_parameters())
          EXPECT_TRUE(at::equal(value, checkpoint::read_tensor(files.file_of(name), name).to(at::kFloat))) << name;

        // What the node's ranks take, against what its reader read, and the job's total.
        int64_t held = part_bytes(sharded, 2), node_held = 0;
        MPI_Allreduce(&held, &node_held, 1, MPI_INT64_T, MPI_SUM, node);
        EXPECT_EQ(stats.reader, world_rank() % 2 == 0);
        int64_t read = static_cast<int64_t>(stats.bytes_read), total = 0;
        MPI_Allreduce(&read, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        const int64_t tensors = static_cast<int64_t>(checkpoint::identity_tensors(files).size());
        if (stats.reader) {
          if (!digest) {
            EXPECT_EQ(read, node_held) << "a node's reader reads exactly what its ranks hold";
          } else {
            EXPECT_GE(read, node_held);
            EXPECT_LE(read, node_held + tensors * static_cast<int64_t>(kChunk)) << "at most a chunk more a tensor";
          }
          // Its share of the model (1/nodes with nodes of equal size), but padding, and one round.
          const int64_t share = model_bytes * node_size / world_size();
          EXPECT_LE(read, share + stage + (digest ? tensors * static_cast<int64_t>(kChunk) : 0))
              << "read " << read << " of " << model_bytes << " bytes on a node of " << node_size << " of "
              << world_size() << " ranks";
          if (world_rank() == 0)
            std::printf("%s, %lld B rounds%s: node 0 read %.3f of the model (%d nodes), the job %.3f\n",
                        std::string(job::enum_name(strategy)).c_str(), static_cast<long long>(stage),
                        digest ? ", digesting" : "", static_cast<double>(read) / model_bytes, nodes,
                        static_cast<double>(total) / model_bytes);
        }
        if (!digest) {
          EXPECT_EQ(total, model_bytes) << "each byte of the model read once in the job";
        }
        if (digest) {
          // The readers' chunks, merged on rank 0, cover every chunk: nothing is read again.
          const std::vector<std::string> chunks = dist::gather_text(*groups.world, mine ? mine->chunks_text() : "");
          std::string alone_hex;
          if (world_rank() == 0) {
            checkpoint::WeightsDigest merged(files, kChunk);
            for (const std::string& c : chunks) merged.merge(c);
            EXPECT_EQ(merged.complete(files), 0u) << "a chunk no reader read whole";
            checkpoint::WeightsDigest alone(files, kChunk);  // every byte, read in a pass of its own
            EXPECT_GT(alone.complete(files), 0u);
            alone_hex = alone.hex();
            EXPECT_EQ(merged.hex(), alone_hex);
          }
          const std::string hex = checkpoint::merged_digest(mine ? &*mine : nullptr, world_rank() == 0 ? &files : nullptr,
                                                            *groups.world, kChunk);
          if (world_rank() == 0) {
            EXPECT_EQ(hex, alone_hex);
          }
        }
      }
    }
  }
  MPI_Comm_free(&node);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::remove_all(dir);
}

struct Peak {
  int64_t growth;        // VmHWM - VmRSS before the load
  int64_t shard_bytes;   // this rank's shards
  int64_t largest_unit;  // largest flat parameter, unsharded, in the master dtype
};

Peak measure_load(const std::string& dir, const model::LlamaConfig& cfg) {
  const fsdp::FsdpOptions options = options_for(job::ShardingStrategy::kFullShard, 0);
  dist::ProcessGroups groups = testing_support::make_test_groups(options.shard_size, 120.0);
  MPI_Barrier(MPI_COMM_WORLD);
  common::reset_peak_resident();
  const int64_t before = common::resident_bytes();
  model::LlamaForCausalLM m(cfg, at::TensorOptions().device(at::kMeta));
  fsdp::validate_source(m, hf_source(dir), *groups.world);
  fsdp::FsdpLlama sharded(m, groups, options);
  fsdp::load_shards(sharded, hf_source(dir));
  Peak p{common::peak_resident_bytes() - before, 0, 0};
  for (fsdp::FlatParam* f : sharded.flat_params()) {
    p.shard_bytes += f->shard().nbytes();
    p.largest_unit = std::max<int64_t>(p.largest_unit, f->layout().padded_numel() * f->shard().element_size());
  }
  return p;
}

TEST(ShardLoader, PeakMemoryIsBoundedByShardAndUnitsNotByDepth) {
  model::LlamaConfig cfg = model::LlamaConfig::tiny();
  cfg.hidden_size = 1024;
  cfg.intermediate_size = 2816;
  cfg.num_attention_heads = 8;
  cfg.num_key_value_heads = 2;
  cfg.head_dim = 128;
  cfg.vocab_size = 4096;
  constexpr int64_t kSlack = 40 << 20;  // allocator and MPI transport buffers
  std::optional<Peak> shallow;
  for (int64_t layers : {6, 12}) {
    cfg.num_hidden_layers = layers;
    const std::string dir = shared_dir("mem");
    write_folder(dir, cfg, at::kBFloat16, "", 200'000'000);
    const Peak p = measure_load(dir, cfg);
    const int64_t model_fp32 = cfg.num_parameters() * 4;
    const bool reader = world_rank() == 0;  // one node: local rank 0 reads
    const int64_t bound = p.shard_bytes + (reader ? 2 : 1) * p.largest_unit + kSlack;
    EXPECT_LE(p.growth, bound) << layers << " layers: peak grew " << (p.growth >> 20) << " MiB, bound "
                               << (bound >> 20) << " MiB (shard " << (p.shard_bytes >> 20) << ", unit "
                               << (p.largest_unit >> 20) << "), model " << (model_fp32 >> 20) << " MiB";
    if (shallow && reader) {
      EXPECT_LE(p.growth - shallow->growth, p.shard_bytes - shallow->shard_bytes + kSlack)
          << "twice the blocks raised the reader's peak by more than its larger shard";
    }
    if (reader && world_size() > 1) {
      EXPECT_LT(p.growth, model_fp32) << "the reader held the whole model";
    }
    shallow = p;
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace shardtune
