// Timing one collective the way nccl-tests does, for `shardtrain bench comm` and
// `shardtrain doctor --nccl-test`.
//
// For a collective over S bytes (the gathered output of an all-gather, the input of a
// reduce-scatter, the buffer of an all-reduce) taking t seconds on N ranks:
//   algbw = S / t
//   busbw = algbw * (N - 1) / N        all-gather, reduce-scatter
//   busbw = algbw * 2 (N - 1) / N      all-reduce
// busbw is what each rank's link carries, so it compares with the hardware's bandwidth; it is 0
// on one rank by definition.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "dist/comm.h"
#include "ops/ops.h"

namespace shardtrain {

enum class Collective { kAllGather, kReduceScatter, kAllReduce };

const char* collective_name(Collective collective);  // "all_gather", ...

struct CollectiveTiming {
  int64_t bytes = 0;      // S: what was actually moved (rounded down to whole elements per rank)
  double seconds = 0;     // per call, averaged over the timed calls
  double algbw_gbps = 0;  // GB/s (1e9 bytes)
  double busbw_gbps = 0;
};

// busbw / algbw for `collective` on `ranks` ranks (nccl-tests' factor).
double bus_bandwidth_factor(Collective collective, int ranks);

// Runs `warmup` untimed calls, a barrier, then `iterations` timed ones of `collective` over about
// `bytes` bytes of `dtype` in buffers allocated on `ops`'s device, on every rank of `comm`.
// REQUIRES: every rank of comm calls it with the same arguments; comm's tensors live on `ops`'s
// device; bytes >= comm.size() * dtype_size(dtype); iterations >= 1.
CollectiveTiming time_collective(Comm& comm, Ops& ops, Collective collective, int64_t bytes,
                                 DType dtype, int warmup, int iterations);

}  // namespace shardtrain
