#include "slurm/sbatch_script.h"

#include <fmt/format.h>

#include <initializer_list>
#include <string_view>

#include "common/dir_lock.h"
#include "common/error.h"
#include "common/exit_codes.h"
#include "common/malloc_pages.h"
#include "common/shell_words.h"

namespace shardtune::slurm {
namespace {

using common::ErrorKind;
using common::shell_quote;

std::string quoted_words(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += " " + shell_quote(w);
  return out;
}

void require_absolute(const std::string& what, const std::string& path) {
  ST_CHECK(!path.empty() && path[0] == '/', ErrorKind::kConfig, "{} must be an absolute path for a batch job: \"{}\"",
           what, path);
}

constexpr const char* kReadyFilePrefix = ".ranks-ready-";
constexpr const char* kLostPeersPrefix = ".peers-lost-";
constexpr const char* kScriptName = "shardtune.sbatch";
constexpr const char* kJobIdsName = "slurm-job-ids";

// Whether the user's mpirun options choose the mapping or the binding themselves.
bool sets_option(const std::vector<std::string>& options, std::initializer_list<std::string_view> names) {
  for (const std::string& o : options)
    for (std::string_view name : names)
      if (o == name || o.rfind(std::string(name) + "=", 0) == 0) return true;
  return false;
}

// mpirun's placement: `per_node` ranks on each node, each bound to cpus_per_task CPUs of its own
// (Open MPI binds to a single core, or to a whole socket shared by every rank, when told nothing).
// CPUs as Slurm counts them: hardware threads (--use-hwthread-cpus), so that on nodes with two
// threads per core a rank of cpus_per_task = 8 takes 4 cores, as Slurm allocated them. Options of
// the user's that map or bind replace these (Open MPI refuses two policies).
std::string mpirun_placement(const job::Job& job, int64_t per_node) {
  const std::vector<std::string>& user = job.launch.extra_mpirun_options;
  if (sets_option(user, {"--map-by", "-map-by", "--cpus-per-proc", "-cpus-per-proc", "--npernode", "-npernode"}))
    return "";
  if (sets_option(user, {"--bind-to", "-bind-to"})) return fmt::format(" --map-by ppr:{}:node", per_node);
  return fmt::format(" --map-by ppr:{}:node:PE={} --use-hwthread-cpus --bind-to hwthread --report-bindings", per_node,
                     job.slurm.cpus_per_task);
}

// The command line that starts every rank, as bash array elements: one rank per task on each of the
// $NODES nodes this start was given (from min_nodes to nodes).
std::string launcher_words(const job::Job& job, const ScriptPaths& paths) {
  const int64_t per_node = job.slurm.ranks_per_node();
  // Words of our own making, left unquoted so that bash expands the node count.
  const std::string ranks = fmt::format("$((NODES * {}))", per_node);
  std::string out;
  std::vector<std::string> extra;
  if (job.launch.launcher == job::Launcher::kSrun) {
    out = quoted_words({"srun", "--mpi=" + job.launch.srun_mpi, "--kill-on-bad-exit=1"}) +
          fmt::format(" \"--nodes=$NODES\" --ntasks-per-node={} \"--ntasks={}\"", per_node, ranks);
    extra = job.launch.extra_srun_options;
  } else {
    out = fmt::format(" mpirun -np \"{}\"{}", ranks, mpirun_placement(job, per_node));
    extra = job.launch.extra_mpirun_options;
  }
  extra.push_back(paths.rank_exe);
  extra.push_back(paths.job_file);  // absolute (required above): never read as an option
  return out + quoted_words(extra);
}

// srun takes cpus_per_task from the environment (Slurm 22.05 no longer passes sbatch's on). Under
// mpirun it must not: Open MPI starts its daemons with an srun of one task per node, which would
// then get only cpus_per_task CPUs of each node for all of that node's ranks.
std::string cpus_env(const job::Job& job) {
  if (job.launch.launcher == job::Launcher::kSrun)
    return fmt::format("export SRUN_CPUS_PER_TASK={}", job.slurm.cpus_per_task);
  return "unset SRUN_CPUS_PER_TASK  # mpirun's daemons take the job's CPUs; mpirun binds the ranks";
}

// The script's body: plain bash, the job's values only as single-quoted words or integers.
constexpr const char* kBody = R"SH(set -uo pipefail

readonly CHECKPOINT_DIR={checkpoint_dir}
readonly SHARDTUNE={launcher_exe}
readonly OUTPUT_DIR={output_dir}
readonly READY_FILE={output_dir}/{ready_prefix}"${{SLURM_JOB_ID:-0}}"
readonly LOCK_FILE={output_dir}/{lock_name}
readonly CHECKPOINT_LOCK_FILE={checkpoint_dir}/{lock_name}
readonly LOST_PEERS_FILE={output_dir}/{lost_prefix}"${{SLURM_JOB_ID:-0}}"
readonly SCRIPT_FILE={output_dir}/{script_name}
readonly JOB_IDS_FILE={output_dir}/{job_ids_name}
readonly MAX_REQUEUES={max_requeues}
readonly REQUEUE_EXIT={requeue_exit}
readonly DIVERGED_EXIT={diverged_exit}
readonly NODES=${{SLURM_JOB_NUM_NODES:-{nodes}}}
{cpus_env}
# The ranks' malloc on huge pages, unless the environment already decides (see the rank's log).
case ":${{GLIBC_TUNABLES:-}}" in
  *:{hugetlb}=*) ;;
  *) export GLIBC_TUNABLES="${{GLIBC_TUNABLES:+$GLIBC_TUNABLES:}}{hugetlb}=1" ;;
