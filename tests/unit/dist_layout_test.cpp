// Pure distributed arithmetic, exhaustively: HSDP group layout, the choice of GPU and of CPU threads.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "common/error.h"
#include "runtime/dist/cpu_threads.h"
#include "runtime/dist/gpu_sharing.h"
#include "runtime/dist/group_layout.h"
#include "runtime/dist/topology.h"

namespace shardtune::dist {
namespace {

TEST(GroupLayout, EveryDivisorOfEveryWorldUpTo64) {
  for (int world = 1; world <= 64; ++world) {
    for (int shard = 1; shard <= world; ++shard) {
      if (world % shard != 0) {
        EXPECT_THROW(GroupLayout(world, shard), common::Error) << world << "/" << shard;
        continue;
      }
      const GroupLayout layout(world, shard);
      ASSERT_EQ(layout.num_shard_groups() * layout.shard_size(), world);
      std::set<std::pair<int, int>> seen;  // (shard group, replicate group) is unique per rank
      for (int rank = 0; rank < world; ++rank) {
        const int g = layout.shard_group_of(rank), r = layout.replicate_group_of(rank);
        EXPECT_TRUE(seen.insert({g, r}).second);
        const auto shard_members = layout.shard_group_members(g);
        const auto replicate_members = layout.replicate_group_members(r);
        ASSERT_EQ(static_cast<int>(shard_members.size()), shard);
        ASSERT_EQ(static_cast<int>(replicate_members.size()), world / shard);
        // A rank sits at its own group rank in both member lists.
        EXPECT_EQ(shard_members[layout.rank_in_shard_group(rank)], rank);
        EXPECT_EQ(replicate_members[layout.rank_in_replicate_group(rank)], rank);
        // Shard groups are consecutive ranks (one node's ranks when shard = ranks per node).
        EXPECT_EQ(shard_members.front(), g * shard);
        EXPECT_EQ(shard_members.back(), g * shard + shard - 1);
        // Replicate-group members hold the same shard index.
        for (int m : replicate_members) EXPECT_EQ(layout.rank_in_shard_group(m), layout.rank_in_shard_group(rank));
      }
    }
  }
}

TEST(GroupLayout, RejectsNonsense) {
  EXPECT_THROW(GroupLayout(0, 1), common::Error);
  EXPECT_THROW(GroupLayout(4, 0), common::Error);
  try {
    GroupLayout(8, 3);
    FAIL();
  } catch (const common::Error& e) {
    EXPECT_NE(std::string(e.what()).find("shard group 3 vs world 8"), std::string::npos) << e.what();
  }
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const common::Error& e) {
    EXPECT_EQ(e.kind(), common::ErrorKind::kConfig);
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

// Ranks that share a GPU get collectives staged through host memory only when asked; otherwise the
// job stops before training, naming what would allow it.
TEST(DeviceCollectives, SharedGpusOnlyWhenAsked) {
  EXPECT_EQ(device_collectives_for(false, false, false), DeviceCollectives::kNone);
  EXPECT_EQ(device_collectives_for(true, true, false), DeviceCollectives::kNccl);
  EXPECT_EQ(device_collectives_for(true, true, true), DeviceCollectives::kNccl);
  EXPECT_EQ(device_collectives_for(true, false, true), DeviceCollectives::kHostStaged);
  try {
    device_collectives_for(true, false, false);
    FAIL() << "ranks sharing a GPU were given host-staged collectives unasked";
  } catch (const common::Error& e) {
    EXPECT_EQ(e.kind(), common::ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("SHARDTUNE_SHARE_GPUS=1"), std::string::npos) << e.what();
  }
}

TEST(ChooseDevice, CpuSingleGpuPerTaskAndOnePerLocalRank) {
  constexpr auto kAuto = DeviceRequest::kAuto, kCuda = DeviceRequest::kCuda;
  EXPECT_EQ(choose_device(kAuto, 3, 4, 0, true).device, -1);
  EXPECT_EQ(choose_device(kAuto, 3, 4, 1, true).device, 0);  // srun --gpus-per-task: each task sees device 0
  for (int local = 0; local < 8; ++local) {
    EXPECT_EQ(choose_device(kCuda, local, 8, 8, true).device, local);
    EXPECT_EQ(choose_device(kAuto, local, 8, 16, true).device, local);
  }
  EXPECT_NE(error_of([] { choose_device(kAuto, 0, 8, 4, true); }).find("8 ranks run on this node but only 4 GPUs"),
            std::string::npos);
}

TEST(ChooseDevice, CpuWhenAskedWhateverIsVisible) {
  for (int gpus : {0, 1, 8}) EXPECT_EQ(choose_device(DeviceRequest::kCpu, 2, 8, gpus, gpus % 2 == 0).device, -1);
}

TEST(ChooseDevice, AskingForCudaWithoutAGpuIsAnErrorNotACpuRun) {
  const std::string none = error_of([] { choose_device(DeviceRequest::kCuda, 0, 1, 0, true); });
  EXPECT_NE(none.find("device = \"cuda\" but this rank sees no GPU"), std::string::npos) << none;
  // A GPU this build cannot use: an error under cuda and under auto, never a silent CPU run.
  for (DeviceRequest r : {DeviceRequest::kCuda, DeviceRequest::kAuto}) {
    const std::string cpu_build = error_of([r] { choose_device(r, 0, 1, 2, false); });
    EXPECT_NE(cpu_build.find("built with a LibTorch without CUDA"), std::string::npos) << cpu_build;
  }
}

// mpirun inside a Slurm allocation: every rank inherits SLURM_LOCALID=0 from the step that started
// mpirun's daemon, so mpirun's own numbering comes first.
TEST(LauncherLocalRank, OpenMpiThenSlurmThenMpisOwnSplit) {
  std::map<std::string, std::string> env;
  auto get = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  EXPECT_EQ(launcher_local_rank(5, get), 5);
  env["SLURM_LOCALID"] = "3";
  EXPECT_EQ(launcher_local_rank(5, get), 3);
  env["OMPI_COMM_WORLD_LOCAL_RANK"] = "2";
  EXPECT_EQ(launcher_local_rank(5, get), 2);
  env["OMPI_COMM_WORLD_LOCAL_RANK"] = "x";  // not a number: the next source
  EXPECT_EQ(launcher_local_rank(5, get), 3);
}

}  // namespace
}  // namespace shardtune::dist

namespace shardtune::dist {
namespace {

// Every combination of the inputs: the order of precedence, at least one thread, and the node's
// ranks together never asking for more threads than its cores (or one each) unless told to.
TEST(CpuThreads, ChoiceFollowsPrecedenceAndSharesTheNode) {
  for (int64_t key : {0, 3}) {
    for (std::optional<int64_t> omp : {std::optional<int64_t>(), std::optional<int64_t>(5)}) {
      for (std::optional<int64_t> slurm : {std::optional<int64_t>(), std::optional<int64_t>(1),
                                           std::optional<int64_t>(8)}) {
        for (int cores : {1, 2, 7, 64}) {
          for (int ranks : {1, 2, 3, 8, 128}) {
            for (int affinity : {0, 1, 4, 64}) {
              const ThreadInputs in{key, omp, slurm, cores, ranks, affinity};
              const ThreadChoice c = choose_threads(in);
              SCOPED_TRACE(c.reason);
              ASSERT_GE(c.threads, 1);
              if (key > 0) {
                EXPECT_EQ(c.threads, key);
              } else if (omp) {
                EXPECT_EQ(c.threads, *omp);
              } else if (slurm) {
                EXPECT_EQ(c.threads, affinity > 0 ? std::min<int64_t>(*slurm, affinity) : *slurm);
              } else {
                EXPECT_LE(c.threads * ranks, std::max(cores, ranks));
                EXPECT_EQ(c.threads, std::min(std::max(1, cores / ranks), affinity > 0 ? affinity : cores));
              }
              if (key == 0 && !omp && affinity > 0) {
                EXPECT_LE(c.threads, affinity);
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(choose_threads({0, {}, {}, 16, 4, 0}).reason, "16 core(s) / 4 rank(s) on this node");
  EXPECT_EQ(choose_threads({0, {}, 12, 16, 4, 12}).reason, "Slurm's cpus_per_task = 12, bound to 12 CPU(s)");
}

TEST(CpuThreads, AppliedToLibTorchAndTheBlas) {
  use_threads(1);
  EXPECT_EQ(at::get_num_threads(), 1);
  use_threads(2);
  EXPECT_EQ(at::get_num_threads(), 2);
  // OpenBLAS reports its own count; other BLAS libraries are named by their path.
  const std::string blas = blas_description();
  if (blas.rfind("OpenBLAS", 0) == 0) {
    EXPECT_NE(blas.find("2 thread(s)"), std::string::npos) << blas;
  }
  EXPECT_GE(physical_cores(), 1);
}

}  // namespace
}  // namespace shardtune::dist
