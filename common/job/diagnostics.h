// Problems found in a job file, each with the file, line and column it concerns.
#pragma once

#include <string>
#include <vector>

#include "common/error.h"

namespace shardtune::job {

struct SourcePos {
  std::string file;  // a path, or "--set section.key=value" for a command-line override
  int line = 0;      // 0: no position (a default value, or the file as a whole)
  int column = 0;
};

enum class Severity { kError, kWarning };

struct Diagnostic {
  Severity severity = Severity::kError;
  SourcePos pos;
  std::string key;  // "train.lr", or "" for the file as a whole
  std::string message;
};

// "job.toml:4:7: error: train.lr: expected a float, got a string"
std::string format(const Diagnostic& d);

class Diagnostics {
 public:
  void error(SourcePos pos, std::string key, std::string message);
  void warning(SourcePos pos, std::string key, std::string message);
  bool has_errors() const;
  // Orders by line and column (TOML tables iterate by key); those without a position go last.
  void sort_by_position();
  const std::vector<Diagnostic>& all() const { return items_; }
  // Every diagnostic, one per line, errors and warnings in the order found.
  std::string to_string() const;

 private:
  std::vector<Diagnostic> items_;
};

// A job that failed validation; what() lists every error at once.
class JobError : public common::Error {
 public:
  explicit JobError(Diagnostics diagnostics)
      : common::Error(common::ErrorKind::kConfig, diagnostics.to_string()),
        diagnostics_(std::move(diagnostics)) {}
  const Diagnostics& diagnostics() const { return diagnostics_; }

 private:
  Diagnostics diagnostics_;
};

// The closest candidate within a small edit distance, or "" when none is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace shardtune::job
