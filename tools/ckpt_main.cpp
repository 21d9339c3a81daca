// shardtune-ckpt: inspects, verifies and converts shardtune checkpoints, streaming in bounded pieces.
//   shardtune-ckpt inspect DIR               step, world size, layout, every tensor
//   shardtune-ckpt verify DIR                every slice read back and checked against its CRC-32
//   shardtune-ckpt consolidate DIR OUT       sharded -> full (one file of whole tensors)
//   shardtune-ckpt reshard DIR OUT -w M      sharded, laid out for M ranks
//   shardtune-ckpt export-hf DIR OUT         -> Hugging Face folder (safetensors, index, config.json)
//   shardtune-ckpt import-hf HF_DIR OUT      Hugging Face folder -> full checkpoint
//   shardtune-ckpt diff A B                  largest absolute and relative difference per tensor
//   shardtune-ckpt export-peft DIR OUT       LoRA adapter checkpoint -> PEFT adapter folder
//   shardtune-ckpt merge-lora DIR BASE OUT   LoRA adapter checkpoint + its base -> merged HF folder
//   shardtune-ckpt export-gguf SRC OUT.gguf  checkpoint or HF folder -> one GGUF file for llama.cpp
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <malloc.h>

#include <nlohmann/json.hpp>

#include "checkpoint/commit.h"
#include "checkpoint/h5_check.h"
#include "checkpoint/manifest.h"
#include "checkpoint/sharded_checkpoint.h"
#include "common/interrupt_cleanup.h"
#include "common/open_files.h"
#include "common/process_exit.h"
#include "common/process_memory.h"
#include "common/strict_json.h"
#include "common/shell_words.h"
#include "tools/ckpt_convert.h"
#include "tools/ckpt_gguf.h"
#include "tools/ckpt_lora.h"
#include "tools/tool_progress.h"

using namespace shardtune;