esac
ranks=({launcher})

# Bash 5.2 (Debian 12) loses a trapped signal that arrives while it expands a `$(...)`: the trap
# and the expansion both fail with "unexpected EOF while looking for matching `)'". Once the traps
# are set, this script runs commands for their output only in backquotes, which do not fail so.
say() {{ printf 'shardtune[batch] %(%F %T)T: %s\n' -1 "$*"; }}

# Slurm's stop signal (USR1 at the time limit's lead, TERM on preemption or scancel) reaches
# this shell; the ranks get USR1, checkpoint at their next step boundary and exit $REQUEUE_EXIT.
# A rank that has not installed its handlers yet would die of USR1, so the signal is passed on
# only once rank 0 has written READY_FILE (after every rank installed them); until then it waits.
ranks_pid=""
interrupted=0
stop_pending=0
stop_sent=0
pass_stop_on() {{
  if (( stop_pending )) && [[ -n "$ranks_pid" && -e "$READY_FILE" ]]; then
    kill -USR1 "$ranks_pid" 2>/dev/null || true
    stop_pending=0
    stop_sent=1
  fi
}}
forward() {{
  interrupted=1
  stop_pending=1
  say "received SIG$1: the ranks checkpoint at their next step boundary and stop"
  pass_stop_on
  if (( stop_pending )); then say "the ranks are still starting: the signal reaches them once they are ready"; fi
}}
trap 'forward USR1' USR1
trap 'forward TERM' TERM

# The newest committed checkpoint as the ranks resume it: "<commit number> <step>", "0 0" when
# there is none. A start made progress when the commit number grew (a run that rolled back to an
# older checkpoint commits lower steps, under higher numbers). The rule lives in shardtune.
checkpoint_position() {{
  local out
  out=`"$SHARDTUNE" checkpoint-position -- "$CHECKPOINT_DIR" 2>/dev/null` || out="0 0"
  [[ "$out" =~ ^[0-9]+\ [0-9]+$ ]] || out="0 0"
  echo "$out"
}}

