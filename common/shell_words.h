// What may reach a batch script. Values from the job file go into `#SBATCH` lines only when
// sbatch reads them as exactly one word, and into the script's shell code only single-quoted.
#pragma once

#include <string>
#include <string_view>

namespace shardtune::common {

// One word sbatch reads back unchanged from an `#SBATCH` line, and that no shell would expand:
// printable ASCII without spaces, quotes, '\', '#', '$' or '`'. Not empty.
bool is_sbatch_word(std::string_view s);

// A path Slurm may use for --output: an sbatch word without '%' (Slurm's pattern character).
bool is_sbatch_path(std::string_view s);

// No control characters (newline, NUL, escape, DEL): a value that may go into scripts, logs and
// other programs' input on one line.
bool is_one_line(std::string_view s);

// `s` as one single-quoted shell word: 'it'\''s'. Throws on NUL, which no shell word can hold.
std::string shell_quote(std::string_view s);

}  // namespace shardtune::common