namespace {

// A string from a manifest as the terminal should see it: quoted and escaped unless it is one line
// of printable characters (a hostile tensor name must not move the cursor or clear the screen).
std::string shown(const std::string& s) { return common::is_one_line(s) ? s : common::json_quoted(s); }

int inspect(const std::string& dir) {
  const checkpoint::Manifest m = checkpoint::read_manifest(dir);
  fmt::print("{}: shardtune {} checkpoint, format version {}\n", shown(dir), m.layout, m.version);
  fmt::print("step {} (epoch {}, {} samples into it); saved by {} ranks in shard groups of {}; optimizer state: {}\n",
             m.step, m.epoch + 1, m.sample_in_epoch, m.world_size, m.shard_group_size, m.has_optimizer ? "yes" : "no");
  if (m.adapter)
    fmt::print("{} adapters only: r = {}, alpha = {}, dropout = {}, on [{}]; base model {}{} (SHA-256 of config.json "
               "{}, tensor index {}, weights {})\n",
               m.adapter->method == "qlora" ? "QLoRA" : "LoRA", m.adapter->r, m.adapter->alpha, m.adapter->dropout, shown(fmt::format("{}", fmt::join(m.adapter->target_modules, ", "))),
               shown(m.adapter->base_path),
               m.adapter->method == "qlora" ? fmt::format(" in NF4 (blocks of {}{})", m.adapter->nf4_block_size,
                                                           m.adapter->nf4_double_quant ? ", scales double-quantised" : "")
                                            : "",
               shown(m.adapter->base_config_sha256), shown(m.adapter->base_tensors_sha256),
               shown(m.adapter->base_weights_sha256.empty() ? m.adapter->base_weights_sample_sha256 + " (first bytes)"
                                                            : m.adapter->base_weights_sha256));
  std::map<std::string, int64_t> files;
  for (const checkpoint::ManifestSlice& s : m.slices) files[s.file] += s.length * 4;
  int64_t total = 0;
  fmt::print("{:<56} {:<18} {:>5} {:>12}\n", "tensor", "shape", "dtype", "bytes");
  for (const auto& [name, t] : m.tensors) {
    total += t.numel() * 4;
    fmt::print("{:<56} {:<18} {:>5} {:>12}\n", shown(name), fmt::format("[{}]", fmt::join(t.shape, ", ")), shown(t.dtype),
               t.numel() * 4);
  }
  fmt::print("{} tensors, {:.3f} GB of parameters; {} files:\n", m.tensors.size(), static_cast<double>(total) / 1e9,
             files.size());
  for (const auto& [file, bytes] : files)
    fmt::print("  {} ({:.3f} GB with optimizer state)\n", shown(file), static_cast<double>(bytes) / 1e9);
  return 0;
}

int verify(const std::string& dir) {
  int64_t total = 0;
  for (const checkpoint::ManifestSlice& s : checkpoint::read_manifest(dir).slices) total += s.length * 4;
  common::Progress progress(tools::tool_progress("verifying", total));
  const checkpoint::VerifyReport r =
      checkpoint::verify_sharded_checkpoint(dir, [&](int64_t bytes) { progress.add(bytes); });
  progress.finish("verified", tools::peak_memory_note());
  for (const std::string& p : r.problems) fmt::print(stderr, "BAD {}\n", shown(p));
  fmt::print("{}: {} slices, {:.3f} GB read, {} bad; peak memory {:.0f} MiB\n", dir, r.slices,
             static_cast<double>(r.bytes) / 1e9, r.problems.size(),
             static_cast<double>(common::peak_resident_bytes()) / (1 << 20));
  return r.problems.empty() ? 0 : 1;
}

int run_tool(int argc, char** argv) {
  // Pieces of 1 MiB and more always come from (and go back to) mmap: glibc otherwise raises its
  // threshold after the first such free and serves later pieces from a heap that fragments.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  CLI::App app{"shardtune-ckpt: inspect, verify and convert shardtune checkpoints"};
  app.require_subcommand(1);
  std::string dir;
  auto* ins = app.add_subcommand("inspect", "Step, world size, layout and tensors of a checkpoint");
  ins->add_option("dir", dir, "Checkpoint directory (step-NNNNNNN)")->required();
  auto* ver = app.add_subcommand("verify", "Read every slice back and check its CRC-32");
  ver->add_option("dir", dir, "Checkpoint directory (step-NNNNNNN)")->required();
  std::string out, dtype = "auto", tokenizer, other;
  uint64_t max_shard_bytes = 5'000'000'000;
  auto* con = app.add_subcommand("consolidate", "Sharded checkpoint -> full checkpoint (one file)");
  con->add_option("dir", dir, "Checkpoint directory")->required();
  con->add_option("out", out, "New checkpoint directory")->required();
  int world_size = 0;
  auto* res = app.add_subcommand("reshard", "Rewrite a checkpoint laid out for M ranks (FULL_SHARD)");
  res->add_option("dir", dir, "Checkpoint directory")->required();
  res->add_option("out", out, "New checkpoint directory")->required();
  res->add_option("-w,--world-size", world_size, "Ranks of the new layout")->required()->check(CLI::Range(1, 1 << 20));
  auto* exp = app.add_subcommand("export-hf", "Checkpoint -> Hugging Face safetensors folder");
  exp->add_option("dir", dir, "Checkpoint directory")->required();
  exp->add_option("out", out, "New folder")->required();
  exp->add_option("--dtype", dtype,
                  "Stored dtype (default auto: the checkpoint's own, fp32 for mixed-precision master weights, bf16 "
                  "for pure_bf16 ones or a bf16 import)")
      ->check(CLI::IsMember({"auto", "bf16", "fp16", "fp32"}));
  exp->add_option("--max-shard-bytes", max_shard_bytes, "Largest safetensors file (default 5 GB)");
  exp->add_option("--tokenizer", tokenizer, "Folder whose tokenizer files are copied along");
  auto* imp = app.add_subcommand("import-hf", "Hugging Face folder -> full checkpoint (weights, step 0)");
  imp->add_option("dir", dir, "Hugging Face model folder")->required();
  imp->add_option("out", out, "New checkpoint directory")->required();
  bool params_only = false;
  auto* dif = app.add_subcommand(
      "diff", "Compare two checkpoints: training state, model config, weights and optimizer moments; exit 1 when they differ");
  dif->add_option("a", dir, "Checkpoint directory")->required();
  dif->add_option("b", other, "Checkpoint directory")->required();
  dif->add_flag("--params-only", params_only, "Compare the weights alone");
  auto* peft = app.add_subcommand("export-peft", "LoRA adapter checkpoint -> PEFT adapter folder");
  peft->add_option("dir", dir, "Checkpoint directory")->required();
  peft->add_option("out", out, "New folder")->required();
  std::string base;
  auto* merge = app.add_subcommand("merge-lora", "LoRA adapter checkpoint + its base model -> merged Hugging Face folder");
  merge->add_option("dir", dir, "Checkpoint directory")->required();
  merge->add_option("base", base, "The base model folder the adapters were trained on")->required();
  merge->add_option("out", out, "New folder")->required();
  std::string gguf_dtype = "f16";
  auto* gguf = app.add_subcommand("export-gguf", "Checkpoint or Hugging Face folder -> a GGUF file for llama.cpp and Ollama");
  gguf->add_option("src", dir, "Checkpoint directory (full or sharded) or Hugging Face model folder")->required();
  gguf->add_option("out", out, "The .gguf file to write")->required();
  gguf->add_option("--dtype", gguf_dtype, "Type of the matrices (norms, biases and RoPE factors stay f32); default f16")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  gguf->add_option("--tokenizer", tokenizer,
                   "tokenizer.json to embed (default: the folder's, or the one the checkpoint's job trained with)");
  CLI11_PARSE(app, argc, argv);
  // `checkpoints/latest` read once: a job that saves meanwhile moves the link, never this tool's files.
  dir = checkpoint::pinned_dir(dir);
  if (!other.empty()) other = checkpoint::pinned_dir(other);
  // Ctrl-C or TERM during a conversion removes its unfinished output (common/interrupt_cleanup.h).
  common::remove_temporaries_on_interrupt();
  try {
    checkpoint::silence_hdf5_auto_print();
    if (ins->parsed()) return inspect(dir);
    if (con->parsed()) return (tools::consolidate(dir, out), 0);
    if (res->parsed()) return (tools::reshard(dir, out, world_size), 0);
    if (exp->parsed()) return (tools::export_hf(dir, out, dtype, max_shard_bytes, tokenizer), 0);
    if (imp->parsed()) return (tools::import_hf(dir, out), 0);
    if (dif->parsed()) return tools::diff(dir, other, params_only) ? 1 : 0;
    if (peft->parsed()) return (tools::export_peft(dir, out), 0);
    if (merge->parsed()) return (tools::merge_lora(dir, base, out), 0);
    if (gguf->parsed()) return (tools::export_gguf(dir, out, gguf_dtype, tokenizer), 0);
    return verify(dir);
  } catch (const std::exception& e) {
    fmt::print(stderr, "shardtune-ckpt: {}\n", e.what());
    return 2;
  }
}

}  // namespace

int main(int argc, char** argv) {
  common::raise_open_file_limit();  // a 512-rank checkpoint is 512 files; readers keep a share open
  const int code = run_tool(argc, argv);  // every file it wrote is closed
  checkpoint::close_hdf5();
  common::exit_after_flush(code);
}
