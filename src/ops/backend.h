// Choosing a compute backend: "cpu", "cuda", or "auto" (CUDA when this binary was built with
// it and a GPU is visible, else CPU).
#pragma once

#include <memory>
#include <string>

#include "ops/ops.h"

namespace shardtrain {

// Throws Error for an unknown choice, or "cuda" without a CUDA build or without a GPU.
std::unique_ptr<Ops> make_ops(const std::string& device_choice);
// True when this binary includes the CUDA backend and at least one GPU is visible.
bool cuda_available();

}  // namespace shardtrain
