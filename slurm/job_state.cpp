#include "slurm/job_state.h"

#include <fmt/format.h>

#include <set>
#include <sstream>

#include "common/error.h"
#include "common/subprocess.h"

namespace shardtune::slurm {

std::string JobInfo::field(const std::string& key) const {
  const auto it = fields.find(key);
  return it == fields.end() ? "" : it->second;
}

JobInfo parse_scontrol_job(const std::string& text) {
  JobInfo info;
  std::istringstream words(text.substr(0, text.find('\n')));
  std::string word;
  while (words >> word) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    info.fields.emplace(word.substr(0, eq), word.substr(eq + 1));  // the first of repeated keys wins
  }
  info.known = info.fields.count("JobState") > 0;
  return info;
}

JobInfo scontrol_job_result(int exit_code, const std::string& out, const std::string& err) {
  if (exit_code == 0) return parse_scontrol_job(out);
  JobInfo info;
  if (err.find("Invalid job id") == std::string::npos) {
    std::string why = err;
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    info.error = fmt::format("scontrol exited {}{}", exit_code, why.empty() ? "" : ": " + why);
  }
  return info;
}

JobInfo query_job(const std::string& job_id) {
  const common::CommandResult r = common::run_command({"scontrol", "show", "job", "-o", job_id});
  return scontrol_job_result(r.exit_code, r.out, r.err);
}

std::string query_job_state(const std::string& job_id) {
  const JobInfo info = query_job(job_id);
  ST_CHECK(info.error.empty(), common::ErrorKind::kIo, "cannot tell whether Slurm job {} still runs: {}", job_id,
           info.error);
  return info.known ? info.field("JobState") : "UNKNOWN";
}

bool is_active_state(const std::string& state) {
  static const std::set<std::string> active = {"PENDING",  "RUNNING",  "REQUEUED",  "REQUEUE_HOLD", "REQUEUE_FED",
                                               "CONFIGURING", "COMPLETING", "SUSPENDED", "RESIZING", "SIGNALING",
                                               "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"};
  return active.count(state) > 0;
}

}  // namespace shardtune::slurm
