// The order in which FSDP issues its collectives and waits for them, recorded at the shard and
// replicate groups of a training step and held to the schedule written out below. On a GPU one
// communicator runs its collectives in the order they were issued (NCCL gives no guarantee that
// two of one communicator progress concurrently, whatever streams they are queued on), so this
// order is what decides whether an all-gather that the next unit needs waits behind a
// reduce-scatter that nothing needs yet.
#include <ATen/ops/arange.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/job/schema.h"
#include "runtime/fsdp/fsdp_llama.h"
#include "runtime/fsdp/fsdp_options.h"
#include "runtime/model/init.h"
#include "tests/mpi/test_device.h"

namespace shardtune {
namespace {

using testing_support::world_size;

// The log of both groups' collectives. A collective is named after the flat parameter whose
// wire-byte count moved since the last one: each counts its bytes just before it starts one.
struct ScheduleLog {
  std::vector<std::string> entries;
  std::vector<fsdp::FlatParam*> flats;
  std::vector<fsdp::FlatParam::WireBytes> seen;

  void watch(std::vector<fsdp::FlatParam*> watched) {
    flats = std::move(watched);
    seen.clear();
    for (fsdp::FlatParam* f : flats) seen.push_back(f->wire_bytes());
    entries.clear();
  }
  std::string started(const std::string& what) {
    std::string flat = "?";
    for (size_t i = 0; i < flats.size(); ++i) {
      const fsdp::FlatParam::WireBytes now = flats[i]->wire_bytes();
      if (now.gathered != seen[i].gathered || now.reduced != seen[i].reduced) {
        flat = flat == "?" ? std::to_string(i) : "ambiguous";
        seen[i] = now;
      }
    }
    entries.push_back(what + " " + flat);
    return entries.back();
  }
};

// Logs "<what> <flat>" for every collective it passes on, and "wait <what> <flat>" when the
// caller waits for it.
class Recording final : public dist::Communicator {
 public:
  Recording(std::shared_ptr<dist::Communicator> inner, ScheduleLog& log) : inner_(std::move(inner)), log_(log) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::vector<int>& world_ranks() const override { return inner_->world_ranks(); }
  const std::string& name() const override { return inner_->name(); }
  dist::WorkHandle start_all_gather(const at::Tensor& input, at::Tensor& output) override {
    const std::string what = log_.started("AG");
    return std::make_unique<Logged>(inner_->start_all_gather(input, output), log_, what);
  }
  dist::WorkHandle start_reduce_scatter(const at::Tensor& input, at::Tensor& output, dist::ReduceOp op) override {
    const std::string what = log_.started("RS");
    return std::make_unique<Logged>(inner_->start_reduce_scatter(input, output, op), log_, what);
  }
  dist::WorkHandle start_all_reduce(at::Tensor& tensor, dist::ReduceOp op) override {
    const std::string what = log_.started("AR");
    return std::make_unique<Logged>(inner_->start_all_reduce(tensor, op), log_, what);
  }
  void broadcast(at::Tensor& tensor, int root) override { inner_->broadcast(tensor, root); }
  void gather(const at::Tensor& input, at::Tensor& output, int root) override { inner_->gather(input, output, root); }
  void barrier() override { inner_->barrier(); }

 private:
  struct Logged final : dist::Work {
    Logged(dist::WorkHandle inner, ScheduleLog& log, std::string what)
        : inner(std::move(inner)), log(log), what(std::move(what)) {}
    void wait() override {
      log.entries.push_back("wait " + what);
      inner->wait();
    }
    dist::WorkHandle inner;
    ScheduleLog& log;
    std::string what;
  };