# Starts so far: Slurm's requeues of this job, and the resubmissions before it (a lost node).
restarts=$(( ${{SHARDTUNE_RESTARTS:-0}} + ${{SLURM_RESTART_COUNT:-0}} ))
position=`checkpoint_position`
start_commit=${{position% *}} start_step=${{position#* }}
say "job ${{SLURM_JOB_ID:-?}} (start $((restarts + 1))): ${{SLURM_JOB_NUM_NODES:-?}} node(s) ${{SLURM_JOB_NODELIST:-?}}; last checkpoint: step $start_step"

# One writer per output directory and per checkpoint directory: this start holds both locks until
# it ends (`shardtune run` and `shardtune submit` take the same locks). A file system without locks
# leaves a directory unguarded.
take_lock() {{  # FD FILE DIR
  eval "exec $1<>\"\$2\"" || {{ say "cannot open $2: not starting"; exit 1; }}
  flock -n -E 200 "$1"
  local rc=$?
  if (( rc == 200 )); then
    local holder
    holder=`head -n 1 "$2" | head -c 300`
    say "$3 is in use by $holder: a second writer would corrupt its checkpoints; not starting"
    exit 1
  elif (( rc != 0 )); then
    say "warning: cannot lock $2 (flock exit $rc): nothing keeps a second job out of $3"
  else
    printf 'Slurm job %s, start %s (batch script on %s pid %s), since %(%F %T)T\n' "${{SLURM_JOB_ID:-?}}" \
      "$((restarts + 1))" "$HOSTNAME" "$$" -1 >"$2"
  fi
}}
mkdir -p -- "$CHECKPOINT_DIR"
take_lock 9 "$LOCK_FILE" "$OUTPUT_DIR"
if [[ ! "$CHECKPOINT_DIR" -ef "$OUTPUT_DIR" ]]; then take_lock 8 "$CHECKPOINT_LOCK_FILE" "$CHECKPOINT_DIR"; fi

say "starting the ranks: ${{ranks[*]}}"
rm -f -- "$READY_FILE"
"${{ranks[@]}}" &
ranks_pid=$!
while :; do
  interrupted=0
  # A stop waiting for the ranks to be ready: look again every second while they run.
  if (( stop_pending )) && kill -0 "$ranks_pid" 2>/dev/null; then
    sleep 1
    pass_stop_on
    continue
  fi
  wait "$ranks_pid"
  rc=$?
  # A trapped signal ends `wait` early with a status above 128: wait again for the ranks.
  if (( interrupted && rc > 128 )); then continue; fi
  break
done
rm -f -- "$READY_FILE"
position=`checkpoint_position`
end_commit=${{position% *}} end_step=${{position#* }}

if (( rc == 0 )); then
  say "the ranks finished; last checkpoint: step $end_step"
  exit 0
fi
# scancel sends TERM too: a cancelled job stays cancelled.
job_state=`scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null | grep -o 'JobState=[A-Z_]*'`
if [[ "$job_state" == "JobState=CANCELLED" ]]; then
  say "the job was cancelled (ranks' exit $rc); last committed checkpoint: step $end_step"
  exit "$rc"
fi
if (( rc == DIVERGED_EXIT )); then
  say "training diverged (exit $rc): the newest checkpoint, step $end_step, holds the last finite weights; not requeueing"
  exit "$rc"
fi
# A lost node: Slurm reports a node of this allocation down, or it does not run a trivial step
# (every node is probed at once). The checkpoints load at any world size, so the job goes on from
# the last one on whatever nodes it gets next (min_nodes to nodes). A rank that failed on a node
# that is still there (a crash, a bad job) is no reason to go on: it would fail again.
slurm_down() {{  # slurm_down NODES: those of NODES Slurm reports down, one per line
  local n
  for n in $1; do
    # DOWN, FAIL or not responding (a flag, or a '*' after the state)
    if scontrol show node -o "$n" 2>/dev/null | grep -qE 'State=([A-Z_+]*(DOWN|NOT_RESPONDING|FAIL)|[A-Z_+]+\*)'; then
      echo "$n"
    fi
  done
}}
lost_nodes() {{
  local n probes nodes down
  nodes=`scontrol show hostnames "${{SLURM_JOB_NODELIST:-}}" 2>/dev/null`
  down=`slurm_down "$nodes"`
  if [[ -z "$down" ]]; then
    probes=`mktemp -d`
    for n in $nodes; do
      (timeout 60 srun --mpi=none --nodes=1 --ntasks=1 --nodelist="$n" true >/dev/null 2>&1 || touch "$probes/$n") &
    done
    wait
    # Slurm may find the node down while the probes run and end this job for it: then every probe
    # fails, the healthy nodes' too. Slurm's word wins over the probes.
    down=`slurm_down "$nodes"`
    [[ -n "$down" ]] || down=`ls "$probes"`
    rm -rf -- "$probes"
  fi
  echo "$down" | paste -sd, -
}}
peers_lost=""  # what the ranks saw: the watchdog's census of the ranks that never arrived
if [[ -s "$LOST_PEERS_FILE" ]]; then peers_lost=`head -n 1 "$LOST_PEERS_FILE" | head -c 400`; fi
rm -f -- "$LOST_PEERS_FILE"
# After a stop, a rank killed once the checkpoint was committed (srun's --kill-on-bad-exit ends
# the others as soon as the first exits, or a rank dies on its way out) loses nothing.
if (( rc != REQUEUE_EXIT )); then
  # Slurm may be ending this job for the same lost node (its TERM reaches every process of the job):
  # what is left to do here must not die of it.
  trap '' TERM
  lost=`lost_nodes`
  if [[ -n "$lost" ]]; then
    say "node(s) $lost lost (the ranks' exit $rc)${{peers_lost:+: $peers_lost}}"
    if (( restarts >= MAX_REQUEUES )); then
      say "the job was restarted $restarts time(s) already (max_requeues = $MAX_REQUEUES): not resubmitting"
      exit "$rc"
    fi
    # Slurm holds a requeued job to the node count it ran on, so a job that lost a node would wait
    # for it: it is submitted again instead, without the lost node(s), to resume from checkpoint step
    # $end_step on the nodes it gets (min_nodes to nodes).
    exec 9>&- 8>&-  # the next start takes the locks again
    if next=`SHARDTUNE_RESTARTS=$((restarts + 1)) sbatch --parsable --exclude="$lost" "$SCRIPT_FILE"`; then
      echo "${{next%%;*}}" >>"$JOB_IDS_FILE"
      say "resubmitted as Slurm job ${{next%%;*}} ($((restarts + 1)) of $MAX_REQUEUES), excluding $lost, to resume from checkpoint step $end_step"
      # If Slurm saw the node fail too, it requeues this job to wait for as many nodes as before:
      # only the new job may go on.
      scancel "$SLURM_JOB_ID" 2>/dev/null
      exit 0
    fi
    say "sbatch failed: not resubmitting"
    exit "$rc"
  elif (( stop_sent && end_commit > start_commit )); then
    say "the ranks ended with exit $rc after the stop signal, but checkpoint step $end_step is committed: requeueing as stopped"
  else
    say "the ranks failed (exit $rc); last committed checkpoint: step $end_step; not requeueing"
    exit "$rc"
  fi
fi
if (( end_commit <= start_commit )); then
  say "the ranks stopped without a new checkpoint (still step $start_step): not requeueing"
  exit "$rc"
fi
if (( restarts >= MAX_REQUEUES )); then
  say "checkpoint at step $end_step, but the job was requeued $restarts time(s) already (max_requeues = $MAX_REQUEUES): not requeueing"
  exit "$rc"
fi
say "checkpoint at step $end_step: requeueing job $SLURM_JOB_ID ($((restarts + 1)) of $MAX_REQUEUES)"
exec 9>&- 8>&-  # the next start takes the locks again
if ! scontrol requeue "$SLURM_JOB_ID"; then
  say "scontrol requeue failed"
  exit "$rc"
fi
exit 0
)SH";

}  // namespace

std::string ranks_ready_file(const std::string& output_dir, const std::string& job_id) {
  return output_dir + "/" + kReadyFilePrefix + job_id;
}

std::string script_file(const std::string& output_dir) { return output_dir + "/" + kScriptName; }
std::string job_ids_file(const std::string& output_dir) { return output_dir + "/" + kJobIdsName; }

std::string lost_peers_file(const std::string& output_dir, const std::string& job_id) {
  return output_dir + "/" + kLostPeersPrefix + job_id;
}

std::string slurm_log_pattern(const job::Job& job) { return job.job.output_dir + "/slurm-%j.out"; }

std::vector<std::string> sbatch_options(const job::Job& job) {
  const job::SlurmSection& s = job.slurm;
  std::vector<std::string> o = {
      "--job-name=" + job.job.name,
      s.min_nodes > 0 && s.min_nodes < s.nodes ? fmt::format("--nodes={}-{}", s.min_nodes, s.nodes)
                                                : fmt::format("--nodes={}", s.nodes),
      fmt::format("--ntasks-per-node={}", s.ranks_per_node()),
      fmt::format("--cpus-per-task={}", s.cpus_per_task),
  };
  if (s.gpus_per_node > 0) o.push_back(fmt::format("--gpus-per-node={}", s.gpus_per_node));
  auto optional = [&](const char* option, const std::string& value) {
    if (!value.empty()) o.push_back(fmt::format("--{}={}", option, value));
  };
  optional("time", s.time);
  optional("partition", s.partition);
  optional("account", s.account);
  optional("qos", s.qos);
  optional("constraint", s.constraint);
  optional("mail-user", s.mail_user);
  optional("mail-type", s.mail_type);
  if (s.exclusive) o.emplace_back("--exclusive");
  o.push_back(fmt::format("--signal=B:USR1@{}", s.signal_lead_s));
  o.emplace_back("--requeue");
  o.emplace_back("--open-mode=append");
  o.push_back("--output=" + slurm_log_pattern(job));
  o.push_back("--error=" + slurm_log_pattern(job));
  o.insert(o.end(), s.extra_sbatch_options.begin(), s.extra_sbatch_options.end());
  return o;
}

std::string sbatch_script(const job::Job& job, const ScriptPaths& paths) {
  require_absolute("[job] output_dir", job.job.output_dir);
  require_absolute("[checkpoint] dir", job.checkpoint.dir);
  require_absolute("the shardtune-rank executable", paths.rank_exe);
  require_absolute("the resolved job file", paths.job_file);
  require_absolute("the shardtune executable", paths.launcher_exe);
  ST_CHECK(common::is_sbatch_path(job.job.output_dir), ErrorKind::kConfig,
           "[job] output_dir \"{}\" cannot be given to sbatch: use printable ASCII without spaces, quotes, '\\', "
           "'#', '$', '`' or '%'",
           job.job.output_dir);
  std::string script = "#!/bin/bash\n";
  script += fmt::format("# shardtune batch script of job '{}', generated from the resolved job file {}.\n",
                        job.job.name, paths.job_file);
  script += "# `shardtune submit` rewrites it; change the job file instead.\n";
  for (const std::string& option : sbatch_options(job)) {
    ST_CHECK(common::is_sbatch_word(option), ErrorKind::kConfig,
             "the sbatch option \"{}\" is not one plain word: it cannot be written as an #SBATCH line", option);
    script += "#SBATCH " + option + "\n";
  }
  script += fmt::format(kBody, fmt::arg("checkpoint_dir", shell_quote(job.checkpoint.dir)),
                        fmt::arg("output_dir", shell_quote(job.job.output_dir)),
                        fmt::arg("ready_prefix", kReadyFilePrefix),
                        fmt::arg("lock_name", common::kDirLockName),
                        fmt::arg("max_requeues", job.slurm.max_requeues),
                        fmt::arg("requeue_exit", common::kExitRequeue),
                        fmt::arg("diverged_exit", common::kExitDiverged),
                        fmt::arg("lost_prefix", kLostPeersPrefix),
                        fmt::arg("script_name", kScriptName),
                        fmt::arg("job_ids_name", kJobIdsName),
                        fmt::arg("nodes", job.slurm.nodes),
                        fmt::arg("cpus_env", cpus_env(job)),
                        fmt::arg("hugetlb", common::kMallocHugePagesTunable),
                        fmt::arg("launcher", launcher_words(job, paths)),
                        fmt::arg("launcher_exe", shell_quote(paths.launcher_exe)));
  return script;
}

std::vector<std::string> sbatch_argv(const std::string& script_path) { return {"sbatch", "--parsable", script_path}; }

}  // namespace shardtune::slurm
