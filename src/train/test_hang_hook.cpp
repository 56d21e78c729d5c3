#include "train/test_hang_hook.h"

#include <chrono>
#include <cstdlib>
#include <thread>

namespace shardtrain {
namespace {

class HangAtStep final : public StepHooks {
 public:
  explicit HangAtStep(int64_t step) : step_(step) {}
  void before_step(int64_t step) override {
    while (step == step_) std::this_thread::sleep_for(std::chrono::seconds(1));
  }

 private:
  int64_t step_;
};

}  // namespace

std::unique_ptr<StepHooks> hang_hook_from_test_env(int rank) {
  const char* step = std::getenv("SHARDTRAIN_TEST_HANG_AT_STEP");
  if (step == nullptr || *step == '\0') return nullptr;
  const char* hang_rank = std::getenv("SHARDTRAIN_TEST_HANG_RANK");
  const int target = hang_rank != nullptr && *hang_rank != '\0' ? std::atoi(hang_rank) : 0;
  const int64_t hang_step = std::atoll(step);
  if (rank != target || hang_step <= 0) return nullptr;
  return std::make_unique<HangAtStep>(hang_step);
}

}  // namespace shardtrain
