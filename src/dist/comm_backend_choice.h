// CommBackendChoice: which engine carries collectives (dist.backend): auto, nccl or gloo.
// dist/dist_env.h choose_world_comm turns it, the device and the node's GPUs into a world Comm.
#pragma once

#include "core/choice_names.h"

namespace shardtrain {

enum class CommBackendChoice { kAuto, kNccl, kGloo };
// auto, nccl, gloo.
const ChoiceNames<CommBackendChoice>& comm_backend_names();

}  // namespace shardtrain
