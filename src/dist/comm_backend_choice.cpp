#include "dist/comm_backend_choice.h"

namespace shardtrain {

const ChoiceNames<CommBackendChoice>& comm_backend_names() {
  static const ChoiceNames<CommBackendChoice> names = {{"auto", CommBackendChoice::kAuto},
                                                       {"nccl", CommBackendChoice::kNccl},
                                                       {"gloo", CommBackendChoice::kGloo}};
  return names;
}

}  // namespace shardtrain
