// The tensor names and shapes a checkpoint's shard files use, shared by the write and read
// sides (checkpoint_write.cpp, checkpoint_read.cpp). Internal to train/checkpoint.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace shardtrain {

// The optimizer state of each unit's shard, in file order: `unit.U.master` and AdamW's moments.
inline constexpr const char* kCheckpointKinds[] = {"master", "exp_avg", "exp_avg_sq"};

inline std::string checkpoint_tensor_name(int unit, const char* kind) {
  return fmt::format("unit.{}.{}", unit, kind);
}

// A shape's dims as train_state.json's layout records them.
inline std::vector<int64_t> shape_dims(const Shape& shape) {
  std::vector<int64_t> dims;
  for (int i = 0; i < shape.rank(); ++i) dims.push_back(shape[i]);
  return dims;
}

}  // namespace shardtrain
