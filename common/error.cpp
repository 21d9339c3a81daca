// Error kinds, the process identity, and error locations.
#include "common/error.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>

namespace shardtune::common {
namespace {

std::string local_hostname() {
  std::array<char, 256> buf{};
  if (gethostname(buf.data(), buf.size() - 1) != 0) return "unknown-host";
  return buf.data();
}

ProcessIdentity& identity_storage() {
  static ProcessIdentity identity{local_hostname()};
  return identity;
}

}  // namespace

std::string_view to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kUsage: return "usage error";
    case ErrorKind::kConfig: return "configuration error";
    case ErrorKind::kIo: return "I/O error";
    case ErrorKind::kMpi: return "MPI error";
    case ErrorKind::kNccl: return "NCCL error";
    case ErrorKind::kCuda: return "CUDA error";
    case ErrorKind::kHdf5: return "HDF5 error";
    case ErrorKind::kTimeout: return "collective timeout";
    case ErrorKind::kPeerLost: return "lost peer";
    case ErrorKind::kDiverged: return "training diverged";
    case ErrorKind::kInternal: return "internal error";
  }
  return "error";
}

const ProcessIdentity& process_identity() { return identity_storage(); }

void set_process_identity(ProcessIdentity identity) {
  if (identity.host.empty()) identity.host = local_hostname();
  identity_storage() = std::move(identity);
}

std::string error_location(const std::source_location& loc) {
  const ProcessIdentity& id = process_identity();
  std::string_view file = loc.file_name();
  // Report paths relative to the source tree: strip everything up to the component folder.
  for (std::string_view root : {"/common/", "/runtime/", "/launcher/", "/slurm/", "/checkpoint/",
                                "/rank/", "/tools/", "/tests/", "/bench/"}) {
    if (auto pos = file.rfind(root); pos != std::string_view::npos) {
      file.remove_prefix(pos + 1);
      break;
    }
  }
  if (id.rank < 0) return fmt::format("host {} ({}:{})", id.host, file, loc.line());
  return fmt::format("host {} rank {} ({}:{})", id.host, id.rank, file, loc.line());
}

void raise(ErrorKind kind, const std::string& message, const std::source_location& loc) {
  throw Error(kind, fmt::format("{}: {} [{}]", to_string(kind), message, error_location(loc)));
}

}  // namespace shardtune::common
