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
// seconds (NcclCommOptions::timeout, default 600) after it was enqueued, or NCCL reports an
// asynchronous error (a peer died, a network failure), it aborts the communicator and the process
// with a message naming the rank, the collective and the context the caller set (set_context, e.g.
// the FSDP unit). A timeout or error is a dead peer or machine, not something the process can
// recover from; the launcher restarts the group.
//
// NVLink SHARP (NVLS) multicast: set NCCL_NVLS_ENABLE=0 on shared machines (our tests and
// scripts do); NVLS reserves multicast memory and fabric resources other jobs may hold.
//
// Compiled in every build; without NCCL (CPU-only builds, or CUDA builds where CMake did not
// find it) nccl_available() is false and make_nccl_comm throws an Error that says so.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "dist/comm.h"
#include "dist/store.h"
#include "ops/backend.h"

namespace shardtrain {

// True when this binary was built with NCCL.
bool nccl_available();

struct NcclCommOptions {
  // The GPU and compute stream of this rank's CUDA backend (ops/backend.h make_ops gives them
  // to the code that wires the objects together).
  CudaComputeStream compute;
  int job_rank = 0;                   // the process's rank in the whole job, for messages
  std::chrono::seconds timeout{600};  // SHARDTRAIN_COMM_TIMEOUT_S (dist/worker_env.h)
};

// Connects `size` ranks (this one is `rank`) through `store`; every rank must call it with the
// same prefix and size. Collectives run on options.compute's stream and device.
// REQUIRES: options.compute is the CUDA backend's of this rank's GPU (each rank a different
// GPU); store and that backend outlive the Comm and every Comm split from it.
// Throws Error when built without NCCL or when the id does not appear in the store in time;
// aborts (with the message above) when NCCL initialisation fails or times out.
std::unique_ptr<Comm> make_nccl_comm(Store& store, int rank, int size, const std::string& prefix,
                                     const NcclCommOptions& options);

}  // namespace shardtrain
