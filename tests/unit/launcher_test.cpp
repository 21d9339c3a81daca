// The local launcher: the exact mpirun argv, and atomic writes of the resolved job.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/job/job_loader.h"
#include "common/file_io.h"
#include "launcher/local_run.h"

namespace shardtune::launcher {
namespace {

TEST(LocalRun, MpirunArgvIsExactAndNeverAShellLine) {
  job::Job job;
  job.slurm.nodes = 1;
  job.slurm.ntasks_per_node = 3;
  job.launch.extra_mpirun_options = {"--mca", "btl", "self,vader,tcp"};
  const auto argv = local_mpirun_argv(job, {"/opt/st/shardtune-rank", "runs/x y/job.toml", true});
  const std::vector<std::string> expected = {
      "mpirun", "-np", "3", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--stdin", "none",
      "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo",
      "--mca", "btl", "self,vader,tcp", "/opt/st/shardtune-rank", "runs/x y/job.toml"};
  EXPECT_EQ(argv, expected);
}

TEST(LocalRun, RanksOverrideMakesAOneNodeJob) {
  const std::string text = "[job]\nname = \"t\"\n[model]\npreset = \"tiny\"\ninit = \"random\"\n"
                           "[slurm]\nnodes = 2\ngpus_per_node = 8\n";
  const job::LoadedJob loaded = job::parse_job(text, "job.toml", local_run_overrides(5));
  ASSERT_FALSE(loaded.diagnostics.has_errors()) << loaded.diagnostics.to_string();
  EXPECT_EQ(loaded.job.slurm.world_size(), 5);
  EXPECT_EQ(loaded.job.slurm.nodes, 1);
}

TEST(LocalRun, AtomicWriteReplacesWholeFilesAndReportsFailures) {
  const auto dir = std::filesystem::temp_directory_path() / "shardtune_launcher_test";
  std::filesystem::remove_all(dir);
  const std::string path = (dir / "sub" / "job.toml").string();
  common::write_file_atomically(path, "first\n");
  common::write_file_atomically(path, "second\n");
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "second");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_THROW(common::write_file_atomically("/proc/version/job.toml", "x"), common::Error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace shardtune::launcher
