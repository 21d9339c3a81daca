// Progress of a long operation (loading weights, converting a checkpoint, tokenizing): on a
// terminal a bar redrawn in place, in a log file a plain line every few seconds, and always one
// closing line that says what was done, how fast.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace shardtune::common {

enum class ProgressUnit {
  kBytes,  // shown in GB, with GB/s
  kCount,  // shown as counts of ProgressOptions::noun, with a rate per second
};

struct ProgressOptions {
  std::string label;  // "loading", "resharding": begins every line
  int64_t total = 0;  // in units; the bar and the ETA need it (0: neither is shown)
  ProgressUnit unit = ProgressUnit::kBytes;
  std::string noun = "items";  // kCount: "examples", "flat parameters"
  // Where the plain lines and the closing line go (a logger, stderr). Empty: stderr.
  std::function<void(const std::string&)> line;
  // A terminal to draw the bar on, in place of the periodic plain lines; -1: no bar.
  int bar_fd = -1;
  // Where the periodic plain lines go while a bar is drawn (a log file behind the terminal).
  std::function<void(const std::string&)> log;
  int bar_columns = 0;          // the bar line's width; 0: the terminal's (80 when unknown)
  double line_every_s = 5.0;    // plain lines at most this often
  double redraw_every_s = 0.1;  // the bar at most this often
  // The clock; tests step it by hand.
  std::function<std::chrono::steady_clock::time_point()> now;
};

class Progress {
 public:
  explicit Progress(ProgressOptions options);
  ~Progress();  // ends a bar left on the screen with a newline
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void add(int64_t units) { set(done_ + units); }
  void set(int64_t done);
  // The closing line: "<what>: <done> in <s> s (<rate>)<extra>", once. Ends the bar first.
  void finish(const std::string& what, const std::string& extra = "");
  int64_t done() const { return done_; }
  double seconds() const;

 private:
  void draw(bool last);
  void emit(const std::string& text) const;

  ProgressOptions options_;
  int64_t done_ = 0;
  std::chrono::steady_clock::time_point start_, last_line_, last_draw_;
  bool drawn_ = false, finished_ = false;
};

// Whether fd is a terminal that can redraw a line (not TERM=dumb).
bool is_terminal(int fd);

// The terminal's width in columns: its own, else $COLUMNS, else 80.
int terminal_columns(int fd);

// "1.20/3.40 GB, 0.60 GB/s, ETA 0:00:04" or "300/1000 examples, 150/s, ETA 0:00:05"; without a
// total neither the "/total" nor the ETA.
std::string progress_status(int64_t done, int64_t total, double seconds, ProgressUnit unit, const std::string& noun);

// "[#####.....]": `width` characters between the brackets, the filled part rounded down.
std::string progress_bar(double fraction, int width);

// "1:02:03" (hours unbounded).
std::string clock_text(double seconds);

}  // namespace shardtune::common
