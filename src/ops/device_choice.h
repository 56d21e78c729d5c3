// DeviceChoice: where a job computes (train.device, the --device flags): cpu, cuda, or auto
// (CUDA when this binary was built with it and a GPU is visible, else CPU). ops/backend.h
// make_ops builds the backend for it.
#pragma once

#include "core/choice_names.h"

namespace shardtrain {

enum class DeviceChoice { kAuto, kCpu, kCuda };
// auto, cpu, cuda.
const ChoiceNames<DeviceChoice>& device_choice_names();

}  // namespace shardtrain
