// The corpus of bad job files: each must give exactly the diagnostics in its .expect file
// (file:line:column, the key and the values involved), and none may pass validation.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/job/job_loader.h"

namespace shardtune::job {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(JobCorpus, EveryBadFileGivesItsExpectedDiagnostics) {
  const fs::path dir = fs::path(ST_FIXTURES) / "jobs" / "bad";
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".toml") continue;
    ++files;
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    fs::path expect = entry.path();
    expect.replace_extension(".expect");
    ASSERT_TRUE(fs::exists(expect)) << "missing " << expect;
    const LoadedJob loaded = parse_job(read_file(entry.path()), name);
    EXPECT_TRUE(loaded.diagnostics.has_errors());
    EXPECT_EQ(loaded.diagnostics.to_string(), read_file(expect));
  }
  EXPECT_GE(files, 15);
}

TEST(JobCorpus, EveryErrorInAFileHasALineAndColumnUnlessItIsAboutAMissingKey) {
  const fs::path dir = fs::path(ST_FIXTURES) / "jobs" / "bad";
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".toml") continue;
    const LoadedJob loaded = parse_job(read_file(entry.path()), entry.path().filename().string());
    for (const Diagnostic& d : loaded.diagnostics.all()) {
      if (d.message.find("required") != std::string::npos) continue;
      EXPECT_GT(d.pos.line, 0) << entry.path() << ": " << format(d);
      EXPECT_GT(d.pos.column, 0) << entry.path() << ": " << format(d);
    }
  }
}

TEST(JobCorpus, AMissingFileIsAnErrorNamingIt) {
  const LoadedJob loaded = load_job_file("/nonexistent/job.toml");
  ASSERT_TRUE(loaded.diagnostics.has_errors());
  EXPECT_NE(loaded.diagnostics.to_string().find("/nonexistent/job.toml: error: cannot open the job file"),
            std::string::npos);
}

}  // namespace
}  // namespace shardtune::job
