#include "dist/comm_bandwidth.h"

#include <chrono>

#include "core/error.h"
#include "ops/device_buffer.h"

namespace shardtrain {

const char* collective_name(Collective collective) {
  switch (collective) {
    case Collective::kAllGather:
      return "all_gather";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kAllReduce:
      return "all_reduce";
  }
  return "?";
}

double bus_bandwidth_factor(Collective collective, int ranks) {
  const double share = static_cast<double>(ranks - 1) / ranks;
  return collective == Collective::kAllReduce ? 2 * share : share;
}

CollectiveTiming time_collective(Comm& comm, Ops& ops, Collective collective, int64_t bytes,
                                 DType dtype, int warmup, int iterations) {
  const int n = comm.size();
  const int64_t element = static_cast<int64_t>(dtype_size(dtype));
  SHARDTRAIN_CHECK(iterations >= 1 && bytes >= n * element, "{} bytes, {} iterations", bytes,
                   iterations);
  const int64_t total = bytes / element / n * n;  // (n * part) elements
  const int64_t part = total / n;
  DeviceBuffer full(ops, static_cast<size_t>(total * element));
  DeviceBuffer shard(ops, static_cast<size_t>(part * element));
  const Tensor full_t = full.view(dtype, {total});   // (n * part)
  const Tensor shard_t = shard.view(dtype, {part});  // (part)
  const auto call = [&] {
    switch (collective) {
      case Collective::kAllGather:
        comm.all_gather(full_t, shard_t);
        break;
      case Collective::kReduceScatter:
        comm.reduce_scatter(shard_t, full_t, ReduceOp::kSum);
        break;
      case Collective::kAllReduce:
        comm.all_reduce(full_t, ReduceOp::kSum);
        break;
    }
  };
  for (int i = 0; i < warmup; ++i) call();
  ops.synchronize();
  comm.barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) call();
  ops.synchronize();
  CollectiveTiming timing;
  timing.bytes = total * element;
  timing.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iterations;
  timing.algbw_gbps = static_cast<double>(timing.bytes) / timing.seconds / 1e9;
  timing.busbw_gbps = timing.algbw_gbps * bus_bandwidth_factor(collective, n);
  return timing;
}

}  // namespace shardtrain
