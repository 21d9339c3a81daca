// c10::Allocator across the LibTorch versions shardtune builds with: 2.3 made allocate() non-const
// and added copy_data(). A subclass declares `c10::DataPtr allocate(size_t n) ST_ALLOCATE_CONST
// override` and, under ST_ALLOCATOR_2_3, copy_data().
#pragma once

#include <torch/version.h>

#define ST_ALLOCATOR_2_3 (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3))
#if ST_ALLOCATOR_2_3
#define ST_ALLOCATE_CONST
#else
#define ST_ALLOCATE_CONST const
#endif
