// Rank-aware logging on spdlog.
#include "common/log.h"

#include <fmt/format.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

namespace shardtune::common {
namespace {

std::shared_ptr<spdlog::logger>& file_only() {
  static std::shared_ptr<spdlog::logger> logger;
  return logger;
}

}  // namespace

std::string log_prefix(const ProcessIdentity& id) {
  if (id.rank < 0) return fmt::format("host {}", id.host);
  return fmt::format("rank {}/{} node {} host {}", id.rank, id.world_size, id.node, id.host);
}

std::shared_ptr<spdlog::logger> make_logger(const ProcessIdentity& id, spdlog::sinks_init_list sinks) {
  auto logger = std::make_shared<spdlog::logger>("shardtune", sinks);
  // The prefix is baked into the pattern (escaped for spdlog's '%'), so every sink gets it.
  std::string prefix = log_prefix(id);
  std::string escaped;
  for (char c : prefix) {
    if (c == '%') escaped += '%';
    escaped += c;
  }
  logger->set_pattern(fmt::format("[%Y-%m-%d %H:%M:%S.%e] [{}] [%l] %v", escaped));
  logger->set_level(spdlog::level::trace);
  logger->flush_on(spdlog::level::info);
  return logger;
}

std::shared_ptr<spdlog::logger> file_only_logger() {
  if (!file_only()) file_only() = std::make_shared<spdlog::logger>("shardtune.file");
  return file_only();
}

ProgressOptions logged_progress(std::string label, int64_t total, ProgressUnit unit, std::string noun) {
  ProgressOptions o;
  o.label = std::move(label);
  o.total = total;
  o.unit = unit;
  o.noun = std::move(noun);
  o.line = [](const std::string& text) { spdlog::info("{}", text); };
  const char* columns = std::getenv(kTerminalColumnsEnv);
  const bool console = process_identity().rank <= 0;  // the other ranks' consoles show warnings only
  if (console && (is_terminal(STDERR_FILENO) || (columns != nullptr && std::atoi(columns) > 0))) {
    o.bar_fd = STDERR_FILENO;
    o.bar_columns = is_terminal(STDERR_FILENO) ? 0 : std::atoi(columns);
    o.log = [logger = file_only_logger()](const std::string& text) { logger->info("{}", text); };
  }
  return o;
}

std::string rank_log_path(const std::string& output_dir, int rank) {
  return fmt::format("{}/logs/rank-{:05d}.log", output_dir, rank < 0 ? 0 : rank);
}

std::string init_logging(const LogOptions& options) {
  const ProcessIdentity& id = process_identity();
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  console->set_level(id.rank <= 0 ? options.console_level : options.other_ranks_console_level);
  std::string path;
  std::shared_ptr<spdlog::logger> logger;
  if (!options.output_dir.empty()) {
    path = rank_log_path(options.output_dir, id.rank);
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    ST_CHECK(!ec, ErrorKind::kIo, "cannot create the log directory for {}: {}", path, ec.message());
    auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/false);
    file->set_level(options.file_level);
    logger = make_logger(id, {console, file});
    file_only() = make_logger(id, {file});
  } else {
    logger = make_logger(id, {console});
  }
  spdlog::set_default_logger(logger);
  return path;
}

}  // namespace shardtune::common
