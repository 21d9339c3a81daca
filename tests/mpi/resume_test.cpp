// Resuming a job's checkpoints (checkpoint/resume.h) over real sharded checkpoints: the candidates
// and their order, the fallback past damaged ones newest first (set aside, never deleted), the
// explicit path that never falls back, the refusal of a checkpoint of other data and its new
// schedule, and adapters that do not fit. Every rank reaches the same outcome.
#include <ATen/ops/equal.h>
#include <ATen/ops/full_like.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/commit.h"
#include "checkpoint/resume.h"
#include "checkpoint/sharded_checkpoint.h"
#include "common/error.h"
#include "runtime/fsdp/adamw.h"
#include "runtime/fsdp/fsdp_options.h"
#include "runtime/train/train_step.h"
#include "tests/mpi/test_device.h"

namespace shardtune {
namespace {

namespace fs = std::filesystem;
using testing_support::world_rank;
using testing_support::world_size;

// A fresh folder every rank agrees on, made by rank 0.
std::string shared_dir(const std::string& name) { return testing_support::shared_temp_dir("resume_" + name); }

data::DataIdentity identity(const std::string& tokens) {
  data::DataIdentity d;
  d.decides["training tokens"] = tokens;
  d.decides["train.seed"] = "42";
  return d;
}

// A tiny sharded model on the CPU whose every weight is set to one value before each save, so a
// load says which step it read.
class ResumeTest : public testing::Test {
 protected:
  ResumeTest()
      : groups_(dist::make_mpi_groups(MPI_COMM_WORLD, world_size(), 60.0)),
        skeleton_(model::LlamaConfig::tiny(), at::TensorOptions().device(at::kMeta)),
        model_(skeleton_, groups_, options()),
        optimizer_({}) {
    train::add_trainable_shards(model_, optimizer_);
    root_ = shared_dir(testing::UnitTest::GetInstance()->current_test_info()->name());
    request_.checkpoint.dir = root_;
    request_.data = identity("A");
  }
  ~ResumeTest() override {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) fs::remove_all(root_);
  }

  static fsdp::FsdpOptions options() {
    job::Job job;
    job.slurm.ntasks_per_node = world_size();
    job.train.mixed_precision = false;
    return fsdp::fsdp_options(job.fsdp, job.train, world_size(), world_size());
  }

  // Commits step `step` with every weight equal to `step`.
  std::string save(int64_t step) {
    for (fsdp::FlatParam* f : model_.flat_params()) f->shard().fill_(static_cast<double>(step));
    checkpoint::TrainingState state;
    state.step = step;
    state.epoch = 1;
    state.sample_in_epoch = 8 * step;
    state.reference_batch = 8;
    state.data = identity("A");
    return checkpoint::save_checkpoint(model_, &optimizer_, state, groups_, {root_, 10});
  }

