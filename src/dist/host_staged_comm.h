// HostStagedComm: a Comm decorator that lets a host-memory Comm (GlooComm) serve tensors on a
// compute backend's device, by staging every collective through host buffers:
//   device tensor(s) --Ops::copy_to_host--> host fp32 buffer --wrapped Comm--> host buffer
//   --Ops::copy_from_host--> device tensor.
//
// Why: NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), so a multi-rank run on one
// GPU (testing the sharded path where only one GPU is lent) needs collectives that do not care
// which GPU a rank drives. This is a correctness/testing path: every collective synchronises
// the compute stream and crosses PCIe twice through pageable memory. dist/dist_env.cpp selects
// it (dist.backend = "gloo" with CUDA ranks, or more ranks on a node than visible GPUs).
//
// Dtypes: f32 and bf16 device tensors. The wrapped Comm always sees fp32 host tensors (GlooComm
// is fp32-only): bf16 is widened exactly to fp32 on the host, reductions accumulate in fp32 and
// round to bf16 once at the end; gathers and broadcasts of bf16 are therefore bit-exact.
// all_gather's `in` may alias `out`'s own slice (comm.h). Empty tensors (numel 0) are no-ops, as
// every rank passes the same sizes. Staging buffers are kept and reused (grown to the largest
// collective seen), so steady-state steps allocate nothing.
//
// Every collective blocks until its result is back on the device's stream (copy_from_host is
// enqueued there, so later compute sees it); the overlap calls (start_*, finish) are therefore
// Comm's blocking defaults. Not thread-safe (like every Comm): one caller at a time.
#pragma once

#include <memory>

#include "dist/comm.h"
#include "ops/ops.h"

namespace shardtrain {

// Wraps `host_comm` (collectives over fp32 CPU tensors) to take tensors on `ops.device()`.
// split() returns a staged wrapper around host_comm's split, sharing `ops`.
// REQUIRES: ops outlives the returned Comm and every Comm split from it.
std::unique_ptr<Comm> make_host_staged_comm(std::unique_ptr<Comm> host_comm, Ops& ops);

}  // namespace shardtrain
