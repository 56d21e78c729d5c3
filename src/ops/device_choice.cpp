#include "ops/device_choice.h"

namespace shardtrain {

const ChoiceNames<DeviceChoice>& device_choice_names() {
  static const ChoiceNames<DeviceChoice> names = {
      {"auto", DeviceChoice::kAuto}, {"cpu", DeviceChoice::kCpu}, {"cuda", DeviceChoice::kCuda}};
  return names;
}

}  // namespace shardtrain
