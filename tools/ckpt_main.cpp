// shardtune-ckpt: inspects and verifies shardtune checkpoints.
//   shardtune-ckpt inspect DIR   step, world size, layout, every tensor with shape, dtype and bytes
//   shardtune-ckpt verify DIR    every slice read back and checked against its CRC-32
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "checkpoint/h5_check.h"
#include "checkpoint/sharded_checkpoint.h"

using namespace shardtune;

namespace {

int inspect(const std::string& dir) {
  const nlohmann::json m = checkpoint::read_checkpoint_manifest(dir);
  fmt::print("{}: shardtune sharded checkpoint, format version {}\n", dir, m.at("version").get<int>());
  fmt::print("step {} (epoch {}, step {} of it); saved by {} ranks in shard groups of {}; optimizer state: {}\n",
             m.at("step").get<int64_t>(), m.at("epoch").get<int64_t>() + 1, m.at("step_in_epoch").get<int64_t>(),
             m.at("world_size").get<int>(), m.at("shard_group_size").get<int>(),
             m.value("has_optimizer", false) ? "yes" : "no");
  std::map<std::string, int64_t> files;
  for (const auto& s : m.at("slices")) files[s.at("file")] += s.at("length").get<int64_t>() * 4;
  int64_t total = 0;
  fmt::print("{:<56} {:<18} {:>5} {:>12}\n", "tensor", "shape", "dtype", "bytes");
  for (const auto& [name, t] : m.at("tensors").items()) {
    const auto shape = t.at("shape").get<std::vector<int64_t>>();
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    total += n * 4;
    fmt::print("{:<56} {:<18} {:>5} {:>12}\n", name, fmt::format("[{}]", fmt::join(shape, ", ")),
               t.at("dtype").get<std::string>(), n * 4);
  }
  fmt::print("{} tensors, {:.3f} GB of parameters; {} files:\n", m.at("tensors").size(), static_cast<double>(total) / 1e9,
             files.size());
  for (const auto& [file, bytes] : files) fmt::print("  {} ({:.3f} GB with optimizer state)\n", file, static_cast<double>(bytes) / 1e9);
  return 0;
}

int verify(const std::string& dir) {
  const checkpoint::VerifyReport r = checkpoint::verify_sharded_checkpoint(dir);
  for (const std::string& p : r.problems) fmt::print(stderr, "BAD {}\n", p);
  fmt::print("{}: {} slices, {:.3f} GB read, {} bad\n", dir, r.slices, static_cast<double>(r.bytes) / 1e9,
             r.problems.size());
  return r.problems.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shardtune-ckpt: inspect and verify shardtune checkpoints"};
  app.require_subcommand(1);
  std::string dir;
  auto* ins = app.add_subcommand("inspect", "Step, world size, layout and tensors of a checkpoint");
  ins->add_option("dir", dir, "Checkpoint directory (step-NNNNNNN)")->required();
  auto* ver = app.add_subcommand("verify", "Read every slice back and check its CRC-32");
  ver->add_option("dir", dir, "Checkpoint directory (step-NNNNNNN)")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    checkpoint::silence_hdf5_auto_print();
    if (ins->parsed()) return inspect(dir);
    return verify(dir);
  } catch (const std::exception& e) {
    fmt::print(stderr, "shardtune-ckpt: {}\n", e.what());
    return 2;
  }
}
