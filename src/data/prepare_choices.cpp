// The name tables of PrepareOptions' line policies (data/prepare.h), apart from the tokenizing
// and packing code so that the config schema (train/train_config.cpp) and its fuzz target link
// only these.
#include "data/prepare.h"

namespace shardtrain {

const ChoiceNames<BadLinePolicy>& bad_line_policy_names() {
  static const ChoiceNames<BadLinePolicy> names = {{"fail", BadLinePolicy::kFail},
                                                   {"skip", BadLinePolicy::kSkip}};
  return names;
}

const ChoiceNames<InvalidUtf8Policy>& invalid_utf8_policy_names() {
  static const ChoiceNames<InvalidUtf8Policy> names = {{"fail", InvalidUtf8Policy::kFail},
                                                       {"replace", InvalidUtf8Policy::kReplace}};
  return names;
}

}  // namespace shardtrain
