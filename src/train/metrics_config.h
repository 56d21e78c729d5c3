// The [metrics] section of a training config: the node's Prometheus endpoint and what it shows.
//   port         -1 = no endpoint (default); 0 = a free port; else the port (--metrics-port)
//   address      bind address (default 0.0.0.0; 127.0.0.1 keeps it on this host)
//   gpu          GPU metrics under DCGM names from NVML (false where a DCGM exporter runs)
//   gpu_interval seconds between GPU samples
//   nvml_library the NVML library dlopen loads (default libnvidia-ml.so.1)
//   peak_tflops  the device's peak for MFU; 0 = 790 on CUDA (the measured H200/H100 bf16
//                matmul ceiling, bench/RESULTS.md), no MFU on CPU
#pragma once

#include "core/config.h"
#include "obs/metrics_endpoint.h"

namespace shardtrain {

struct MetricsConfig {
  int64_t port = -1;
  std::string address = "0.0.0.0";
  bool gpu = true;
  double gpu_interval = 1.0;
  std::string nvml_library = "libnvidia-ml.so.1";
  double peak_tflops = 0;

  void register_config(ConfigSchema& schema);
  // Throws Error naming the key.
  void validate() const;
  MetricsOptions endpoint_options() const;
  // FLOP/s for MFU on `cuda` or CPU ranks; 0 = unknown (no MFU).
  double peak_flops(bool cuda) const;
};

}  // namespace shardtrain
