// Reading a whole (small) file into memory: JSON manifests, state files.
#pragma once

#include <string>

namespace shardtrain {

// The file's bytes. Throws Error naming the path (and the reason) when it cannot be read.
std::string read_file(const std::string& path);

}  // namespace shardtrain
