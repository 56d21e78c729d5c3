// The size contract of Comm::all_to_all_v (dist/comm.h), checked once for every backend, and
// the element offsets each backend derives from the per-rank counts.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace shardtrain {

// Aborts with file:line (a caller's bug, not a user mistake) unless both count vectors have
// `ranks` non-negative entries summing to in.numel() and out.numel(), and the dtypes match.
void check_all_to_all_counts(int ranks, const Tensor& out, const std::vector<int64_t>& recv_counts,
                             const Tensor& in, const std::vector<int64_t>& send_counts);

// offsets[r] = sum of counts[0, r): where rank r's elements start.
std::vector<int64_t> count_offsets(const std::vector<int64_t>& counts);

}  // namespace shardtrain
