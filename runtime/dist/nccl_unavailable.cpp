// make_nccl_communicator in a build whose LibTorch has no CUDA: the job cannot use NCCL.
#include "common/error.h"
#include "runtime/dist/process_groups.h"

namespace shardtune::dist {

std::unique_ptr<Communicator> make_nccl_communicator(const MpiCommunicator&, int device, double) {
  common::raise(common::ErrorKind::kConfig,
                fmt::format("NCCL on device {} needs a CUDA LibTorch, and this shardtune was built with a CPU-only "
                            "one. HINT: rebuild with SHARDTUNE_CMAKE_ARGS=\"-DTorch_DIR=<CUDA LibTorch>/share/cmake/Torch\" "
                            "scripts/setup.sh, or set [launch] device = \"cpu\"",
                            device));
}

}  // namespace shardtune::dist
