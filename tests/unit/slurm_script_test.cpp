// The sbatch script as a pure function of the job, shell quoting checked by a real bash, the
// placement checks, and scontrol's output parsed.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "common/error.h"
#include "common/job/job_loader.h"
#include "common/malloc_pages.h"
#include "common/shell_words.h"
#include "common/subprocess.h"
#include "slurm/job_state.h"
#include "slurm/sbatch_script.h"
#include "slurm/slurm_env.h"

namespace shardtune::slurm {
namespace {

job::Job load(const std::string& extra) {
  const std::string text = "[job]\nname = \"t\"\noutput_dir = \"/scratch/runs/t\"\n[model]\npreset = \"tiny\"\n"
                           "init = \"random\"\n" + extra;
  const job::LoadedJob loaded = job::parse_job(text, "job.toml", {});
  EXPECT_FALSE(loaded.diagnostics.has_errors()) << loaded.diagnostics.to_string();
  return loaded.job;
}

const ScriptPaths kPaths{"/opt/st/bin/shardtune-rank", "/scratch/runs/t/job.toml", "/opt/st/bin/shardtune"};

TEST(SbatchScript, OptionsComeFromTheSlurmSectionInOrder) {
  const job::Job job = load(
      "[slurm]\nnodes = 4\ngpus_per_node = 8\ncpus_per_task = 12\npartition = \"gpu\"\naccount = \"proj-1\"\n"
      "qos = \"high\"\ntime = \"2-00:00:00\"\nconstraint = \"h100&ib\"\nexclusive = true\nmail_user = \"a@b.org\"\n"
      "mail_type = \"END,FAIL\"\nsignal_lead_s = 600\nextra_sbatch_options = [\"--reservation=big\"]\n");
  const std::vector<std::string> expected = {
      "--job-name=t", "--nodes=4", "--ntasks-per-node=8", "--cpus-per-task=12", "--gpus-per-node=8",
      "--time=2-00:00:00", "--partition=gpu", "--account=proj-1", "--qos=high", "--constraint=h100&ib",
      "--mail-user=a@b.org", "--mail-type=END,FAIL", "--exclusive", "--signal=B:USR1@600", "--requeue",
      "--open-mode=append", "--output=/scratch/runs/t/slurm-%j.out", "--error=/scratch/runs/t/slurm-%j.out",
      "--reservation=big"};
  EXPECT_EQ(sbatch_options(job), expected);
  EXPECT_EQ(sbatch_argv("/scratch/runs/t/shardtune.sbatch"),
            (std::vector<std::string>{"sbatch", "--parsable", "/scratch/runs/t/shardtune.sbatch"}));
}

// The words the script's `ranks` array holds once bash expands it in an allocation of `nodes`
// nodes (SLURM_JOB_NUM_NODES), one per line.
std::vector<std::string> rank_words(const std::string& script, int nodes) {
  const size_t begin = script.find("\nranks=(");
  const size_t end = script.find('\n', begin + 1);
  const std::string program = fmt::format("SLURM_JOB_NUM_NODES={}\n{}\n{}\nprintf '%s\\n' \"${{ranks[@]}}\"", nodes,
                                          script.substr(script.find("readonly NODES="),
                                                        script.find('\n', script.find("readonly NODES=")) -
                                                            script.find("readonly NODES=")),
                                          script.substr(begin + 1, end - begin - 1));
  const common::CommandResult r = common::run_command({"bash", "-c", program});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> words;
  for (size_t at = 0; at < r.out.size();) {
    const size_t nl = r.out.find('\n', at);
    words.push_back(r.out.substr(at, nl - at));
    at = nl + 1;
  }
  return words;
}

TEST(SbatchScript, IsAPureFunctionOfTheJob) {
  const job::Job job = load("[slurm]\nnodes = 2\nntasks_per_node = 2\n");
  EXPECT_EQ(sbatch_script(job, kPaths), sbatch_script(job, kPaths));
  const std::string script = sbatch_script(job, kPaths);
  EXPECT_EQ(script.rfind("#!/bin/bash\n", 0), 0u);
  EXPECT_NE(script.find("export SRUN_CPUS_PER_TASK=1\n"), std::string::npos);
  EXPECT_NE(script.find("readonly REQUEUE_EXIT=75\n"), std::string::npos);
  EXPECT_NE(script.find("readonly DIVERGED_EXIT=3\n"), std::string::npos);
  EXPECT_NE(script.find("readonly MAX_REQUEUES=3\n"), std::string::npos);
  EXPECT_EQ(rank_words(script, 2),
            (std::vector<std::string>{"srun", "--mpi=pmix", "--kill-on-bad-exit=1", "--nodes=2", "--ntasks-per-node=2",
                                      "--ntasks=4", "/opt/st/bin/shardtune-rank", "/scratch/runs/t/job.toml"}));
  EXPECT_NE(script.find("scontrol requeue \"$SLURM_JOB_ID\""), std::string::npos);
}

// The batch script and `shardtune run` start the ranks with the same GLIBC_TUNABLES: huge pages
// for malloc added to what the environment has, and never over a value the environment set.
TEST(SbatchScript, StartsRanksWithHugePageMallocUnlessTheEnvironmentDecides) {
  const std::string script = sbatch_script(load("[slurm]\nnodes = 2\n"), kPaths);
  const size_t begin = script.find("case \":${GLIBC_TUNABLES:-}\" in");
  ASSERT_NE(begin, std::string::npos);
  const std::string block = script.substr(begin, script.find("esac\n", begin) + 5 - begin);
  const std::vector<std::pair<const char*, std::string>> cases = {
      {nullptr, "glibc.malloc.hugetlb=1"},
      {"", "glibc.malloc.hugetlb=1"},
      {"glibc.malloc.arena_max=2", "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"},
      {"glibc.malloc.hugetlb=0", "glibc.malloc.hugetlb=0"},
      {"glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2", "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2"},
      {"x.glibc.malloc.hugetlb=0", "x.glibc.malloc.hugetlb=0:glibc.malloc.hugetlb=1"},
  };
  for (const auto& [before, after] : cases) {
    const std::string env = before ? fmt::format("export GLIBC_TUNABLES={}\n", common::shell_quote(before))
                                   : std::string("unset GLIBC_TUNABLES\n");
    const common::CommandResult r =
        common::run_command({"bash", "-c", env + block + "\nprintf %s \"$GLIBC_TUNABLES\""});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, after) << (before ? before : "(unset)");
    EXPECT_EQ(common::tunables_with_huge_pages(before ? before : ""), after) << (before ? before : "(unset)");
  }
}

TEST(MallocPages, TheRankLogSaysWhatItsMallocWasStartedWith) {
  EXPECT_EQ(common::malloc_pages_description("glibc.malloc.hugetlb=1", "madvise"),
            "huge pages asked for (glibc.malloc.hugetlb=1); the kernel's transparent huge pages: madvise");
  EXPECT_EQ(common::malloc_pages_description("glibc.malloc.hugetlb=1:glibc.malloc.hugetlb=0", ""),
            "4 KiB pages: glibc.malloc.hugetlb=0 from the environment");
  EXPECT_EQ(common::malloc_pages_description(nullptr, "never"),
            "4 KiB pages: GLIBC_TUNABLES does not set glibc.malloc.hugetlb (shardtune run and shardtune submit set it "
            "to 1); the kernel's transparent huge pages are off (never), so its pages stay 4 KiB");
}

// Bash 5.2 drops a trapped signal that arrives while it expands a $(...) command substitution, so
// the script's own code uses none (the stop signal itself is exercised by tests/cli/batch_signal_test.sh).
TEST(SbatchScript, RunsNoDollarParenCommandSubstitution) {
  const std::string script = sbatch_script(load("[slurm]\nnodes = 2\n"), kPaths);
  size_t line_no = 0;
  for (size_t at = 0; at < script.size();) {
    const size_t nl = std::min(script.find('\n', at), script.size());
    const std::string line = script.substr(at, nl - at);
    ++line_no;
    at = nl + 1;
    if (line.find_first_not_of(' ') != std::string::npos && line[line.find_first_not_of(' ')] == '#') continue;
    for (size_t p = line.find("$("); p != std::string::npos; p = line.find("$(", p + 2)) {
      EXPECT_EQ(line.compare(p, 3, "$(("), 0) << "line " << line_no << ": " << line;
    }
  }
}

// What the script's lost_nodes says for an allocation of n1 and n2, with scontrol and srun on PATH
// answering as `slurm` describes: each node's state before the probes and after them (Slurm may
// mark a node down and end the job while the probes run), and each probe's exit code.
struct FakeSlurm {
  std::string before[2], after[2];
  int probe_exit[2] = {0, 0};
};
struct LostNodes {
  std::string lost;
  bool probed = false;
};
LostNodes lost_nodes(const std::string& script, const FakeSlurm& slurm) {
  const size_t begin = std::min(script.find("slurm_down() {"), script.find("lost_nodes() {"));  // and its helper
  const size_t end = script.find("\n}\n", script.find("lost_nodes() {"));
  EXPECT_NE(begin, std::string::npos);
  EXPECT_NE(end, std::string::npos);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / fmt::format("st-lost-{}", ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) { std::ofstream(dir / name) << text; };
  write("scontrol",
        "#!/bin/bash\nd=${0%/*}\n"
        "case \"$1 $2\" in\n"
        "  'show hostnames') printf 'n1\\nn2\\n' ;;\n"
        "  'show node') f=$d/before-$4; [[ -e $d/probed ]] && f=$d/after-$4\n"
        "    printf 'NodeName=%s Arch=x86_64 State=%s Partitions=p\\n' \"$4\" \"$(<\"$f\")\" ;;\n"
        "esac\n");
  write("srun",
        "#!/bin/bash\nd=${0%/*}\nfor a; do [[ $a == --nodelist=* ]] && n=${a#--nodelist=}; done\n"
        "touch \"$d/probed\"\nexit \"$(<\"$d/probe-$n\")\"\n");
  for (const char* stub : {"scontrol", "srun"})
    std::filesystem::permissions(dir / stub, std::filesystem::perms::owner_all);
  for (int i = 0; i < 2; ++i) {
    const std::string node = fmt::format("n{}", i + 1);
    write("before-" + node, slurm.before[i]);
    write("after-" + node, slurm.after[i]);
    write("probe-" + node, std::to_string(slurm.probe_exit[i]));
  }
  const std::string program = fmt::format("export PATH={}:$PATH SLURM_JOB_NODELIST='n[1-2]'\n{}\nlost_nodes",
                                          common::shell_quote(dir.string()), script.substr(begin, end + 3 - begin));
  const common::CommandResult r = common::run_command({"bash", "-c", program});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  LostNodes out{r.out.substr(0, r.out.find('\n')), std::filesystem::exists(dir / "probed")};
  std::filesystem::remove_all(dir);
  return out;
}

// A lost node is what Slurm reports down; probes (a trivial srun on each node) decide only when
// Slurm reports none. When Slurm finds the node down while the probes run, it ends the job for it
// and every probe fails, the healthy node's too: Slurm's word must still win, or the job would be
// submitted again without any node.
TEST(SbatchScript, ALostNodeIsTheNodeSlurmReportsDownWhateverTheProbesSay) {
  const std::string script = sbatch_script(load("[slurm]\nnodes = 2\nmin_nodes = 1\n"), kPaths);
  const auto lost = [&](const FakeSlurm& s) { return lost_nodes(script, s); };
  // Slurm marks n2 down while the probes run; every probe fails.
  LostNodes r = lost({{"ALLOCATED", "ALLOCATED"}, {"ALLOCATED", "DOWN+NOT_RESPONDING"}, {1, 1}});
  EXPECT_EQ(r.lost, "n2");
  EXPECT_TRUE(r.probed);
  // Slurm knows nothing: the probe that failed names the node.
  r = lost({{"ALLOCATED", "ALLOCATED"}, {"ALLOCATED", "ALLOCATED"}, {0, 124}});
  EXPECT_EQ(r.lost, "n2");
  // Slurm reports n2 down, or not responding (a '*' after the state): no probe runs.
  for (const char* state : {"DOWN", "ALLOCATED*", "IDLE+NOT_RESPONDING", "FAIL"}) {
    r = lost({{"ALLOCATED", state}, {"ALLOCATED", state}, {1, 1}});
    EXPECT_EQ(r.lost, "n2") << state;
    EXPECT_FALSE(r.probed) << state;
  }
  // Every node answers: nothing lost.
  r = lost({{"ALLOCATED", "MIXED"}, {"ALLOCATED", "MIXED"}, {0, 0}});
  EXPECT_EQ(r.lost, "");
  EXPECT_TRUE(r.probed);
}

// With min_nodes, sbatch may give fewer nodes, and the ranks start on the nodes given.
TEST(SbatchScript, AStartRunsOnTheNodesItGetsWithinMinNodes) {
  const job::Job job = load("[slurm]\nnodes = 4\nmin_nodes = 2\nntasks_per_node = 2\n");
  const std::vector<std::string> options = sbatch_options(job);
  EXPECT_EQ(options[1], "--nodes=2-4");
  const std::string script = sbatch_script(job, kPaths);
  for (int nodes : {2, 3, 4}) {
    const std::vector<std::string> words = rank_words(script, nodes);
    ASSERT_GE(words.size(), 6u);
    EXPECT_EQ(words[3], fmt::format("--nodes={}", nodes));
    EXPECT_EQ(words[5], fmt::format("--ntasks={}", 2 * nodes));
  }
  EXPECT_EQ(sbatch_options(load("[slurm]\nnodes = 4\nmin_nodes = 4\n"))[1], "--nodes=4");
}

TEST(SbatchScript, MpirunLaunchPlacesRanksPerNode) {
  const job::Job job = load("[slurm]\nnodes = 3\ngpus_per_node = 4\n[launch]\nlauncher = \"mpirun\"\n"
                            "extra_mpirun_options = [\"--mca\", \"btl_tcp_if_include\", \"ib0\"]\n");
  const std::string script = sbatch_script(job, kPaths);
  EXPECT_EQ(rank_words(script, 3),
            (std::vector<std::string>{"mpirun", "-np", "12", "--map-by", "ppr:4:node:PE=1", "--use-hwthread-cpus",
                                      "--bind-to", "hwthread", "--report-bindings", "--mca", "btl_tcp_if_include", "ib0",
                                      "/opt/st/bin/shardtune-rank", "/scratch/runs/t/job.toml"}));
  // Open MPI starts its daemons with an srun of its own, which must not be held to cpus_per_task.
  EXPECT_EQ(script.find("export SRUN_CPUS_PER_TASK"), std::string::npos);
  EXPECT_NE(script.find("unset SRUN_CPUS_PER_TASK"), std::string::npos);
}

// Each rank bound to cpus_per_task CPUs (hardware threads, as Slurm counts them) of its own (Open
// MPI alone binds 2 ranks to one core each, or more to a shared socket); the user's own mapping or
// binding replaces shardtune's.
TEST(SbatchScript, MpirunBindsEachRankToItsCpusPerTask) {
  const std::string base = "[slurm]\nnodes = 2\nntasks_per_node = 2\ncpus_per_task = 8\n[launch]\nlauncher = \"mpirun\"\n";
  EXPECT_EQ(rank_words(sbatch_script(load(base), kPaths), 2),
            (std::vector<std::string>{"mpirun", "-np", "4", "--map-by", "ppr:2:node:PE=8", "--use-hwthread-cpus",
                                      "--bind-to", "hwthread", "--report-bindings", "/opt/st/bin/shardtune-rank",
                                      "/scratch/runs/t/job.toml"}));
  EXPECT_EQ(rank_words(sbatch_script(load(base + "extra_mpirun_options = [\"--bind-to\", \"none\"]\n"), kPaths), 2),
            (std::vector<std::string>{"mpirun", "-np", "4", "--map-by", "ppr:2:node", "--bind-to", "none",
                                      "/opt/st/bin/shardtune-rank", "/scratch/runs/t/job.toml"}));
  EXPECT_EQ(rank_words(sbatch_script(load(base + "extra_mpirun_options = [\"--map-by\", \"slot:PE=4\"]\n"), kPaths), 2),
            (std::vector<std::string>{"mpirun", "-np", "4", "--map-by", "slot:PE=4", "/opt/st/bin/shardtune-rank",
                                      "/scratch/runs/t/job.toml"}));
  // srun takes cpus_per_task from the environment.
  EXPECT_NE(sbatch_script(load("[slurm]\ncpus_per_task = 8\n"), kPaths).find("export SRUN_CPUS_PER_TASK=8\n"),
            std::string::npos);
}

// Runs `script` through bash: -n (syntax) and, for the probe, the assignments only.
int bash_n(const std::string& script) {
  const auto path = std::filesystem::temp_directory_path() / "shardtune_script_test.sh";
  std::ofstream(path) << script;
  const common::CommandResult r = common::run_command({"bash", "-n", path.string()});
  std::filesystem::remove(path);
  return r.exit_code;
}

TEST(SbatchScript, PassesBashSyntaxCheckWithHostileButValidValues) {
  job::Job job = load("[slurm]\nnodes = 2\n");
  job.checkpoint.dir = "/x/it's \"a\" $(reboot) `reboot`; \\ dir";
  job.launch.extra_srun_options = {"--comment=a b", "$(reboot)", "'"};
  const std::string script = sbatch_script(job, kPaths);
  EXPECT_EQ(bash_n(script), 0);
  // The shell reads the checkpoint directory back exactly, without running anything.
  const std::string line = script.substr(script.find("readonly CHECKPOINT_DIR="));
  const std::string assignment = line.substr(0, line.find('\n'));
  const common::CommandResult r = common::run_command({"bash", "-c", assignment + "\nprintf %s \"$CHECKPOINT_DIR\""});
  EXPECT_EQ(r.out, job.checkpoint.dir);
}

TEST(SbatchScript, RefusesUnsafeValuesEvenIfTheSchemaMissedThem) {
  job::Job job = load("");
  job.slurm.partition = "gpu\n#SBATCH --wrap=evil";
  EXPECT_THROW(sbatch_script(job, kPaths), common::Error);
  job = load("");
  job.job.output_dir = "/scratch/my runs";
  EXPECT_THROW(sbatch_script(job, kPaths), common::Error);
  job = load("");
  job.job.output_dir = "runs/t";  // relative: the batch job's cwd is not the user's
  EXPECT_THROW(sbatch_script(job, kPaths), common::Error);
}

TEST(ShellWords, QuoteRoundTripsThroughBash) {
  for (const std::string s : {"", "plain", "it's", "a b", "$(x)", "`x`", "\\n", "'\"'", "\n\t", "ü€"}) {
    const common::CommandResult r = common::run_command({"bash", "-c", "printf %s " + common::shell_quote(s)});
    EXPECT_EQ(r.out, s);
  }
  EXPECT_THROW(common::shell_quote(std::string("a\0b", 3)), common::Error);
  EXPECT_TRUE(common::is_sbatch_word("--constraint=h100&ib"));
  for (const char* bad : {"", "a b", "a'b", "a\"b", "a\\b", "a#b", "a$b", "a`b", "a\nb", "\xc3\xbc"})
    EXPECT_FALSE(common::is_sbatch_word(bad)) << bad;
  EXPECT_FALSE(common::is_sbatch_path("/x/50%j"));
}

TEST(Command, RunsByArgvAndReportsExitCodes) {
  const common::CommandResult r = common::run_command({"sh", "-c", "printf out; printf err >&2; exit 3"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "out");
  EXPECT_EQ(r.err, "err");
  EXPECT_EQ(common::run_command({"printf", "%s", "a;b $(c)"}).out, "a;b $(c)");
  EXPECT_THROW(common::run_command({"/nonexistent/shardtune-no-such-command"}), common::Error);
  EXPECT_EQ(common::command_line({"sbatch", "--parsable", "/a b/x.sh"}), "sbatch --parsable '/a b/x.sh'");
}

Placement placement(int world, int nodes, std::vector<std::string> hosts, int gpus = 0) {
  return {world, nodes, true, world / nodes, std::move(hosts), gpus};
}

TEST(SlurmEnv, ConsistentPlacementHasNoProblems) {
  const job::Job job = load("[slurm]\nnodes = 2\nntasks_per_node = 2\n");
  const SlurmEnv env = read_slurm_env([](const char* name) -> const char* {
    const std::string n = name;
    if (n == "SLURM_JOB_ID") return "42";
    if (n == "SLURM_JOB_NUM_NODES") return "2";
    if (n == "SLURM_JOB_NODELIST") return "n[1-2]";
    if (n == "SLURM_RESTART_COUNT") return "1";
    return nullptr;
  });
  EXPECT_TRUE(env.in_job);
  EXPECT_EQ(env.restart_count, 1);
  EXPECT_TRUE(placement_problems(job, placement(4, 2, {"n1", "n2"}), env).empty());
}

TEST(SlurmEnv, EveryMismatchIsExplained) {
  const job::Job job = load("[slurm]\nnodes = 2\ngpus_per_node = 4\n");
  SlurmEnv env;
  env.in_job = true;
  env.job_id = "7";
  env.num_nodes = 3;
  env.node_list = "g[1-3]";
  auto problems = placement_problems(job, placement(6, 2, {"g1", "g1"}, 2), env);
  ASSERT_EQ(problems.size(), 4u);
  EXPECT_NE(problems[0].find("asks for 2 node(s) but Slurm job 7 has 3 (g[1-3])"), std::string::npos);
  EXPECT_NE(problems[1].find("2 node(s) x 4 rank(s) = 8 but MPI started 6"), std::string::npos);
  EXPECT_NE(problems[2].find("same hostname \"g1\": nodes 0, 1"), std::string::npos);
  EXPECT_NE(problems[3].find("3 ranks run on this node but only 2 GPUs are visible"), std::string::npos);
  problems = placement_problems(job, placement(8, 2, {"g1", "g2"}, 0), SlurmEnv{});
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("asks for 4 GPU(s) per node but this rank sees none"), std::string::npos);
}

// min_nodes: a start on fewer nodes than `nodes` is what the job allows, not a mismatch.
TEST(SlurmEnv, FewerNodesWithinMinNodesAreAccepted) {
  const job::Job job = load("[slurm]\nnodes = 2\nmin_nodes = 1\nntasks_per_node = 2\n");
  SlurmEnv env;
  env.in_job = true;
  env.job_id = "7";
  env.num_nodes = 1;
  env.node_list = "n1";
  EXPECT_TRUE(placement_problems(job, placement(2, 1, {"n1"}, 0), env).empty());
  env.num_nodes = 2;
  EXPECT_TRUE(placement_problems(job, placement(4, 2, {"n1", "n2"}, 0), env).empty());
  const std::vector<std::string> problems = placement_problems(job, placement(4, 1, {"n1"}, 0), SlurmEnv{});
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("1 node(s) x 2 rank(s) = 2 but MPI started 4 rank(s) on 1 node(s)"), std::string::npos)
      << problems[0];
}

