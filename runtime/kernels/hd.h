// Functions that compile for the CPU and for CUDA devices alike: the per-element arithmetic a
// kernel and its host reference share.
#pragma once

#ifdef __CUDACC__
#define ST_HD __host__ __device__
#else
#define ST_HD
#endif
