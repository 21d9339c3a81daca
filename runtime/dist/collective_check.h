// What the preflight sends through a communicator's 16-bit reduction path, and how it judges what
// comes back, so that the answer is exact under any reduction order at any group size.
//
// An average of ranks' own numbers is not: NCCL scales every input by 1/N and rounds to bf16 at
// each hop of its ring or tree, so from a few dozen ranks the result depends on the order and
// no fixed answer holds. The patterns here keep every partial sum representable instead:
// - sum: element j is contributed (as 1 or 2) by the ranks r with r ≡ j (mod m), m chosen so
//   that no element has more than 128 contributors; every partial sum is an integer ≤ 256, which
//   bf16 holds exactly, whatever the order;
// - average: element j has one contributor (1 or 2 once, 0 from every other rank), so the sum
//   adds only exact zeros and the answer is the contribution times the 1/N scale, rounded once
//   (pre-scaled as NCCL does or divided after as MPI does: one bf16 ulp apart at most).
// A lost, doubled, misplaced or unscaled contribution moves an element by at least a whole
// contribution (or the scale), far outside either check's allowance.
#pragma once

#include <string>
#include <vector>

namespace shardtune::dist {

// One rank's contribution to the summed pattern of a group of `size`, and its exact result.
std::vector<float> bf16_sum_pattern(int size, int rank);
std::vector<float> bf16_sum_expected(int size);
// One rank's contribution to the averaged pattern, and its exact (unrounded) result.
std::vector<float> bf16_avg_pattern(int size, int rank);
std::vector<double> bf16_avg_expected(int size);

// "" when `got` is the summed pattern's result, else what is wrong (first few elements).
std::string check_bf16_sum(const std::vector<float>& got, int size);
// "" when every element of `got` is within one bf16 ulp of the exact average.
std::string check_bf16_avg(const std::vector<float>& got, int size);

}  // namespace shardtune::dist