TEST(JobState, ParsesScontrolOneLineOutput) {
  const JobInfo info = parse_scontrol_job(
      "JobId=12 JobName=tiny UserId=root(0) JobState=PENDING Reason=BeginTime Dependency=(null) Requeue=1 "
      "Restarts=1 BatchFlag=1 ExitCode=0:0 RunTime=00:00:00 NodeList=(null) Command=/a b/x.sh\n");
  EXPECT_TRUE(info.known);
  EXPECT_EQ(info.field("JobState"), "PENDING");
  EXPECT_EQ(info.field("Reason"), "BeginTime");
  EXPECT_EQ(info.field("Restarts"), "1");
  EXPECT_TRUE(is_active_state("PENDING"));
  EXPECT_TRUE(is_active_state("REQUEUED"));
  EXPECT_FALSE(is_active_state("COMPLETED"));
  EXPECT_FALSE(is_active_state("UNKNOWN"));
  EXPECT_FALSE(parse_scontrol_job("slurm_load_jobs error: Invalid job id specified\n").known);
}

// A job slurmctld has forgotten is not running; a controller that does not answer says nothing.
TEST(JobState, AFailedQueryIsNotANotRunningJob) {
  const JobInfo gone = scontrol_job_result(1, "", "slurm_load_jobs error: Invalid job id specified\n");
  EXPECT_FALSE(gone.known);
  EXPECT_TRUE(gone.error.empty());
  const JobInfo down = scontrol_job_result(1, "", "slurm_load_jobs error: Unable to contact slurm controller\n");
  EXPECT_FALSE(down.known);
  EXPECT_EQ(down.error, "scontrol exited 1: slurm_load_jobs error: Unable to contact slurm controller");
  const JobInfo running = scontrol_job_result(0, "JobId=3 JobState=RUNNING\n", "");
  EXPECT_TRUE(running.known);
  EXPECT_TRUE(running.error.empty());
  EXPECT_EQ(running.field("JobState"), "RUNNING");
}

}  // namespace
}  // namespace shardtune::slurm
