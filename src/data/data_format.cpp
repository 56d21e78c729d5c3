#include "data/data_format.h"

namespace shardtrain {

const ChoiceNames<DataFormat>& data_format_names() {
  static const ChoiceNames<DataFormat> names = {{"auto", DataFormat::kAuto},
                                                {"tokens", DataFormat::kTokens},
                                                {"jsonl", DataFormat::kJsonl},
                                                {"examples", DataFormat::kExamples}};
  return names;
}

}  // namespace shardtrain
