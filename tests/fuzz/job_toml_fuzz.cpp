// libFuzzer target for job files: any text must load into a job or into diagnostics (never a
// crash or another exception), and a job that loads without errors must write out as TOML that
// loads back to the same text (what `shardtune submit` relies on when it writes job.toml).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/job/job_loader.h"
#include "common/job/job_writer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardtune::job;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const LoadedJob loaded = parse_job(text, "fuzz.toml");
    if (loaded.diagnostics.has_errors()) return 0;
    const std::string written = to_toml(loaded.job);
    const LoadedJob again = parse_job(written, "written.toml");
    if (again.diagnostics.has_errors() || to_toml(again.job) != written) __builtin_trap();
  } catch (const shardtune::common::Error&) {
  }
  return 0;
}
