#include "model/init_weights.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "model/peft_adapter.h"

namespace shardtrain {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Standard normal pairs by Box-Muller over mt19937_64 (std::normal_distribution is not
// specified bit-for-bit, so it would differ between standard libraries).
class NormalStream {
 public:
  explicit NormalStream(uint64_t seed) : engine_(seed) {}
  float next() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    const double scale = 1.0 / 18446744073709551616.0;  // 2^-64
    double u1 = (static_cast<double>(engine_()) + 0.5) * scale;
    double u2 = (static_cast<double>(engine_()) + 0.5) * scale;
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double angle = 2.0 * 3.14159265358979323846 * u2;
    spare_ = static_cast<float>(radius * std::sin(angle));
    have_spare_ = true;
    return static_cast<float>(radius * std::cos(angle));
  }

 private:
  std::mt19937_64 engine_;
  float spare_ = 0;
  bool have_spare_ = false;
};

}  // namespace

void init_unit_random(const UnitLayout& unit, int unit_index, uint64_t seed, double std,
                      float* dst_unit) {
  std::memset(dst_unit, 0, static_cast<size_t>(unit.numel) * sizeof(float));
  // Each parameter has its own stream, so large ones are drawn on threads of their own (the
  // same values; a 7B model's random init took over a minute on one core).
  constexpr int64_t kThreadMinNumel = int64_t{1} << 20;
  std::vector<std::thread> threads;
  for (size_t p = 0; p < unit.params.size(); ++p) {
    const ParamSpec& spec = unit.params[p];
    float* dst = dst_unit + spec.offset;
    if (spec.zero_init) {
      // zeros (Gemma's 1 + weight norms)
    } else if (ends_with(spec.name, "norm.weight")) {
      for (int64_t i = 0; i < spec.numel(); ++i) dst[i] = 1.0f;
    } else if (is_lora_param(spec)) {
      init_lora_param(spec, seed, dst);  // as PEFT: A Kaiming-uniform, B zero
    } else if (ends_with(spec.name, ".bias")) {
      // zeros, as transformers initialises linear biases
    } else {
      const uint64_t stream_seed =
          seed * 1000003ull + static_cast<uint64_t>(unit_index) * 1009ull + p;
      const int64_t n = spec.numel();
      auto draw = [dst, n, std, stream_seed] {
        NormalStream normal(stream_seed);
        for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(std * normal.next());
      };
      bool started = false;
      if (n >= kThreadMinNumel && std::thread::hardware_concurrency() > 1) {
        try {
          threads.emplace_back(draw);
          started = true;
        } catch (const std::system_error&) {
          // No thread to be had (a process or memory limit): drawn here, the same values.
        }
      }
      if (!started) draw();
    }
  }
  for (std::thread& t : threads) t.join();
}

void load_unit_from_checkpoint(const HfCheckpoint& checkpoint, const UnitLayout& unit,
                               float* dst_unit) {
  std::memset(dst_unit, 0, static_cast<size_t>(unit.numel) * sizeof(float));
  for (const ParamSpec& spec : unit.params) {
    checkpoint.read_into_f32(spec.name, spec.shape, dst_unit + spec.offset);
  }
}

}  // namespace shardtrain
