// Exposed communication time for blocking backends (Gloo, host-staged Gloo).
//
// Their collectives run inside the call, so all of their time is exposed: the compute waits
// for every one. with_blocking_comm_time wraps such a Comm (and every Comm split from it) so
// that take_compute_wait_seconds() returns the wall time spent in collectives since the last
// call, as NCCL's event-timed waits do for overlapped ones. Other backends are returned as
// they are. Not thread-safe (one thread drives a Comm).
#pragma once

#include <memory>

#include "dist/comm.h"

namespace shardtrain {

std::unique_ptr<Comm> with_blocking_comm_time(std::unique_ptr<Comm> comm);

}  // namespace shardtrain
