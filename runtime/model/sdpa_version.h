// What this LibTorch's scaled_dot_product_attention offers.
#pragma once

#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <ATen/ops/scaled_dot_product_attention.h>
#endif

// enable_gqa (LibTorch 2.5 on): key/value heads shared by groups of query heads without repeating
// them in memory. From the same versions on, causal_attention chooses cuDNN's kernel or not per shape.
#define ST_SDPA_GQA (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5))
