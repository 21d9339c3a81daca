// metrics.jsonl as a whole: trimmed back to a checkpoint's step when a run resumes (so that steps
// a crash repeated appear once), and turned into the JSON that llama-recipes' `save_metrics`
// writes, for plotting scripts written against it.
#pragma once

#include <cstdint>
#include <string>

namespace shardtune::train {

// Keeps the records of steps 1..step (training records, and evaluations after at most `step`
// steps, or fewer than `step` with `drop_eval_at_step`) and drops the rest, including a last line
// cut short; rewrites the file atomically. No file: nothing to do.
void trim_metrics(const std::string& path, int64_t step, bool drop_eval_at_step = false);

// Writes `out` (atomically) from the records of `jsonl`, in llama-recipes' layout:
// train_step_loss and train_step_perplexity per step; train_epoch_loss (mean of the epoch's step
// losses) and train_epoch_perplexity per epoch; val_epoch_loss and val_epoch_perplexity per
// evaluation, and val_step_loss and val_step_perplexity, which llama-recipes keeps per
// validation batch, per evaluation (shardtune logs each evaluation's mean, not its batches).
void write_recipes_metrics(const std::string& jsonl, const std::string& out);

}  // namespace shardtune::train
