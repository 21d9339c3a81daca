// A rank lost while the weights stream into shards, for the load watchdog test. 3 ranks, a
// collective timeout of 2 s, a tiny model in rounds of 4 KiB (many rounds).
//   reader: the ranks share a node; its reader hangs in its file system at the second round, so
//           the others wait in the node's barrier.
//   remote: every rank a node of its own and world rank 0 the one reader; it hangs at the second
//           round, so the others wait for their parts as messages.
//   absent: rank 2 never starts loading; the others wait for it as the load begins.
// Expected: the waiting ranks fail within seconds with an error naming the lost rank, and the
// job ends.
#include <fmt/format.h>

#include <chrono>
#include <string>
#include <thread>

#include "checkpoint/hf/hf_tensor_source.h"
#include "checkpoint/hf/hf_writer.h"
#include "common/error.h"
#include "runtime/dist/mpi_runtime.h"
#include "runtime/dist/process_groups.h"
#include "runtime/fsdp/fsdp_options.h"
#include "runtime/fsdp/shard_loader.h"
#include "runtime/model/init.h"

using namespace shardtune;

namespace {

// The source of the folder, hanging (a node whose file system stopped answering) at its second
// batch of reads.
class HangingSource final : public fsdp::TensorSource {
 public:
  explicit HangingSource(const std::string& dir) : inner_(dir) {}
  std::vector<fsdp::SourceTensor> tensors() const override { return inner_.tensors(); }
  void read(const std::string& name, int64_t offset, int64_t count, at::ScalarType dtype, void* dst) override {
    inner_.read(name, offset, count, dtype, dst);
  }
  std::vector<std::string> storage_order() const override { return inner_.storage_order(); }
  void read_batch(std::vector<fsdp::ReadRequest> requests) override {
    if (++batches_ == 2) {
      fmt::print(stderr, "rank 0: the reader hangs in round 2\n");
      std::this_thread::sleep_for(std::chrono::seconds(60));
    }
    inner_.read_batch(std::move(requests));
  }
  uint64_t bytes_read() const override { return inner_.bytes_read(); }

 private:
  checkpoint::HfTensorSource inner_;
  int batches_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  dist::MpiRuntime mpi(&argc, &argv);
  const std::string scenario = argc > 1 ? argv[1] : "reader";
  const std::string dir = argc > 2 ? argv[2] : "";
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  common::set_process_identity({"", rank, size, 0, rank});
  const model::LlamaConfig cfg = model::LlamaConfig::tiny();
  try {
    if (rank == 0) {
      model::LlamaForCausalLM m(cfg, at::TensorOptions().dtype(at::kFloat));
      model::init_weights(m, 17);
      std::vector<std::pair<std::string, at::Tensor>> tensors;
      for (const model::NamedParam& p : m.named_parameters()) tensors.emplace_back(p.name, *p.tensor);
      checkpoint::write_hf_folder(dir, tensors, cfg.to_json(), "", 400'000);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    dist::ProcessGroups groups = dist::make_mpi_groups(MPI_COMM_WORLD, size, 2.0);
    job::Job job;
    job.slurm.ntasks_per_node = size;
    const fsdp::FsdpOptions options = fsdp::fsdp_options(job.fsdp, job.train, size, size);
    model::LlamaForCausalLM skeleton(cfg, at::TensorOptions().device(at::kMeta));
    fsdp::FsdpLlama sharded(skeleton, groups, options);
    if (scenario == "absent" && rank == 2) {
      std::this_thread::sleep_for(std::chrono::seconds(60));
      return 0;
    }
    fsdp::LoadOptions load;
    load.stage_bytes = 4096;
    if (scenario == "remote") {
      load.reader_per_node = false;
      load.node = rank;
    }
    fsdp::load_shards(sharded, [&] { return std::make_unique<HangingSource>(dir); }, load);
    fmt::print(stderr, "rank {}: loaded\n", rank);
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "rank {} CAUGHT {}\n", rank, e.what());
    dist::MpiRuntime::abort(3);
  }
}
