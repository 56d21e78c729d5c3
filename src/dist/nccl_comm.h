// NcclComm: the Comm interface (dist/comm.h) over NCCL, for CUDA tensors (f32 and bf16), one
// rank per GPU.
//
// Bootstrap: rank 0 creates the NCCL unique id and publishes it (hex) in the Store under
// `prefix`; the other ranks read it from there. split() uses ncclCommSplit (no store traffic).
//
// Streams: the blocking collectives (all_gather, reduce_scatter, all_reduce, broadcast, barrier)
// are enqueued on the compute stream of the CudaOps the comm was made with, so they are ordered
// with the ops around them without events. The start_* collectives (dist/comm.h; FSDP's
// prefetch and gradient reduction) run on the comm's own high-priority stream: it first waits
// (cudaStreamWaitEvent) for the compute stream's work enqueued so far, and finish() makes the
// compute stream wait for the collective's completion event. No host synchronisation. NCCL
// serialises the operations of one communicator, so both streams keep the issue order.
//
// Failures never hang silently. Communicators are non-blocking (ncclConfig_t::blocking = 0):
// every NCCL call is checked, and every wait (init, split, barrier, teardown) polls
// ncclCommGetAsyncError against a deadline. A watchdog thread per communicator follows every
// enqueued collective with a CUDA event; when one has not completed SHARDTRAIN_COMM_TIMEOUT_S
// seconds (default 600) after it was enqueued, or NCCL reports an asynchronous error (a peer
// died, a network failure), it aborts the communicator and the process with a message naming
// the rank, the collective and the context the caller set (set_context, e.g. the FSDP unit).
// A timeout or error is a dead peer or machine, not something the process can recover from;
// the launcher restarts the group.
//
// NVLink SHARP (NVLS) multicast: set NCCL_NVLS_ENABLE=0 on shared machines (our tests and
// scripts do); NVLS reserves multicast memory and fabric resources other jobs may hold.
//
// Compiled in every build; without NCCL (CPU-only builds, or CUDA builds where CMake did not
// find it) nccl_available() is false and make_nccl_comm throws an Error that says so.
#pragma once

#include <memory>
#include <string>

#include "dist/comm.h"
#include "dist/store.h"
#include "ops/ops.h"

namespace shardtrain {

// True when this binary was built with NCCL.
bool nccl_available();

// Connects `size` ranks (this one is `rank`) through `store`; every rank must call it with the
// same prefix and size. Collectives run on `ops`'s compute stream and device.
// REQUIRES: ops is the CUDA backend, bound to this rank's GPU (each rank a different GPU);
// store and ops outlive the Comm and every Comm split from it.
// Throws Error when built without NCCL or when the id does not appear in the store in time;
// aborts (with the message above) when NCCL initialisation fails or times out.
std::unique_ptr<Comm> make_nccl_comm(Store& store, int rank, int size, const std::string& prefix,
                                     Ops& ops);

}  // namespace shardtrain
