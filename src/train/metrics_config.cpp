#include "train/metrics_config.h"

#include "core/error.h"

namespace shardtrain {

namespace {
constexpr double kDefaultCudaPeakTflops = 790.0;  // bench/RESULTS.md's MFU denominator
}

void MetricsConfig::register_config(ConfigSchema& schema) {
  schema.add("metrics.port", &port,
             "Prometheus /metrics port of this node (-1 = off, 0 = a free port; --metrics-port)");
  schema.add("metrics.address", &address, "address the /metrics endpoint binds");
  schema.add("metrics.gpu", &gpu,
             "GPU metrics under DCGM exporter names from NVML (false where dcgm-exporter runs)");
  schema.add("metrics.gpu_interval", &gpu_interval, "seconds between GPU metric samples");
  schema.add("metrics.nvml_library", &nvml_library, "NVML library to load with dlopen");
  schema.add("metrics.peak_tflops", &peak_tflops,
             "device peak TFLOP/s for MFU (0 = 790 on CUDA, no MFU on CPU)");
}

void MetricsConfig::validate() const {
  if (port < -1 || port > 65535) {
    fail(
        "config key 'metrics.port' = {} is not a port; HINT: use 1-65535, 0 for a free port, "
        "or -1 for no endpoint",
        port);
  }
  if (address.empty()) {
    fail(
        "config key 'metrics.address' is empty; HINT: use 0.0.0.0 (all interfaces) or "
        "127.0.0.1");
  }
  if (!(gpu_interval >= 0.05 && gpu_interval <= 3600)) {
    fail("config key 'metrics.gpu_interval' = {} is out of range; HINT: use 0.05 to 3600 seconds",
         gpu_interval);
  }
  if (!(peak_tflops >= 0)) {
    fail("config key 'metrics.peak_tflops' = {} must be >= 0 (0 = the default)", peak_tflops);
  }
}

MetricsOptions MetricsConfig::endpoint_options() const {
  MetricsOptions options;
  options.port = static_cast<int>(port);
  options.address = address;
  options.gpu = gpu;
  options.gpu_interval_s = gpu_interval;
  options.nvml_library = nvml_library;
  return options;
}

double MetricsConfig::peak_flops(bool cuda) const {
  if (peak_tflops > 0) return peak_tflops * 1e12;
  return cuda ? kDefaultCudaPeakTflops * 1e12 : 0.0;
}

}  // namespace shardtrain