  std::shared_ptr<dist::Communicator> inner_;
  ScheduleLog& log_;
};

// The schedule of one step (forward, backward, the reductions' end) of units 0..n-1, one flat
// parameter each: the embedding, the blocks, the head. `hsdp`: gradients are also averaged
// across replicas.
std::vector<std::string> expected_schedule(int n, bool hsdp) {
  std::vector<std::string> s;
  auto add = [&](const std::string& e) { s.push_back(e); };
  auto at = [](const char* what, int unit) { return std::string(what) + " " + std::to_string(unit); };
  // Forward: each unit waits for its gather and issues the next unit's before it computes.
  add(at("AG", 0));
  for (int u = 0; u < n; ++u) {
    add(at("wait AG", u));
    if (u + 1 < n) add(at("AG", u + 1));
  }
  // Backward, in reverse. The head stays gathered from its forward. A unit issues the previous
  // unit's gather before it computes, so that gather is queued behind no reduce-scatter issued
  // after this unit's compute; it issues its own reduce-scatter once its gradients exist, and
  // only then waits for the reduce-scatter of the unit before it in backward, which has had this
  // unit's compute to run in. Under HSDP that reduce-scatter's result goes on to the replicas'
  // all-reduce, waited for one unit later. The embedding's backward reads no weight: it is
  // neither gathered nor prefetched.
  for (int u = n - 1; u >= 0; --u) {
    if (u != n - 1 && u != 0) add(at("wait AG", u));
    if (u - 1 >= 1) add(at("AG", u - 1));
    add(at("RS", u));
    if (hsdp && u + 2 < n) add(at("wait AR", u + 2));
    if (u + 1 < n) add(at("wait RS", u + 1));
    if (hsdp && u + 1 < n) add(at("AR", u + 1));
  }
  // What is still in flight when backward ends.
  if (hsdp) add(at("wait AR", 1));
  add(at("wait RS", 0));
  if (hsdp) {
    add(at("AR", 0));
    add(at("wait AR", 0));
  }
  return s;
}

std::string joined(const std::vector<std::string>& log) {
  std::string out;
  for (const std::string& e : log) out += e + "\n";
  return out;
}

struct ScheduleCase {
  job::ShardingStrategy strategy;
  int hsdp_shard;
  bool checkpointing;
};

void check_schedule(const ScheduleCase& c) {
  job::Job job;
  job.slurm.nodes = 1;
  job.slurm.ntasks_per_node = world_size();
  job.fsdp.sharding_strategy = c.strategy;
  job.fsdp.hsdp_shard_size = c.hsdp_shard;
  job.fsdp.activation_checkpointing = c.checkpointing;
  const fsdp::FsdpOptions options =
      fsdp::fsdp_options(job.fsdp, job.train, world_size(), world_size(), testing_support::test_device());
  ASSERT_TRUE(options.overlap);
  dist::ProcessGroups groups = testing_support::make_test_groups(options.shard_size);
  ScheduleLog log;
  groups.shard = std::make_shared<Recording>(groups.shard, log);
  groups.replicate = std::make_shared<Recording>(groups.replicate, log);
  model::LlamaConfig config = model::LlamaConfig::tiny();
  config.tie_word_embeddings = false;  // a tied head would gather the embedding's flat for itself
  model::LlamaForCausalLM m(config, at::TensorOptions().dtype(at::kFloat));
  model::init_weights(m, 3);
  fsdp::FsdpLlama sharded(m, groups, options);
  const std::vector<fsdp::FlatParam*> flats = sharded.flat_params();
  ASSERT_EQ(static_cast<int64_t>(flats.size()), m.num_layers() + 2);  // one per unit
  log.watch(flats);
  const at::Tensor ids = at::arange(32, at::kLong).remainder(29).reshape({2, 16});
  sharded.forward_loss(ids, at::Tensor(), ids).backward();
  const bool hsdp = groups.replicate->size() > 1;
  EXPECT_EQ(joined(log.entries), joined(expected_schedule(static_cast<int>(flats.size()), hsdp)));
}

TEST(FsdpSchedule, FullShardIssuesEachGatherBeforeTheReductionsItWouldQueueBehind) {
  if (world_size() < 2) GTEST_SKIP() << "one rank issues no collectives";
  for (const bool checkpointing : {false, true}) {
    SCOPED_TRACE(testing::Message() << "checkpointing " << checkpointing);
    check_schedule({job::ShardingStrategy::kFullShard, 0, checkpointing});
  }
}

TEST(FsdpSchedule, HybridShardAveragesAcrossReplicasOneUnitBehind) {
  if (world_size() < 4 || world_size() % 2 != 0) GTEST_SKIP() << "needs two shard groups of two or more";
  check_schedule({job::ShardingStrategy::kHybridShard, world_size() / 2, false});
}

}  // namespace
}  // namespace shardtune
