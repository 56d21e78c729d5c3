// How the ranks of one NCCL communicator agree on its ncclUniqueId: rank 0 creates it and
// publishes it, hex-encoded, in the job's Store under PREFIX/nccl/unique_id; every other rank
// reads it from there (waiting up to `timeout`, the communicator's). Failures end in one line with a hint: NCCL
// could not create the id (no usable network interface), rank 0 never came (by `roll`), or
// the stored value is not one (another job shares the store). Only in builds with NCCL
// (SHARDTRAIN_WITH_NCCL).
#pragma once

#if defined(SHARDTRAIN_WITH_NCCL)

#include <nccl.h>

#include <string>

#include "dist/join_roll.h"
#include "dist/store.h"

namespace shardtrain {

// REQUIRES: 0 <= rank; every rank of the communicator calls it with the same prefix.
ncclUniqueId exchange_nccl_unique_id(Store& store, int rank, const std::string& prefix,
                                     const JoinRoll& roll, Store::Duration timeout);

}  // namespace shardtrain

#endif
