// This process's resident set size, from /proc/self/statm (0 where it cannot be read).
#pragma once

#include <cstdint>

namespace shardtrain {

uint64_t process_resident_bytes();

}  // namespace shardtrain
