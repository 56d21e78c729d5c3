#include "dist/all_to_all_counts.h"

#include "core/error.h"

namespace shardtrain {
namespace {

int64_t checked_sum(const std::vector<int64_t>& counts, int ranks, const char* which) {
  SHARDTRAIN_CHECK(static_cast<int>(counts.size()) == ranks,
                   "all_to_all_v: {} {} counts for {} ranks", counts.size(), which, ranks);
  int64_t total = 0;
  for (int64_t n : counts) {
    SHARDTRAIN_CHECK(n >= 0, "all_to_all_v: negative {} count {}", which, n);
    total += n;
  }
  return total;
}

}  // namespace

void check_all_to_all_counts(int ranks, const Tensor& out, const std::vector<int64_t>& recv_counts,
                             const Tensor& in, const std::vector<int64_t>& send_counts) {
  const int64_t sent = checked_sum(send_counts, ranks, "send");
  const int64_t received = checked_sum(recv_counts, ranks, "recv");
  SHARDTRAIN_CHECK(sent == in.numel(), "all_to_all_v: send counts sum to {}, in has {}", sent,
                   in.numel());
  SHARDTRAIN_CHECK(received == out.numel(), "all_to_all_v: recv counts sum to {}, out has {}",
                   received, out.numel());
  SHARDTRAIN_CHECK(sent == 0 || received == 0 || out.dtype() == in.dtype(),
                   "all_to_all_v: dtypes differ");
}

std::vector<int64_t> count_offsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> offsets(counts.size(), 0);
  for (size_t r = 1; r < counts.size(); ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  return offsets;
}

}  // namespace shardtrain
