#include "cli/testing/test_worker_hooks.h"

#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <thread>

#include "core/error.h"
#include "ops/backend.h"
#include "ops/testing/deferred_aside_ops.h"

namespace shardtrain::testing {
namespace {

// Stops forever at the start of one step (the watchdog tests' hung rank).
class HangAtStep final : public StepHooks {
 public:
  explicit HangAtStep(int64_t step) : step_(step) {}
  void before_step(int64_t step) override {
    while (step == step_) std::this_thread::sleep_for(std::chrono::seconds(1));
  }

 private:
  int64_t step_;
};

// The integer value of `name` in [low, high], or `fallback` when unset or empty.
int64_t integer_of(const EnvLookup& env, const std::string& name, int64_t low, int64_t high,
                   int64_t fallback, const char* takes) {
  const std::optional<std::string> text = env(name);
  if (!text || text->empty()) return fallback;
  int64_t value = 0;
  const char* end = text->data() + text->size();
  const auto [stop, error] = std::from_chars(text->data(), end, value);
  if (error != std::errc() || stop != end || value < low || value > high) {
    fail("{}=\"{}\" is not {}; HINT: set it to {} or unset it", name, *text, takes, takes);
  }
  return value;
}

KernelOverrides kernel_overrides_of(const EnvLookup& env) {
  KernelOverrides kernels;
  const std::string kernel = env("SHARDTRAIN_TEST_ATTENTION_KERNEL").value_or("");
  if (kernel == "wgmma") {
    kernels.attention = KernelOverrides::Attention::kWgmma;
  } else if (kernel == "wgmma-forward") {
    kernels.attention = KernelOverrides::Attention::kWgmmaForward;
  } else if (kernel == "mma") {
    kernels.attention = KernelOverrides::Attention::kMma;
  } else if (!kernel.empty()) {
    fail(
        "SHARDTRAIN_TEST_ATTENTION_KERNEL=\"{}\" is not a kernel; HINT: set it to wgmma, "
        "wgmma-forward or mma, or unset it",
        kernel);
  }
  for (const auto& [name, warps] :
       {std::pair{"SHARDTRAIN_TEST_ATTENTION_FORWARD_WARPS", &kernels.attention_forward_warps},
        std::pair{"SHARDTRAIN_TEST_ATTENTION_BACKWARD_WARPS", &kernels.attention_backward_warps}}) {
    const int64_t value = integer_of(env, name, 4, 8, 0, "4 or 8");
    if (value != 0 && value != 4 && value != 8) {
      fail("{}=\"{}\" is not 4 or 8; HINT: set it to 4 or 8, or unset it", name, value);
    }
    *warps = static_cast<int>(value);
  }
  kernels.attention_backward_heads_per_block = static_cast<int>(integer_of(
      env, "SHARDTRAIN_TEST_ATTENTION_HEADS_PER_BLOCK", 1, 1024, 0, "an integer in [1, 1024]"));
  return kernels;
}

}  // namespace

TestWorkerSettings read_test_worker_settings(const EnvLookup& env) {
  TestWorkerSettings settings;
  settings.hang_at_step =
      integer_of(env, "SHARDTRAIN_TEST_HANG_AT_STEP", 1, int64_t{1} << 40, 0, "a step number >= 1");
  settings.hang_rank =
      static_cast<int>(integer_of(env, "SHARDTRAIN_TEST_HANG_RANK", 0, 1 << 20, 0, "a rank >= 0"));
  settings.stop_at_start_rank = static_cast<int>(
      integer_of(env, "SHARDTRAIN_TEST_STOP_AT_START_RANK", 0, 1 << 20, -1, "a rank >= 0"));
  // The launcher sets RANK for its workers; it was checked there, so an odd value here simply
  // means "not a worker this hook targets".
  if (const std::optional<std::string> rank = env("RANK")) {
    int value = -1;
    const auto [stop, error] = std::from_chars(rank->data(), rank->data() + rank->size(), value);
    if (error == std::errc() && stop == rank->data() + rank->size()) settings.worker_rank = value;
  }
  settings.checkpoint_write_delay_ms = integer_of(env, "SHARDTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS",
                                                  0, 3'600'000, 0, "milliseconds in [0, 3600000]");
  settings.kernels = kernel_overrides_of(env);
  settings.device_limits = env("SHARDTRAIN_TEST_DEVICE_LIMITS").value_or("");
  if (!settings.device_limits.empty() && settings.device_limits != "a100" &&
      settings.device_limits != "a10g" && settings.device_limits != "l4" &&
      settings.device_limits != "h100") {
    fail(
        "SHARDTRAIN_TEST_DEVICE_LIMITS=\"{}\" is not a GPU kind; HINT: set it to a100, a10g, l4 "
        "or h100, or unset it",
        settings.device_limits);
  }
  settings.deferred_aside = env("SHARDTRAIN_TEST_DEFERRED_ASIDE").value_or("");
  if (!settings.deferred_aside.empty() && settings.deferred_aside != "1" &&
      settings.deferred_aside != "ignore-waits") {
    fail(
        "SHARDTRAIN_TEST_DEFERRED_ASIDE=\"{}\" is not 1 or ignore-waits; HINT: set it to 1 or "
        "ignore-waits, or unset it",
        settings.deferred_aside);
  }
  return settings;
}

WorkerHooks install_test_worker_hooks(const TestWorkerSettings& settings) {
  if (settings.stop_at_start_rank >= 0 && settings.worker_rank == settings.stop_at_start_rank) {
    ::raise(SIGSTOP);  // until SIGCONT or SIGKILL (the launcher's stop)
  }
  set_test_kernel_overrides(settings.kernels);
  if (!settings.device_limits.empty()) set_test_cuda_device_limits(settings.device_limits);
  WorkerHooks hooks;
  hooks.checkpoint_write_delay = std::chrono::milliseconds(settings.checkpoint_write_delay_ms);
  if (!settings.deferred_aside.empty()) {
    hooks.cpu_ops = [honour_waits = settings.deferred_aside == "1"]() -> std::unique_ptr<Ops> {
      return std::make_unique<DeferredAsideCpuOps>(honour_waits, /*report=*/true);
    };
  }
  if (settings.hang_at_step > 0) {
    hooks.step_hooks = [step = settings.hang_at_step,
                        target = settings.hang_rank](int rank) -> std::unique_ptr<StepHooks> {
      if (rank != target) return nullptr;
      return std::make_unique<HangAtStep>(step);
    };
  }
  return hooks;
}

WorkerHooks test_worker_hooks_from_environment() {
  return install_test_worker_hooks(
      read_test_worker_settings([](const std::string& name) -> std::optional<std::string> {
        const char* value = std::getenv(name.c_str());
        if (value == nullptr) return std::nullopt;
        return std::string(value);
      }));
}

}  // namespace shardtrain::testing
