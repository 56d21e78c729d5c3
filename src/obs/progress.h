// The per-step console progress line (one line; MFU, epoch and eval only where known):
//   step 12/100 | loss 2.3456 | lr 3.00e-04 | gnorm 1.234 | 12345 tok/s | MFU 41.2% |
//   epoch 0.35 | eval loss 2.4567 ppl 11.67 | 0:00:12 | ETA 0:01:28
#pragma once

#include <string>

#include "obs/step_report.h"

namespace shardtrain {

std::string format_duration(double seconds);  // "1:02:03"
std::string format_progress_line(const StepReport& report);

}  // namespace shardtrain
