// The resolved job file and the job-file reference page.
#include "common/job/job_writer.h"

#include <fmt/format.h>

#include "common/job/data_sources.h"
#include "common/job/no_effect.h"
#include "common/job/schema.h"

namespace shardtune::job {

std::string to_toml(const Job& job) {
  std::string out;
  for (const SectionSpec& section : job_schema()) {
    out += fmt::format("{}[{}]\n", out.empty() ? "" : "\n", section.name);
    for (const FieldSpec& field : section.fields) out += fmt::format("{} = {}\n", field.key, field.literal(job));
    if (section.name == "data") out += data_sources_toml(job);
  }
  return out;
}

std::string schema_markdown() {
  const Job defaults;
  std::string out =
      "# The job file\n\n"
      "A shardtune job is one TOML file. Every key is optional except `[job] name` and one of\n"
      "`[model] path` / `[model] preset`. Precedence: `--set section.key=value` on the command line >\n"
      "the job file > the defaults below. `shardtune validate job.toml` prints the resolved job with\n"
      "every default filled in, or every error at once with file, line and column.\n\n"
      "This page is generated from the schema (`shardtune schema > docs/job-file.md`); a test keeps\n"
      "it in step with the code.\n";
  for (const SectionSpec& section : job_schema()) {
    out += fmt::format("\n## [{}]\n\n{}\n\n", section.name, section.doc);
    out += "| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n";
    for (const FieldSpec& field : section.fields) {
      std::string allowed = field.constraint;
      if (!field.choices.empty()) allowed = fmt::format("{}", fmt::join(field.choices, ", "));
      std::string def = field.literal(defaults);
      // Table cells cannot hold a bare '|'.
      for (std::string* cell : {&allowed, &def}) {
        for (size_t pos = 0; (pos = cell->find('|', pos)) != std::string::npos; pos += 2) cell->replace(pos, 1, "\\|");
      }
      out += fmt::format("| `{}` | {} | `{}` | {} | {} |\n", field.key, field.type_name, def, allowed, field.doc);
    }
    if (section.name == "data") out += data_sources_markdown();
  }
  out +=
      "\n## Cross-field rules\n\n"
      "- `[model]`: exactly one of `path` and `preset`; a preset has no weights, so it needs `init = \"random\"`.\n"
      "- `[slurm]`: with GPUs, `ntasks_per_node` equals `gpus_per_node` (one rank per GPU); "
      "`signal_lead_s` is shorter than `time` (as Slurm counts it: seconds rounded up to whole minutes); "
      "`min_nodes` is at most `nodes`. `time` = `\"0\"`, `\"UNLIMITED\"`, `\"INFINITE\"` or `\"-1\"` asks for no "
      "limit, as sbatch reads them.\n"
      "- `[fsdp]`: with `HYBRID_SHARD`, the shard group size (`hsdp_shard_size`, default the ranks of one "
      "node) divides the world size (`nodes` x ranks per node).\n"
      "- `[train]`: `use_fp16` and `pure_bf16` exclude each other; `use_fp16` needs `mixed_precision` and a GPU "
      "(`device = \"cpu\"` is refused; a rank that finds no GPU under `device = \"auto\"` refuses it too); "
      "`num_freeze_layers` (and `[fsdp]` `uncheckpointed_blocks`) is at most the model's blocks (checked where its config.json can be read: by `validate`, "
      "`run` and `submit` when the model folder is on this machine, and by every rank before training); the "
      "`adafactor_*` keys keep their defaults unless `optimizer = \"adafactor\"` (a value of their own would be "
      "ignored, so it is refused); `adafactor_warmup_init` needs `adafactor_relative_step`, and a relative step "
      "refuses `lr`, `lr_scheduler`, `gamma` and `warmup_steps` of its own, which it would ignore.\n"
      "- Every float key is a finite number: `inf` and `nan` are refused.\n"
      "- `[data]`: every format but `synthetic` needs `train_file`, and a tokenizer (`tokenizer`, or the model "
      "folder's); `train_file`, `val_file` or `tokenizer` given without a format (so with synthetic data, which "
      "reads no file) is refused; `prompt_template` must parse (`{field}` placeholders, `{{` and `}}` for braces).\n"
      "- `[peft]`: with `method = \"none\"`, the LoRA keys keep their defaults (a value of their own would be "
      "ignored, so it is refused); `freeze_layers` does not go with LoRA, which freezes the whole base.\n"
      "- Keys that llama-recipes or PEFT spell differently (`use_peft`, `peft_method`, `from_peft_checkpoint` "
      "in `[train]`, `r` in `[peft]`, ...) are refused with the key to use instead.\n"
      "\n### Keys without effect\n\n"
      "A key given a value of its own where another key makes it meaningless is warned about, naming both:\n\n"
      "| key | has no effect with |\n|---|---|\n";
  for (const NoEffectRule& rule : no_effect_rules()) out += fmt::format("| `{}` | {} |\n", rule.key, rule.when);
  return out;
}

}  // namespace shardtune::job
