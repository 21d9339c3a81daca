// metrics.jsonl records read back by a JSON parser, MFU against its formula, the GPU peak table,
// the per-step peak of resident memory against a known allocation, metrics.jsonl trimmed on
// resume, and the llama-recipes view computed by hand.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/process_memory.h"
#include "runtime/train/metrics_file.h"
#include "runtime/train/step_metrics.h"
#include "tests/unit/temp_dir.h"

namespace shardtune::train {
namespace {

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(StepMetrics, TrainingRecordReadsBackWithEveryField) {
  StepRecord r{7, 2, 48, 56, 1.25, 3e-4};
  r.grad_norm = 0.5;
  r.tokens = 8 * 512;
  r.flops = 1e12;
  r.step_seconds = 2.0;
  r.comm_wait_seconds = 0.25;
  r.data_wait_seconds = 0.5;
  r.mfu = 0.125;
  r.peak_rss_bytes = int64_t{3} << 30;
  const std::string line = jsonl_line(r);
  ASSERT_EQ(line.back(), '\n');
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["step"], 7);
  EXPECT_EQ(j["epoch"], 2);
  EXPECT_EQ(j["samples"], nlohmann::json::array({48, 56}));
  EXPECT_DOUBLE_EQ(j["loss"].get<double>(), 1.25);
  EXPECT_DOUBLE_EQ(j["lr"].get<double>(), 3e-4);
  EXPECT_DOUBLE_EQ(j["grad_norm"].get<double>(), 0.5);
  EXPECT_EQ(j["tokens"], 4096);
  EXPECT_DOUBLE_EQ(j["flops"].get<double>(), 1e12);
  EXPECT_DOUBLE_EQ(j["compute_seconds"].get<double>(), 1.25);  // 2 - 0.25 - 0.5
  EXPECT_DOUBLE_EQ(j["tokens_per_second"].get<double>(), 2048.0);
  EXPECT_DOUBLE_EQ(j["mfu"].get<double>(), 0.125);
  EXPECT_EQ(j["peak_rss_bytes"], int64_t{3} << 30);
  // Without fp16 and without a GPU, their fields are left out rather than written as zeros.
  for (const char* absent : {"loss_scale", "skipped", "gpu_peak_allocated_bytes", "gpu_peak_reserved_bytes"})
    EXPECT_FALSE(j.contains(absent)) << absent;
  // What two identical runs share comes before step_seconds; timings and memory after it.
  EXPECT_LT(line.find("\"flops\""), line.find("\"step_seconds\""));
  EXPECT_LT(line.find("\"step_seconds\""), line.find("\"peak_rss_bytes\""));
}

TEST(StepMetrics, Fp16AndGpuFieldsAndANonFiniteLoss) {
  StepRecord r{1, 1, 0, 4, std::nan(""), 1e-4};
  r.loss_scale = 65536.0;
  r.skipped = true;
  r.gpu_peak_allocated_bytes = 1000;
  r.gpu_peak_reserved_bytes = 2048;
  const nlohmann::json j = nlohmann::json::parse(jsonl_line(r));
  EXPECT_TRUE(j["loss"].is_null());
  EXPECT_DOUBLE_EQ(j["loss_scale"].get<double>(), 65536.0);
  EXPECT_EQ(j["skipped"], true);
  EXPECT_EQ(j["gpu_peak_allocated_bytes"], 1000);
  EXPECT_EQ(j["gpu_peak_reserved_bytes"], 2048);
  EXPECT_FALSE(j.contains("mfu"));
}

TEST(StepMetrics, EvaluationRecordHasPerplexity) {
  const nlohmann::json j = nlohmann::json::parse(jsonl_line(EvalRecord{3, 120, 0.75, 4, 30, 412}));
  EXPECT_EQ(j["val_rows"], 30);
  EXPECT_EQ(j["val_tokens"], 412);
  EXPECT_EQ(j["eval_epoch"], 3);
  EXPECT_EQ(j["after_step"], 120);
  EXPECT_DOUBLE_EQ(j["val_loss"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j["val_perplexity"].get<double>(), std::exp(0.75));
  EXPECT_EQ(j["val_batches"], 4);
  EXPECT_FALSE(j.contains("step"));  // readers of training records tell the two apart by "step"
}

TEST(StepMetrics, MfuIsAchievedFlopsOverThePeakOfAllRanks) {
  // 4 ranks of a 989 TFLOP/s GPU doing 1.978e15 FLOPs in 2 s: 1/4 of one GPU's peak each.
  EXPECT_DOUBLE_EQ(model_flops_utilisation(1.978e15, 2.0, 989e12, 4), 0.25);
  EXPECT_EQ(model_flops_utilisation(1e12, 0.0, 989e12, 1), 0.0);
}

TEST(StepMetrics, GpuPeaksByTheNamesCudaReports) {
  EXPECT_EQ(gpu_bf16_peak_flops("NVIDIA H100 80GB HBM3"), 989e12);
  EXPECT_EQ(gpu_bf16_peak_flops("NVIDIA H100 PCIe"), 756e12);
  EXPECT_EQ(gpu_bf16_peak_flops("NVIDIA H100 NVL"), 835e12);
  EXPECT_EQ(gpu_bf16_peak_flops("NVIDIA H200"), 989e12);
  EXPECT_EQ(gpu_bf16_peak_flops("NVIDIA A100-SXM4-80GB"), 312e12);
  EXPECT_EQ(gpu_bf16_peak_flops("NVIDIA L40S"), 362e12);
  EXPECT_EQ(gpu_bf16_peak_flops("Tesla V100-SXM2-32GB"), std::nullopt);
  EXPECT_EQ(gpu_bf16_peak_flops("cpu"), std::nullopt);
}

TEST(ProcessMemory, PeakSeesAKnownAllocationAndResets) {
  constexpr int64_t kBlock = int64_t{256} << 20;
  common::reset_peak_resident();
  const int64_t before = common::resident_bytes();
  char* block = static_cast<char*>(std::malloc(kBlock));
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBlock);  // resident only once touched
  asm volatile("" : : "r"(block) : "memory");  // the compiler may not leave the writes out
  const int64_t with_block = common::resident_bytes();
  std::free(block);  // a block this large is its own mapping: free returns it to the system
  const int64_t peak = common::peak_resident_bytes();
  EXPECT_GE(with_block - before, kBlock - (int64_t{4} << 20));
  EXPECT_GE(peak, before + kBlock - (int64_t{4} << 20));
  EXPECT_LE(peak, with_block + (int64_t{16} << 20));
  common::reset_peak_resident();
  EXPECT_LT(common::peak_resident_bytes(), before + kBlock / 2) << "the peak did not reset to what is resident now";
}

TEST(MetricsFile, TrimKeepsTheStepsUpToTheCheckpointAndDropsACutLine) {
  testing_support::TempDir dir;
  const std::string path = dir.file("metrics.jsonl");
  {
    std::ofstream out(path);
    for (int s = 1; s <= 5; ++s) out << jsonl_line(StepRecord{s, 1, 0, 0, 1.0 / s, 1e-3});
    out << jsonl_line(EvalRecord{1, 3, 0.5, 1}) << jsonl_line(EvalRecord{1, 5, 0.4, 1}) << "{\"step\": 6, \"ep";
  }
  trim_metrics(path, 3);
  const std::vector<std::string> kept = lines_of(path);
  ASSERT_EQ(kept.size(), 4u);
  for (int s = 1; s <= 3; ++s) EXPECT_EQ(nlohmann::json::parse(kept[s - 1])["step"], s);
  EXPECT_EQ(nlohmann::json::parse(kept[3])["after_step"], 3);
  trim_metrics(dir.file("absent.jsonl"), 3);  // nothing to trim: no error, no file
  EXPECT_FALSE(std::filesystem::exists(dir.file("absent.jsonl")));
}

TEST(MetricsFile, LlamaRecipesLayoutComputedByHand) {
  testing_support::TempDir dir;
  const std::string path = dir.file("metrics.jsonl");
  {
    std::ofstream out(path);
    out << jsonl_line(StepRecord{1, 1, 0, 0, 2.0, 1e-3}) << jsonl_line(StepRecord{2, 1, 0, 0, 1.0, 1e-3})
        << jsonl_line(EvalRecord{1, 2, 1.5, 1}) << jsonl_line(StepRecord{3, 2, 0, 0, 0.5, 1e-3})
        << jsonl_line(EvalRecord{2, 3, 0.25, 1});
  }
  write_recipes_metrics(path, dir.file("metrics_data.json"));
  std::ifstream in(dir.file("metrics_data.json"));
  const nlohmann::json m = nlohmann::json::parse(in);
  auto doubles = [&](const char* key) { return m.at(key).get<std::vector<double>>(); };
  EXPECT_EQ(doubles("train_step_loss"), (std::vector<double>{2.0, 1.0, 0.5}));
  EXPECT_EQ(doubles("train_step_perplexity"), (std::vector<double>{std::exp(2.0), std::exp(1.0), std::exp(0.5)}));
  EXPECT_EQ(doubles("train_epoch_loss"), (std::vector<double>{1.5, 0.5}));
  EXPECT_EQ(doubles("train_epoch_perplexity"), (std::vector<double>{std::exp(1.5), std::exp(0.5)}));
  EXPECT_EQ(doubles("val_epoch_loss"), (std::vector<double>{1.5, 0.25}));
  EXPECT_EQ(doubles("val_epoch_perplexity"), (std::vector<double>{std::exp(1.5), std::exp(0.25)}));
  EXPECT_EQ(doubles("val_step_loss"), (std::vector<double>{1.5, 0.25}));
  EXPECT_EQ(doubles("val_step_perplexity"), (std::vector<double>{std::exp(1.5), std::exp(0.25)}));
}

}  // namespace
}  // namespace shardtune::train
