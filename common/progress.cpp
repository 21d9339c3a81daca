// Progress bars and progress lines.
#include "common/progress.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace shardtune::common {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

void write_all(int fd, const std::string& text) {
  for (size_t at = 0; at < text.size();) {
    const ssize_t n = ::write(fd, text.data() + at, text.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a closed terminal: the work goes on without its bar
    at += static_cast<size_t>(n);
  }
}

std::string amount(int64_t units, ProgressUnit unit) {
  return unit == ProgressUnit::kBytes ? fmt::format("{:.2f}", static_cast<double>(units) / 1e9) : std::to_string(units);
}

std::string rate_text(double per_second, ProgressUnit unit) {
  return unit == ProgressUnit::kBytes ? fmt::format("{:.2f} GB/s", per_second / 1e9) : fmt::format("{:.0f}/s", per_second);
}

}  // namespace

bool is_terminal(int fd) {
  const char* term = std::getenv("TERM");
  return ::isatty(fd) == 1 && !(term != nullptr && std::strcmp(term, "dumb") == 0);
}

int terminal_columns(int fd) {
  winsize ws{};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* c = std::getenv("COLUMNS"); c != nullptr && std::atoi(c) > 0) return std::atoi(c);
  return 80;
}

std::string clock_text(double seconds) {
  const int64_t s = static_cast<int64_t>(std::ceil(std::max(seconds, 0.0)));
  return fmt::format("{}:{:02d}:{:02d}", s / 3600, (s / 60) % 60, s % 60);
}

std::string progress_status(int64_t done, int64_t total, double seconds, ProgressUnit unit, const std::string& noun) {
  const double rate = static_cast<double>(done) / std::max(seconds, 1e-9);
  std::string text = amount(done, unit);
  if (total > 0) text += "/" + amount(total, unit);
  text += unit == ProgressUnit::kBytes ? " GB" : " " + noun;
  text += ", " + rate_text(rate, unit);
  if (total > 0 && done > 0) text += ", ETA " + clock_text(static_cast<double>(std::max<int64_t>(total - done, 0)) / rate);
  return text;
}

std::string progress_bar(double fraction, int width) {
  const int filled = static_cast<int>(std::floor(std::clamp(fraction, 0.0, 1.0) * width));
  return "[" + std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(width - filled), '.') + "]";
}

Progress::Progress(ProgressOptions options) : options_(std::move(options)) {
  if (!options_.now) options_.now = [] { return Clock::now(); };
  start_ = last_line_ = options_.now();
  last_draw_ = start_ - std::chrono::hours(1);
}

Progress::~Progress() {
  if (drawn_) write_all(options_.bar_fd, "\n");
}

double Progress::seconds() const { return since(start_, options_.now()); }

void Progress::set(int64_t done) {
  done_ = done;
  const Clock::time_point now = options_.now();
  const bool complete = options_.total > 0 && done_ >= options_.total;
  const bool bar = options_.bar_fd >= 0;
  if (bar && (since(last_draw_, now) >= options_.redraw_every_s || complete)) {
    last_draw_ = now;
    draw(false);
  }
  if ((!bar || options_.log) && since(last_line_, now) >= options_.line_every_s && !complete) {
    last_line_ = now;
    const std::string text =
        options_.label + ": " + progress_status(done_, options_.total, since(start_, now), options_.unit, options_.noun);
    bar ? options_.log(text) : emit(text);
  }
}

void Progress::draw(bool last) {
  const double s = since(start_, options_.now());
  const std::string status = progress_status(done_, options_.total, s, options_.unit, options_.noun);
  const int columns = (options_.bar_columns > 0 ? options_.bar_columns : terminal_columns(options_.bar_fd)) - 1;
  std::string text = options_.label + " ";
  if (options_.total > 0) {
    const double fraction = static_cast<double>(done_) / static_cast<double>(options_.total);
    const std::string tail = fmt::format(" {:3.0f}% {}", std::floor(std::min(fraction, 1.0) * 100), status);
    const int bar_width = columns - static_cast<int>(text.size() + tail.size()) - 2;
    text += (bar_width >= 10 ? progress_bar(fraction, bar_width) : std::string()) + tail;
  } else {
    text += status;
  }
  if (static_cast<int>(text.size()) > columns) text.resize(static_cast<size_t>(std::max(columns, 0)));
  write_all(options_.bar_fd, "\r" + text + "\x1b[K" + (last ? "\n" : ""));
  drawn_ = !last;
}

void Progress::finish(const std::string& what, const std::string& extra) {
  if (finished_) return;
  finished_ = true;
  const double s = seconds();
  if (options_.bar_fd >= 0) draw(true);
  emit(fmt::format("{}: {}{} in {:.1f} s ({}){}", what, amount(done_, options_.unit),
                   options_.unit == ProgressUnit::kBytes ? " GB" : " " + options_.noun, s,
                   rate_text(static_cast<double>(done_) / std::max(s, 1e-9), options_.unit), extra));
}

void Progress::emit(const std::string& text) const {
  if (options_.line) {
    options_.line(text);
  } else {
    std::fputs((text + "\n").c_str(), stderr);
    std::fflush(stderr);
  }
}

}  // namespace shardtune::common
