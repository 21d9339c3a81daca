// Streaming shard loader.
#include "runtime/fsdp/shard_loader.h"

#include <ATen/ops/empty.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <thread>

#include <sched.h>

#include "common/error.h"
#include "runtime/dist/mpi_check.h"
#include "runtime/dist/mpi_text.h"

namespace shardtune::fsdp {
namespace {

using Clock = std::chrono::steady_clock;
using common::ErrorKind;
constexpr int64_t kMessageBytes = int64_t(1) << 30;  // MPI counts are ints: send in pieces

// Waits without spinning: ranks waiting for their turn must leave the cores to the reader (on a
// node with fewer cores than ranks, busy-waiting receivers starve it).
void wait_politely(MPI_Request& request) {
  for (int polls = 0;; ++polls) {
    int done = 0;
    ST_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (polls < 100) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

void send_bytes(const char* data, int64_t bytes, int dest, MPI_Comm comm) {
  for (int64_t done = 0; done < bytes; done += kMessageBytes) {
    MPI_Request req;
    ST_MPI_CHECK(MPI_Isend(data + done, static_cast<int>(std::min(kMessageBytes, bytes - done)), MPI_BYTE, dest, 0,
                           comm, &req));
    wait_politely(req);
  }
}

void recv_bytes(char* data, int64_t bytes, int source, MPI_Comm comm) {
  for (int64_t done = 0; done < bytes; done += kMessageBytes) {
    MPI_Request req;
    ST_MPI_CHECK(MPI_Irecv(data + done, static_cast<int>(std::min(kMessageBytes, bytes - done)), MPI_BYTE, source, 0,
                           comm, &req));
    wait_politely(req);
  }
}

std::string duration_text(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  return fmt::format("{}:{:02d}:{:02d}", s / 3600, (s / 60) % 60, s % 60);
}

}  // namespace

std::vector<std::string> weight_mismatches(model::LlamaForCausalLM& model, const checkpoint::TensorSource& source) {
  std::map<std::string, checkpoint::SourceTensor> have;
  for (const checkpoint::SourceTensor& t : source.tensors()) have.emplace(t.name, t);
  auto where = [&](const std::string& name) {
    const std::string file = source.location(name);
    return file.empty() ? std::string() : " in " + file;
  };
  std::vector<std::string> problems;
  std::set<std::string> needed;
  for (const model::NamedParam& p : model.named_parameters()) {
    const std::vector<int64_t> shape(p.tensor->sizes().begin(), p.tensor->sizes().end());
    needed.insert(p.name);
    auto it = have.find(p.name);
    if (it == have.end()) {
      problems.push_back(fmt::format("missing tensor {} (shape [{}])", p.name, fmt::join(shape, ", ")));
      continue;
    }
    if (it->second.shape != shape)
      problems.push_back(fmt::format("{} has shape [{}]{}, but config.json implies [{}]", p.name,
                                     fmt::join(it->second.shape, ", "), where(p.name), fmt::join(shape, ", ")));
    if (!checkpoint::is_trainable_dtype(it->second.dtype))
      problems.push_back(fmt::format("{} is stored as {}{}: only F32, F16, BF16 and F64 weights can be trained "
                                     "(quantized checkpoints are not supported)",
                                     p.name, checkpoint::to_string(it->second.dtype), where(p.name)));
  }
  for (const auto& [name, t] : have)
    if (!needed.count(name) && !(name == "lm_head.weight" && model.config().tie_word_embeddings))
      problems.push_back(fmt::format("unexpected tensor {}{} (not part of this Llama config)", name, where(name)));
  return problems;
}

void validate_source(model::LlamaForCausalLM& model, const SourceFactory& open_source, MPI_Comm world) {
  int world_rank = 0;
  ST_MPI_CHECK(MPI_Comm_rank(world, &world_rank));
  std::string problem;
  if (world_rank == 0) {
    try {
      const std::vector<std::string> problems = weight_mismatches(model, *open_source());
      if (!problems.empty())
        problem = fmt::format("the weights do not match the model ({} problem(s)):\n  {}", problems.size(),
                              fmt::join(problems, "\n  "));
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  problem = dist::broadcast_text(problem, world);
  if (!problem.empty()) common::raise(ErrorKind::kConfig, problem);
}

LoadStats load_shards(FsdpLlama& model, const SourceFactory& open_source, MPI_Comm world, const LoadOptions& options) {
  const auto start = Clock::now();
  int world_rank = 0;
  ST_MPI_CHECK(MPI_Comm_rank(world, &world_rank));
  MPI_Comm readers_group = MPI_COMM_NULL;  // the ranks one reader serves
  if (options.reader_per_node) {
    ST_MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &readers_group));
  } else {
    ST_MPI_CHECK(MPI_Comm_dup(world, &readers_group));
  }
  int me = 0, members = 0;
  ST_MPI_CHECK(MPI_Comm_rank(readers_group, &me));
  ST_MPI_CHECK(MPI_Comm_size(readers_group, &members));
  const bool reader = me == 0;
  const std::vector<FlatParam*> flats = model.flat_params();

  std::unique_ptr<checkpoint::TensorSource> source;
  if (reader) source = open_source();

  // Which shard each member of the group needs (its rank in its shard group).
  const int my_shard = flats.empty() ? 0 : flats.front()->shard_rank();
  std::vector<int> shard_of(static_cast<size_t>(members));
  ST_MPI_CHECK(MPI_Allgather(&my_shard, 1, MPI_INT, shard_of.data(), 1, MPI_INT, readers_group));

  auto last_log = Clock::now();
  at::Tensor send_buffer;
  for (size_t i = 0; i < flats.size(); ++i) {
    FlatParam& flat = *flats[i];
    at::Tensor& shard = flat.shard();
    const int64_t bytes = shard.nbytes();
    if (!reader) {
      recv_bytes(static_cast<char*>(shard.data_ptr()), bytes, 0, readers_group);
      continue;
    }
    // One shard-sized buffer, reused for every shard of every unit: memory stays within one unit
    // whatever the model, and no memory is allocated (and faulted in) per transfer.
    for (int s : std::set<int>(shard_of.begin(), shard_of.end())) {
      at::Tensor buffer;
      if (s == my_shard) {
        buffer = shard;
      } else {
        if (send_buffer.numel() < shard.numel() || send_buffer.scalar_type() != shard.scalar_type())
          send_buffer = at::empty({shard.numel()}, shard.options());
        buffer = send_buffer.narrow(0, 0, shard.numel());
      }
      const int64_t esize = static_cast<int64_t>(buffer.element_size());
      int64_t filled = 0;
      for (const ShardPiece& piece : flat.layout().pieces_in_shard(s)) {
        const ParamSpan& p = flat.layout().params()[piece.param];
        source->read(p.name, piece.param_offset, piece.length, buffer.scalar_type(),
                     static_cast<char*>(buffer.data_ptr()) + piece.shard_offset * esize);
        filled = piece.shard_offset + piece.length;
      }
      buffer.narrow(0, filled, buffer.numel() - filled).zero_();  // padding
      for (int j = 1; j < members; ++j)
        if (shard_of[static_cast<size_t>(j)] == s) send_bytes(static_cast<const char*>(buffer.data_ptr()), bytes, j, readers_group);
    }
    if (world_rank == 0 && (Clock::now() - last_log > std::chrono::seconds(5) || i + 1 == flats.size())) {
      last_log = Clock::now();
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      const double gb = static_cast<double>(source->bytes_read()) / 1e9;
      const double done_fraction = static_cast<double>(i + 1) / static_cast<double>(flats.size());
      spdlog::info("loading: {}/{} flat parameters, {:.2f} GB read, {:.2f} GB/s, ETA {}", i + 1, flats.size(), gb,
                   gb / std::max(seconds, 1e-9), duration_text(seconds / done_fraction - seconds));
    }
  }
  MPI_Comm_free(&readers_group);
  LoadStats stats;
  stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  stats.bytes_read = source ? source->bytes_read() : 0;
  stats.reader = reader;
  return stats;
}

}  // namespace shardtune::fsdp