  // Rank 0 cuts a file of the checkpoint in half; every rank then sees it damaged.
  void damage(const std::string& dir) {
    if (world_rank() == 0) {
      for (const fs::directory_entry& e : fs::directory_iterator(dir))
        if (e.path().extension() == ".h5") fs::resize_file(e.path(), fs::file_size(e.path()) / 2);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }

  // The value every weight holds, or NaN when they differ.
  double weights() {
    double value = std::nan("");
    bool first = true;
    for (const auto& [name, t] : model_.gather_full_parameters()) {
      const double v = t.flatten()[0].item<double>();
      if (!at::equal(t, at::full_like(t, v))) return std::nan("");
      if (!first && v != value) return std::nan("");
      value = v;
      first = false;
    }
    return value;
  }

  std::vector<std::string> set_aside() const {
    std::vector<std::string> out;
    for (const fs::directory_entry& e : fs::directory_iterator(root_))
      if (e.path().filename().string().find(".damaged-") != std::string::npos) out.push_back(e.path().filename());
    std::sort(out.begin(), out.end());
    return out;
  }

  std::optional<checkpoint::TrainingState> resume() {
    return checkpoint::resume(request_, model_, optimizer_, *groups_.world);
  }

  dist::ProcessGroups groups_;
  model::LlamaForCausalLM skeleton_;
  fsdp::FsdpLlama model_;
  fsdp::AdamW optimizer_;
  std::string root_;
  checkpoint::ResumeRequest request_;
};

TEST_F(ResumeTest, CandidatesAreTheJobsOwnNewestFirstOrTheNamedPathOnItsFirstStartOnly) {
  EXPECT_TRUE(checkpoint::resume_candidates(request_.checkpoint, 0).empty());
  const std::string one = save(1), two = save(2);
  if (world_rank() == 0) fs::create_directories(root_ + "/step-0000009");  // no manifest: never a candidate
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(checkpoint::resume_candidates(request_.checkpoint, 0), (std::vector<std::string>{two, one}));
  EXPECT_TRUE(checkpoint::will_resume(request_.checkpoint, *groups_.world, 0));
  // resume = "none" or a path is where the run's first start begins; a requeue resumes what the run
  // committed since, and while it has nothing starts as the first start did: never from the start
  // over again once it has saved, never from an older run's checkpoint.
  job::CheckpointSection c = request_.checkpoint;
  c.resume = "none";
  EXPECT_FALSE(checkpoint::will_resume(c, *groups_.world, 0));  // the first start (rank 0 records it)
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_TRUE(checkpoint::resume_candidates(c, 3).empty());  // requeued before its first save
  const std::string three = save(3);
  EXPECT_EQ(checkpoint::resume_candidates(c, 3), std::vector<std::string>{three});
  MPI_Barrier(MPI_COMM_WORLD);
  c.resume = "/elsewhere/step-0000100";
  EXPECT_TRUE(checkpoint::will_resume(c, *groups_.world, 0));
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(checkpoint::resume_candidates(c, 1), std::vector<std::string>{c.resume});
  const std::string four = save(4);
  EXPECT_EQ(checkpoint::resume_candidates(c, 1), std::vector<std::string>{four});  // a requeue: its own
}

TEST_F(ResumeTest, ADamagedNewestFallsBackToTheNextOlderAndIsSetAsideNotDeleted) {
  save(1);
  save(2);
  const std::string three = save(3);
  damage(three);
  const std::optional<checkpoint::TrainingState> s = resume();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->step, 2);
  EXPECT_EQ(s->sample_in_epoch, 16);
  EXPECT_EQ(weights(), 2.0);
  MPI_Barrier(MPI_COMM_WORLD);
  const std::vector<std::string> aside = set_aside();
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_EQ(aside[0].rfind("step-0000003.damaged-", 0), 0u) << aside[0];
  EXPECT_EQ(checkpoint::committed_checkpoints(root_).size(), 2u);  // steps 2 and 1, untouched
}

TEST_F(ResumeTest, WhenNoneLoadsNothingIsTouchedAndEachIsNamed) {
  const std::string one = save(1), two = save(2);
  damage(one);
  damage(two);
  try {
    resume();
    FAIL() << "resumed a damaged checkpoint";
  } catch (const common::Error& e) {
    EXPECT_EQ(e.kind(), common::ErrorKind::kIo);
    const std::string what = e.what();
    EXPECT_NE(what.find("none of the 2 checkpoint(s)"), std::string::npos) << what;
    EXPECT_NE(what.find(one + ":"), std::string::npos) << what;
    EXPECT_NE(what.find(two + ":"), std::string::npos) << what;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_TRUE(set_aside().empty());
  EXPECT_TRUE(fs::exists(one) && fs::exists(two));
}

TEST_F(ResumeTest, ANamedCheckpointIsLoadedOrTheStartFailsWithoutFallingBack) {
  const std::string one = save(1), two = save(2);
  request_.checkpoint.resume = one;
  ASSERT_TRUE(resume().has_value());
  EXPECT_EQ(weights(), 1.0);
  damage(one);
  EXPECT_THROW(resume(), common::Error);
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_TRUE(set_aside().empty());
  // A requeued start takes the run's own newest instead: one it committed after its first start
  // (step 2 was there before).
  save(3);
  request_.restart_count = 1;
  const std::optional<checkpoint::TrainingState> s = resume();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->step, 3);
}

TEST_F(ResumeTest, OtherDataIsRefusedWithoutFallingBackOrStartsANewSchedule) {
  save(1);
  save(2);
  request_.data = identity("B");
  try {
    resume();
    FAIL() << "resumed a checkpoint of other data";
  } catch (const common::Error& e) {
    EXPECT_EQ(e.kind(), common::ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("training tokens: A in the checkpoint, B now"), std::string::npos) << e.what();
  }
  request_.checkpoint.on_data_change = job::OnDataChange::kNewSchedule;
  const std::optional<checkpoint::TrainingState> s = resume();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(weights(), 2.0);  // the newest one's weights
  EXPECT_EQ(s->step, 0);      // from the first sample of this data
  EXPECT_EQ(s->epoch, 0);
  EXPECT_EQ(s->sample_in_epoch, 0);
  EXPECT_EQ(s->reference_batch, 0);
}

TEST(AdapterMismatches, EachDifferenceIsNamedAndTheSameAdaptersHaveNone) {
  checkpoint::AdapterRecord a;
  a.r = 8;
  a.alpha = 16;
  a.target_modules = {"q_proj", "v_proj"};
  a.base_config_sha256 = "c";
  a.base_tensors_sha256 = "t";
  checkpoint::AdapterRecord b = a;
  b.target_modules = {"v_proj", "q_proj"};  // order does not matter
  EXPECT_TRUE(checkpoint::adapter_mismatches(a, b).empty());
  b.r = 16;
  b.alpha = 32;
  b.method = "qlora";
  const std::vector<std::string> m = checkpoint::adapter_mismatches(a, b);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_NE(m[0].find("unquantised base (lora), this job has an NF4 base"), std::string::npos) << m[0];
  EXPECT_NE(m[1].find("its LoRA rank is 8, [peft] lora_r is 16"), std::string::npos) << m[1];
  EXPECT_NE(m[2].find("its lora_alpha is 16, [peft] lora_alpha is 32"), std::string::npos) << m[2];
}

}  // namespace
}  // namespace shardtune
