#include "fsdp/expert_exchange.h"

#include "core/error.h"

namespace shardtrain {

std::vector<int64_t> ExpertExchange::exchange_counts(const std::vector<int64_t>& sent,
                                                     int64_t per_rank) {
  const int64_t n = static_cast<int64_t>(size()) * per_rank;
  SHARDTRAIN_CHECK(static_cast<int64_t>(sent.size()) == n, "{} counts for {} ranks x {}",
                   sent.size(), size(), per_rank);
  std::vector<float> values(2 * n);
  for (int64_t i = 0; i < n; ++i) {
    // fp32 holds every integer below 2^24 exactly: far above one micro-batch's rows.
    SHARDTRAIN_CHECK(sent[i] >= 0 && sent[i] < (int64_t{1} << 24), "expert row count {}", sent[i]);
    values[i] = static_cast<float>(sent[i]);
  }
  const size_t bytes = values.size() * sizeof(float);
  if (counts_.bytes() < bytes) counts_ = DeviceBuffer(ops_, bytes);
  const Tensor both = counts_.view(DType::kF32, {2 * n});
  ops_.copy_from_host(both, values.data());
  const std::vector<int64_t> per_peer(size(), per_rank);
  expert_.set_context("expert row counts all-to-all");
  expert_.all_to_all_v(both.rows(n, 2 * n), per_peer, both.rows(0, n), per_peer);
  ops_.copy_to_host(values.data(), both);
  std::vector<int64_t> received(n);
  for (int64_t i = 0; i < n; ++i) received[i] = static_cast<int64_t>(values[n + i]);
  return received;
}

void ExpertExchange::exchange_rows(Tensor out_RC, const std::vector<int64_t>& recv_rows,
                                   Tensor in_MC, const std::vector<int64_t>& send_rows) {
  const int64_t width = in_MC.dim(1);
  SHARDTRAIN_CHECK(out_RC.dim(1) == width, "row widths {} and {}", out_RC.dim(1), width);
  std::vector<int64_t> recv(recv_rows.size()), send(send_rows.size());
  for (size_t r = 0; r < recv.size(); ++r) recv[r] = recv_rows[r] * width;
  for (size_t r = 0; r < send.size(); ++r) send[r] = send_rows[r] * width;
  expert_.set_context("expert rows all-to-all");
  expert_.all_to_all_v(out_RC.reshaped({out_RC.numel()}), recv, in_MC.reshaped({in_MC.numel()}),
                       send);
}

}  // namespace shardtrain
