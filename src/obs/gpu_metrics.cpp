#include "obs/gpu_metrics.h"

#include <algorithm>
#include <functional>
#include <optional>

namespace shardtrain {
namespace {

constexpr std::chrono::milliseconds kStopLatency{200};

struct DcgmField {
  const char* name;
  const char* help;  // dcgm-exporter's default-counters.csv wording
  MetricType type;
  std::function<std::optional<double>(const GpuSample&)> value;
};

template <typename T>
std::optional<double> scaled(const std::optional<T>& v, double factor) {
  if (!v) return std::nullopt;
  return static_cast<double>(*v) * factor;
}

const std::vector<DcgmField>& dcgm_fields() {
  using G = const GpuSample&;
  constexpr double kMiB = 1.0 / (1024.0 * 1024.0);
  static const std::vector<DcgmField> fields = {
      {"DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", MetricType::kGauge,
       [](G g) { return scaled(g.reading.sm_clock_mhz, 1); }},
      {"DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", MetricType::kGauge,
       [](G g) { return scaled(g.reading.memory_clock_mhz, 1); }},
      {"DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", MetricType::kGauge,
       [](G g) { return scaled(g.reading.temperature_c, 1); }},
      {"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", MetricType::kGauge,
       [](G g) { return scaled(g.reading.power_mw, 1e-3); }},
      {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).",
       MetricType::kCounter, [](G g) { return scaled(g.reading.energy_mj, 1); }},
      {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.", MetricType::kCounter,
       [](G g) { return scaled(g.reading.pcie_replays, 1); }},
      {"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", MetricType::kGauge,
       [](G g) { return scaled(g.reading.gpu_util_percent, 1); }},
      {"DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", MetricType::kGauge,
       [](G g) { return scaled(g.reading.memory_util_percent, 1); }},
      {"DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", MetricType::kGauge,
       [](G g) { return std::optional<double>(static_cast<double>(g.last_xid)); }},
      {"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", MetricType::kGauge,
       [](G g) { return scaled(g.reading.fb_free_bytes, kMiB); }},
      {"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", MetricType::kGauge,
       [](G g) { return scaled(g.reading.fb_used_bytes, kMiB); }},
  };
  return fields;
}

}  // namespace

GpuSampler::GpuSampler(std::unique_ptr<NvmlLibrary> library, std::chrono::milliseconds interval)
    : library_(std::move(library)), interval_(std::max(interval, std::chrono::milliseconds(50))) {
  for (int i = 0; i < library_->device_count(); ++i) {
    GpuSample s;
    s.index = i;
    s.uuid = library_->device_uuid(i);
    s.model_name = library_->device_name(i);
    samples_.push_back(std::move(s));
  }
  sample_all();
  thread_ = std::thread([this] { run(); });
}

GpuSampler::~GpuSampler() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

std::vector<GpuSample> GpuSampler::latest() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return samples_;
}

void GpuSampler::sample_all() {
  std::vector<GpuReading> readings;
  for (int i = 0; i < library_->device_count(); ++i) readings.push_back(library_->read(i));
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < readings.size(); ++i) samples_[i].reading = readings[i];
}

void GpuSampler::run() {
  using Clock = std::chrono::steady_clock;
  auto next = Clock::now() + interval_;
  while (!stopping_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now());
    if (left.count() <= 0) {
      sample_all();
      next += interval_;
      if (next < Clock::now()) next = Clock::now() + interval_;  // fell behind: do not burst
      continue;
    }
    // Waiting for XID events is the sleep between samples.
    const auto wait = std::min(left, kStopLatency);
    if (const std::optional<XidEvent> xid = library_->wait_xid(static_cast<unsigned>(wait.count()));
        xid && xid->device >= 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      samples_[xid->device].last_xid = xid->xid;
    }
  }
}

void add_dcgm_families(Exposition& out, const std::string& hostname,
                       const std::vector<GpuSample>& gpus) {
  for (const DcgmField& field : dcgm_fields()) {
    MetricFamily& family = out.family(field.name, field.help, field.type);
    for (const GpuSample& g : gpus) {
      const std::optional<double> v = field.value(g);
      if (!v) continue;
      family.add({{"gpu", std::to_string(g.index)},
                  {"UUID", g.uuid},
                  {"device", "nvidia" + std::to_string(g.index)},
                  {"modelName", g.model_name},
                  {"Hostname", hostname}},
                 *v);
    }
  }
}

}  // namespace shardtrain
