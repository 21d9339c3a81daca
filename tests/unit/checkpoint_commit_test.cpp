// The manifest and the commit protocol on hand-made directories: what reads back, what is refused
// (naming the problem), which directories a commit, a prune and a resume may touch, and datasets
// that would read outside their file.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/commit.h"
#include "checkpoint/data_identity.h"
#include "checkpoint/h5_check.h"
#include "checkpoint/h5_dataset.h"
#include "checkpoint/h5_handle.h"
#include "checkpoint/manifest.h"
#include "common/error.h"
#include "error_text.h"
#include "temp_dir.h"

namespace shardtune::checkpoint {
namespace {

namespace fs = std::filesystem;
using testing_support::TempDir;

// Two tensors: w [2, 3] in two slices of two files, b [4] whole in one.
Manifest small_manifest(int64_t step) {
  Manifest m;
  m.step = step;
  m.epoch = 1;
  m.sample_in_epoch = 12;
  m.world_size = 2;
  m.shard_group_size = 2;
  m.job_toml = "[job]\nname = \"t\"\n";
  m.model_config = {{"hidden_size", 8}, {"rope_theta", 500000.0}};
  m.tensors = {{"w", {{2, 3}, "F32"}}, {"b", {{4}, "F32"}}};
  m.slices = {{kParamKind, "w", "rank-00000.h5", "w@0", 0, 4, kCrcBlock, {11}},
              {kParamKind, "w", "rank-00001.h5", "w@4", 4, 2, kCrcBlock, {22}},
              {kParamKind, "b", "rank-00001.h5", "b@0", 0, 4, kCrcBlock, {33}}};
  return m;
}

using testing_support::error_of;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A committed-looking checkpoint: the files its manifest lists (empty) and the manifest.
void commit_step(const std::string& root, int64_t step, int64_t keep_last, std::vector<std::string>* warnings = nullptr) {
  PendingCheckpoint pending(root, step);
  for (const char* f : {"rank-00000.h5", "rank-00001.h5"}) std::ofstream(pending.dir() + "/" + f).put('x');
  const PendingCheckpoint::Committed c = pending.commit(small_manifest(step), keep_last);
  if (warnings) *warnings = c.warnings;
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Manifest, ReadsBackWhatWasWritten) {
  const Manifest m = small_manifest(7);
  const Manifest r = parse_manifest(manifest_text(m), "m.json");
  EXPECT_EQ(r.version, kManifestVersion);
  EXPECT_EQ(r.step, 7);
  EXPECT_EQ(r.sample_in_epoch, 12);
  EXPECT_EQ(r.job_toml, m.job_toml);
  EXPECT_EQ(r.model_config, m.model_config);
  ASSERT_EQ(r.slices.size(), 3u);
  EXPECT_EQ(r.slices[1].file, "rank-00001.h5");
  EXPECT_EQ(r.slices[1].offset, 4);
  EXPECT_EQ(r.slices[1].crcs, std::vector<uint32_t>{22});
  EXPECT_EQ(r.tensors.at("w").shape, (std::vector<int64_t>{2, 3}));
}

// A QLoRA adapter record keeps its quantisation; a LoRA record has none; a bad one is named.
TEST(Manifest, AdapterRecordsKeepTheirQuantisation) {
  Manifest m = small_manifest(3);
  AdapterRecord a;
  a.method = "qlora";
  a.nf4_block_size = 128;
  a.nf4_double_quant = true;
  a.r = 4;
  a.alpha = 8;
  a.target_modules = {"q_proj"};
  a.base_path = "base";
  m.adapter = a;
  const Manifest r = parse_manifest(manifest_text(m), "m.json");
  ASSERT_TRUE(r.adapter.has_value());
  EXPECT_EQ(r.adapter->method, "qlora");
  EXPECT_EQ(r.adapter->nf4_block_size, 128);
  EXPECT_TRUE(r.adapter->nf4_double_quant);
  m.adapter->method = "lora";
  const std::string lora_text = manifest_text(m);
  EXPECT_FALSE(has(lora_text, "quantization")) << lora_text;
  EXPECT_EQ(parse_manifest(lora_text, "m.json").adapter->nf4_block_size, 0);
  m.adapter->method = "dora";
  EXPECT_TRUE(has(error_of([&] { parse_manifest(manifest_text(m), "m.json"); }), "method \"dora\" is not lora or qlora"));
}

TEST(Manifest, SlicesMustTileEachTensorExactly) {
  // One offset off by one: a gap at 4 and an element past the end. The sum of lengths is right.
  Manifest gap = small_manifest(1);
  gap.slices[1].offset = 5;
  const std::string e1 = error_of([&] { parse_manifest(manifest_text(gap), "gap.json"); });
  EXPECT_TRUE(has(e1, "param of w: a gap at element 4")) << e1;
  EXPECT_TRUE(has(e1, "param of w: the slices cover 7 of its 6 elements")) << e1;
  // Overlap in w and a gap in b at once: both are reported in one error.
  Manifest two = small_manifest(1);
  two.slices[1].offset = 3;
  two.slices[1].length = 3;
  two.slices[2].offset = 1;
  two.slices[2].length = 3;
  const std::string e2 = error_of([&] { parse_manifest(manifest_text(two), "two.json"); });
  EXPECT_TRUE(has(e2, "two.json is broken (")) << e2;
  EXPECT_TRUE(has(e2, "param of w: slices overlap at element 4")) << e2;
  EXPECT_TRUE(has(e2, "param of b: a gap at element 0")) << e2;
}

TEST(Manifest, AChangedManifestFailsItsOwnChecksum) {
  std::string text = manifest_text(small_manifest(7));
  const size_t at = text.find("\"step\": 7");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 9, "\"step\": 8");
  EXPECT_TRUE(has(error_of([&] { parse_manifest(text, "m.json"); }), "m.json: the manifest fails its own checksum"));
}

// The commit number read from the head of a manifest equals the full parse's, and nothing else
// is taken for it: no key, a nested "commit", a non-integer, a file that is not JSON.
TEST(Manifest, TheCommitNumberReadFromTheHeadEqualsTheParsedOne) {
  TempDir dir;
  auto write = [&](const std::string& text) { std::ofstream(dir.file("manifest.json")) << text; };
  for (int64_t commit : {1, 7, 123456789}) {
    Manifest m = small_manifest(3);
    m.commit = commit;
    m.adapter = AdapterRecord{};  // an object written before "commit"
    m.adapter->base_path = "b";
    m.adapter->r = 2;
    m.adapter->target_modules = {"q_proj"};
    write(manifest_text(m));
    EXPECT_EQ(read_manifest_commit(dir.path().string()), read_manifest(dir.path().string()).commit);
  }
  write(manifest_text(small_manifest(3)));  // commit 0 is not written
  EXPECT_EQ(read_manifest_commit(dir.path().string()), std::nullopt);
  write(R"({"adapter": {"commit": 5}, "step": 1})");
  EXPECT_EQ(read_manifest_commit(dir.path().string()), std::nullopt);
  write(R"({"commit": [5], "step": 1})");
  EXPECT_EQ(read_manifest_commit(dir.path().string()), std::nullopt);
  write(R"({"commit": "5"})");
  EXPECT_EQ(read_manifest_commit(dir.path().string()), std::nullopt);
  write("not json at all");
  EXPECT_EQ(read_manifest_commit(dir.path().string()), std::nullopt);
  write(R"({"commit": 9, "slices": [)");  // the head reads; the rest is read_manifest's to refuse
  EXPECT_EQ(read_manifest_commit(dir.path().string()), 9);
  fs::remove(dir.file("manifest.json"));
  EXPECT_EQ(read_manifest_commit(dir.path().string()), std::nullopt);
}

TEST(Manifest, FileNamesStayInsideTheCheckpoint) {
  for (const std::string name : {"../rank-00000.h5", "/etc/passwd", "sub/rank.h5", "..", ""}) {
    Manifest m = small_manifest(1);
    m.slices[0].file = name;
    const std::string e = error_of([&] { parse_manifest(manifest_text(m), "m.json"); });
    EXPECT_TRUE(has(e, "not a plain name inside the checkpoint directory")) << name << ": " << e;
  }
}

TEST(Manifest, DeepNestingIsRefusedWithoutRecursingIntoIt) {
  Manifest m = small_manifest(1);
  std::string text = manifest_text(m);
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const size_t at = text.find("\"model_config\": {");
  ASSERT_NE(at, std::string::npos);
  text.insert(at, "\"deep\": " + deep + ",\n ");
  EXPECT_TRUE(has(error_of([&] { parse_manifest(text, "m.json"); }), "m.json: nested more than 16 deep"));
}

TEST(StepNames, CompareAsNumbersPastSevenDigits) {
  EXPECT_EQ(step_dir_name(400), "step-0000400");
  EXPECT_EQ(step_dir_name(10'000'000), "step-10000000");
  EXPECT_EQ(step_of_dir_name("step-10000000"), 10'000'000);
  EXPECT_EQ(step_of_dir_name("step-0000400"), 400);
  for (const char* bad : {"step-", "step-12a", "steps-1", "step--1", "latest", ".tmp-step-0000001-h-1-0"})
    EXPECT_FALSE(step_of_dir_name(bad).has_value()) << bad;
  TempDir root;
  commit_step(root.path().string(), 9'999'999, 0);
  commit_step(root.path().string(), 10'000'000, 0);
  EXPECT_EQ(find_latest_checkpoint(root.path().string()), root.file("step-10000000"));
}

TEST(Commit, LatestSkipsADamagedNewestCheckpoint) {
  TempDir root;
  commit_step(root.path().string(), 10, 0);
  commit_step(root.path().string(), 20, 0);
  std::ofstream(root.file("step-0000020/manifest.json"), std::ios::app) << " ";  // still the same JSON
  EXPECT_EQ(find_latest_checkpoint(root.path().string()), root.file("step-0000020"));
  std::ofstream(root.file("step-0000020/manifest.json")) << "{\"format\": \"shardtune-sharded\"";
  EXPECT_EQ(find_latest_checkpoint(root.path().string()), root.file("step-0000010"));
}

// The issue's rollback: steps 1-4, then a run resumed from step 1 commits 2 and 3 again. The newest
// checkpoint is step 3, which every reader of the rule finds (the ranks' candidates, the batch
// script's position); step 4 of the abandoned history is set aside, not deleted, and never resumed.
TEST(Commit, ARollbackMakesTheNewestCommitTheResumedOneAndSetsTheAbandonedHistoryAside) {
  TempDir root;
  const std::string r = root.path().string();
  for (int64_t step = 1; step <= 4; ++step) commit_step(r, step, 0);
  EXPECT_EQ(newest_position(r).step, 4);
  EXPECT_EQ(newest_position(r).commit, 4);
  commit_step(r, 2, 0);
  commit_step(r, 3, 0);
  const CheckpointPosition newest = newest_position(r);
  EXPECT_EQ(newest.step, 3);
  EXPECT_EQ(newest.commit, 6);
  EXPECT_EQ(read_manifest(root.file("step-0000002")).commit, 5);
  EXPECT_EQ(committed_checkpoints(r), (std::vector<std::string>{root.file("step-0000003"), root.file("step-0000002"),
                                                                root.file("step-0000001")}));
  EXPECT_EQ(find_latest_checkpoint(r), root.file("step-0000003"));
  EXPECT_EQ(fs::read_symlink(root.file("latest")).string(), "step-0000003");
  int abandoned = 0;
  for (const std::string& e : entries(r)) abandoned += e.rfind("step-0000004.abandoned-", 0) == 0 ? 1 : 0;
  EXPECT_EQ(abandoned, 1) << testing::PrintToString(entries(r));
  EXPECT_EQ(read_manifest(r + "/" + entries(r).back()).step, 4);  // kept whole
}

// A crash after the rename and before `latest` moved: the commit numbers still name the newest.
TEST(Commit, TheNewestFollowsCommitNumbersNotTheLatestLink) {
  TempDir root;
  const std::string r = root.path().string();
  commit_step(r, 10, 0);
  commit_step(r, 20, 0);
  fs::remove(root.file("latest"));
  fs::create_directory_symlink("step-0000010", root.file("latest"));
  EXPECT_EQ(newest_position(r).dir, root.file("step-0000020"));
  // A checkpoint from before commit numbers counts its step.
  Manifest old = small_manifest(30);
  EXPECT_EQ(old.commit, 0);
  fs::create_directories(root.file("step-0000030"));
  for (const char* f : {"rank-00000.h5", "rank-00001.h5"}) std::ofstream(root.file(std::string("step-0000030/") + f)).put('x');
  std::ofstream(root.file("step-0000030/manifest.json")) << manifest_text(old);
  EXPECT_EQ(newest_position(r).step, 30);
  EXPECT_EQ(newest_position(r).commit, 30);
}

TEST(Commit, PruneNeverTouchesTheNewCheckpoint) {
  TempDir root;
  const std::string r = root.path().string();
  commit_step(r, 50, 0);
  commit_step(r, 100, 1);
  EXPECT_EQ(entries(r), (std::vector<std::string>{"latest", "step-0000100"}));
  EXPECT_EQ(read_manifest(root.file("latest")).step, 100);
}

TEST(Commit, KeepsTheLastCommittedOnesAndRemovesOldLeftovers) {
  TempDir root;
  const std::string r = root.path().string();
  fs::create_directories(root.file(".tmp-step-0000005-deadhost-1-0"));
  fs::last_write_time(root.file(".tmp-step-0000005-deadhost-1-0"),
                      fs::file_time_type::clock::now() - std::chrono::hours(1));
  fs::create_directories(root.file(".tmp-step-0000040-otherhost-2-0"));  // a save under way elsewhere
  fs::last_write_time(root.file(".tmp-step-0000040-otherhost-2-0"),
                      fs::file_time_type::clock::now() + std::chrono::hours(1));
  for (int64_t step : {10, 20, 30}) commit_step(r, step, 2);
  EXPECT_EQ(entries(r),
            (std::vector<std::string>{".tmp-step-0000040-otherhost-2-0", "latest", "step-0000020", "step-0000030"}));
}

// The same step committed again (a rolled-back or fresh start over the folder): the new one takes
// its name whole, and the old one is set aside with every file it held, never deleted.
TEST(Commit, ASecondCommitOfTheSameStepReplacesItAndSetsTheOldOneAside) {
  TempDir root;
  const std::string r = root.path().string();
  commit_step(r, 10, 0);
  std::ofstream(root.file("step-0000010/stray")) << "from the first commit";
  PendingCheckpoint again(r, 10);
  for (const char* f : {"rank-00000.h5", "rank-00001.h5"}) std::ofstream(again.dir() + "/" + f).put('y');
  Manifest m = small_manifest(10);
  m.epoch = 3;
  const PendingCheckpoint::Committed c = again.commit(m, 1);
  EXPECT_TRUE(c.warnings.empty());
  EXPECT_EQ(read_manifest(root.file("step-0000010")).epoch, 3);
  EXPECT_FALSE(fs::exists(root.file("step-0000010/stray")));
  const std::vector<std::string> all = entries(r);
  ASSERT_EQ(all.size(), 3u) << testing::PrintToString(all);
  EXPECT_EQ(all[0], "latest");
  EXPECT_EQ(all[1], "step-0000010");
  EXPECT_EQ(all[2].rfind("step-0000010.abandoned-", 0), 0u) << all[2];
  EXPECT_TRUE(fs::exists(root.file(all[2] + "/stray")));
  EXPECT_EQ(read_manifest(root.file(all[2])).epoch, 1);
  ASSERT_EQ(c.set_aside.size(), 1u);
  EXPECT_TRUE(has(c.set_aside[0], all[2])) << c.set_aside[0];
  // Numbers only grow: the set-aside one still counts.
  commit_step(r, 11, 0);
  EXPECT_EQ(read_manifest(root.file("step-0000011")).commit, 3);
}

// A step folder that lost its manifest is listed as such, never resumed, and set aside whole (its
// rank files intact) when its step is saved again.
TEST(Commit, AStepFolderWithoutItsManifestIsSetAsideNotDeleted) {
  TempDir root;
  const std::string r = root.path().string();
  commit_step(r, 10, 0);
  commit_step(r, 20, 0);
  fs::remove(root.file("step-0000020/manifest.json"));
  EXPECT_EQ(uncommitted_step_dirs(r), std::vector<std::string>{root.file("step-0000020")});
  EXPECT_EQ(committed_checkpoints(r), std::vector<std::string>{root.file("step-0000010")});
  std::vector<std::string> warnings;
  commit_step(r, 20, 0, &warnings);
  EXPECT_TRUE(warnings.empty()) << testing::PrintToString(warnings);
  EXPECT_TRUE(uncommitted_step_dirs(r).empty());
  int kept = 0;
  for (const std::string& e : entries(r))
    if (e.rfind("step-0000020.abandoned-", 0) == 0) kept += fs::exists(root.file(e + "/rank-00001.h5")) ? 1 : 0;
  EXPECT_EQ(kept, 1) << testing::PrintToString(entries(r));
}

// A tool given checkpoints/latest reads the step folder the link names when it starts, whatever
// the job commits meanwhile: the pinned path names that step, not the link.
TEST(Commit, APathThroughLatestIsPinnedToItsStepFolder) {
  TempDir root;
  const std::string r = root.path().string();
  commit_step(r, 10, 0);
  const std::string pinned = pinned_dir(root.file("latest"));
  EXPECT_EQ(pinned, fs::canonical(root.file("step-0000010")).string());
  commit_step(r, 20, 0);  // `latest` moves on
  EXPECT_EQ(read_manifest(pinned).step, 10);
  EXPECT_EQ(read_manifest(root.file("latest")).step, 20);
  EXPECT_EQ(pinned_dir(root.file("nowhere")), root.file("nowhere"));  // the error names what was given
}

// What a checkpoint records of its data reads back, and a resume's comparison names each deciding
// item that differs, with the token file's inputs that differ when the tokens do; the inputs alone
// (a copied data file) change nothing.
TEST(Manifest, DataIdentityReadsBackAndItsChangesAreNamed) {
  Manifest m = small_manifest(5);
  m.data.decides = {{"training tokens", "10 examples, 99 tokens, checksum 00ff"}, {"train.seed", "42"}};
  m.data.made_from = {{"data", "/d/a.json size=10"}, {"split", "val_fraction=0.1 seed=42"}};
  const Manifest r = parse_manifest(manifest_text(m), "m.json");
  EXPECT_EQ(r.data.decides, m.data.decides);
  EXPECT_EQ(r.data.made_from, m.data.made_from);
  EXPECT_TRUE(parse_manifest(manifest_text(small_manifest(5)), "m.json").data.empty());
  data::DataIdentity now = m.data;
  now.made_from["data"] = "/elsewhere/a.json size=10";
  EXPECT_TRUE(data_changes(m.data, now).empty());
  EXPECT_TRUE(data_changes(data::DataIdentity{}, now).empty());  // a checkpoint from before identities
  // The sources' order, recorded since some checkpoint: one without it cannot tell.
  now.decides["source order"] = "b, a";
  EXPECT_TRUE(data_changes(m.data, now).empty());
  data::DataIdentity ordered = m.data;
  ordered.decides["source order"] = "a, b";
  EXPECT_EQ(data_changes(ordered, now), std::vector<std::string>{"source order: a, b in the checkpoint, b, a now"});
  now.decides.erase("source order");
  now.decides["train.seed"] = "7";
  EXPECT_EQ(data_changes(m.data, now), std::vector<std::string>{"train.seed: 42 in the checkpoint, 7 now"});
  now.decides["training tokens"] = "9 examples, 90 tokens, checksum 0a0a";
  now.made_from["split"] = "val_fraction=0.2 seed=7";
  EXPECT_EQ(data_changes(m.data, now),
            (std::vector<std::string>{
                "train.seed: 42 in the checkpoint, 7 now",
                "training tokens: 10 examples, 99 tokens, checksum 00ff in the checkpoint, 9 examples, 90 tokens, "
                "checksum 0a0a now",
                "the token file's data: /d/a.json size=10 in the checkpoint, /elsewhere/a.json size=10 now",
                "the token file's split: val_fraction=0.1 seed=42 in the checkpoint, val_fraction=0.2 seed=7 now"}));
  nlohmann::json bad = nlohmann::json::parse(manifest_text(m));
  bad["data"]["decides"]["train.seed"] = 42;
  bad.erase("manifest_crc32");
  EXPECT_TRUE(has(error_of([&] { parse_manifest(bad.dump(), "m.json"); }), "data is not"));
}

TEST(Commit, AnUncommittedSaveLeavesNothing) {
  TempDir root;
  const std::string r = root.path().string();
  commit_step(r, 10, 0);
  {
    PendingCheckpoint abandoned(r, 20);
    std::ofstream(abandoned.dir() + "/rank-00000.h5").put('x');
  }
  Manifest wrong = small_manifest(20);
  {
    PendingCheckpoint missing_file(r, 20);  // the manifest lists files that were never written
    EXPECT_TRUE(has(error_of([&] { missing_file.commit(wrong, 1); }), "which is not in"));
  }
  EXPECT_EQ(entries(r), (std::vector<std::string>{"latest", "step-0000010"}));
  EXPECT_EQ(find_latest_checkpoint(r), root.file("step-0000010"));
}

TEST(Commit, AToolNeverReplacesADirectory) {
  TempDir root;
  PendingDirectory out(root.file("consolidated"));
  for (const char* f : {"rank-00000.h5", "rank-00001.h5"}) std::ofstream(out.dir() + "/" + f).put('x');
  out.commit(small_manifest(3));
  EXPECT_EQ(read_manifest(root.file("consolidated")).step, 3);
  EXPECT_TRUE(has(error_of([&] { PendingDirectory again(root.file("consolidated/")); }), "is not an empty folder"));
  EXPECT_EQ(entries(root.path().string()), std::vector<std::string>{"consolidated"});
}

// HDF5 files whose /param/x is not data of the file itself.
class OutsideTheFile : public ::testing::Test {
 protected:
  void SetUp() override {
    const hsize_t n = 4;
    const float values[4] = {1, 2, 3, 4};
    H5Handle other(ST_H5_CHECK(H5Fcreate(dir_.file("other.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)),
                   H5Fclose);
    H5Handle space(ST_H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose);
    H5Handle d(ST_H5_CHECK(H5Dcreate2(other.get(), "/x", H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT,
                                      H5P_DEFAULT)),
               H5Dclose);
    ST_H5_CHECK(H5Dwrite(d.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values));
  }
  // A file with /param holding `make`'s link or dataset under "x", and a plain dataset "y".
  std::string file_with(const std::function<void(hid_t group)>& make) {
    const std::string path = dir_.file("ckpt.h5");
    H5Handle f(ST_H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)), H5Fclose);
    H5Handle g(ST_H5_CHECK(H5Gcreate2(f.get(), "/param", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
    const hsize_t n = 4;
    H5Handle space(ST_H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose);
    H5Handle y(ST_H5_CHECK(H5Dcreate2(g.get(), "y", H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
               H5Dclose);
    make(g.get());
    return path;
  }
  std::string open_error(const std::string& path) {
    H5Handle f(ST_H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)), H5Fclose);
    EXPECT_NO_THROW(open_checked_dataset(f.get(), "param", "y"));
    return error_of([&] { open_checked_dataset(f.get(), "param", "x"); });
  }
  TempDir dir_;
};

TEST_F(OutsideTheFile, AnExternalLinkIsRefused) {
  const std::string other = dir_.file("other.h5");
  const std::string path =
      file_with([&](hid_t g) { ST_H5_CHECK(H5Lcreate_external(other.c_str(), "/x", g, "x", H5P_DEFAULT, H5P_DEFAULT)); });
  EXPECT_TRUE(has(open_error(path), "/param/x is a link to another file")) << open_error(path);
}

TEST_F(OutsideTheFile, ASoftLinkIsRefused) {
  const std::string path = file_with([](hid_t g) { ST_H5_CHECK(H5Lcreate_soft("/param/y", g, "x", H5P_DEFAULT, H5P_DEFAULT)); });
  EXPECT_TRUE(has(open_error(path), "/param/x is a soft link")) << open_error(path);
}

TEST_F(OutsideTheFile, ExternalStorageIsRefused) {
  std::ofstream(dir_.file("raw.bin"), std::ios::binary) << std::string(16, '\0');
  const std::string raw = dir_.file("raw.bin");
  const std::string path = file_with([&](hid_t g) {
    const hsize_t n = 4;
    H5Handle space(ST_H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose);
    H5Handle dcpl(ST_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose);
    ST_H5_CHECK(H5Pset_external(dcpl.get(), raw.c_str(), 0, 16));
    H5Handle d(ST_H5_CHECK(H5Dcreate2(g, "x", H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT)),
               H5Dclose);
  });
  EXPECT_TRUE(has(open_error(path), "/param/x keeps its data in external files")) << open_error(path);
}

}  // namespace
}  // namespace shardtune::checkpoint
