// kernels_gpu_test on the CPU: the same checks of shardtune's CUDA kernels against float64 and
// their host references, with the kernels' own code compiled by the host compiler over cuda_emu.h
// and run under AddressSanitizer and UBSan (tests/emu/CMakeLists.txt).
#include "tests/gpu/kernels_gpu_test.cu"
