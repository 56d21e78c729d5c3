#include "obs/progress.h"

#include <fmt/format.h>

#include <cmath>

namespace shardtrain {

std::string format_duration(double seconds) {
  const int64_t s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  return fmt::format("{}:{:02d}:{:02d}", s / 3600, (s / 60) % 60, s % 60);
}

std::string format_progress_line(const StepReport& r) {
  const double per_step = r.step > 0 ? r.elapsed_s / static_cast<double>(r.step) : 0;
  const double eta = per_step * static_cast<double>(r.total_steps - r.step);
  std::string line =
      fmt::format("step {}/{} | loss {:.4f} | lr {:.2e} | gnorm {:.3f} | {:.0f} tok/s", r.step,
                  r.total_steps, r.loss, r.lr, r.grad_norm, r.tokens_per_s);
  if (r.aux_loss) line += fmt::format(" | aux_loss {:.4f}", *r.aux_loss);
  if (r.mfu) line += fmt::format(" | MFU {:.1f}%", *r.mfu * 100.0);
  if (r.epoch) line += fmt::format(" | epoch {:.2f}", *r.epoch);
  if (r.eval) {
    line += fmt::format(" | eval loss {:.4f} ppl {:.2f}", r.eval->loss, r.eval->perplexity);
  }
  line += fmt::format(" | {} | ETA {}", format_duration(r.elapsed_s), format_duration(eta));
  return line;
}

}  // namespace shardtrain
