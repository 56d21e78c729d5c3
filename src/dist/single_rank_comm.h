// A Comm of one rank: every collective is an identity (a copy where in and out differ). For a
// world of one and for the size-1 groups of a mesh (dist/mesh.h).
#pragma once

#include <memory>

#include "dist/comm.h"

namespace shardtrain {

std::unique_ptr<Comm> make_single_rank_comm();

}  // namespace shardtrain
