#include "obs/progress.h"

#include <gtest/gtest.h>

namespace shardtrain {
namespace {

TEST(ProgressLine, ShowsMfuAndEpochOnlyWhenKnown) {
  StepReport r;
  r.step = 12;
  r.total_steps = 100;
  r.loss = 2.34564;
  r.lr = 3e-4;
  r.grad_norm = 1.2344;
  r.tokens_per_s = 12345.4;
  r.elapsed_s = 12;
  EXPECT_EQ(format_progress_line(r),
            "step 12/100 | loss 2.3456 | lr 3.00e-04 | gnorm 1.234 | 12345 tok/s | 0:00:12 | "
            "ETA 0:01:28");
  r.mfu = 0.4123;
  r.epoch = 0.354;
  EXPECT_EQ(format_progress_line(r),
            "step 12/100 | loss 2.3456 | lr 3.00e-04 | gnorm 1.234 | 12345 tok/s | MFU 41.2% | "
            "epoch 0.35 | 0:00:12 | ETA 0:01:28");
}

}  // namespace
}  // namespace shardtrain
