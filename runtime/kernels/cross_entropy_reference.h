// Cross-entropy of each row of logits against its label, with the gradient of the logits written
// over them, on the host in fp32: the reference of the CUDA kernel (cross_entropy_cuda.h), with its
// arithmetic (cross_entropy_math.h). No ATen.
#pragma once

#include <cstdint>

namespace shardtune::kernels {

// logits (rows x vocab) row-major; labels (rows); loss (rows): lse - x[label], 0 where the label is
// `ignore_index`, NaN where it is outside [0, vocab). grad (rows x vocab; may be logits, in place):
// softmax - onehot, 0 on ignored rows, NaN on rows with a label out of range.
void cross_entropy_reference(const float* logits, const int64_t* labels, float* loss, float* grad, int64_t rows,
                             int64_t vocab, int64_t ignore_index);

}  // namespace shardtune::kernels
