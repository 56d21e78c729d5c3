#include "launch/doctor/gpu_checks.h"

#include <fmt/format.h>

#include <vector>

namespace shardtrain::doctor {
namespace {

std::string gib(uint64_t bytes) {
  return fmt::format("{:.0f} GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
}

std::string join(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : "; ") + item;
  return text;
}

}  // namespace

std::string cuda_version_text(int version) {
  return fmt::format("{}.{}", version / 1000, version % 1000 / 10);
}

CheckResult check_gpus(const GpuReport& report, const CudaBuildInfo& build) {
  const char* name = "gpus";
  if (report.gpus.empty()) {
    const std::string why =
        report.driver_error.empty() ? "the CUDA driver sees no GPU" : report.driver_error;
    return fail_check(name, "no GPU: " + why,
                      "run on a GPU node; in Kubernetes request nvidia.com/gpu (NVIDIA device "
                      "plugin installed?) and check CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES");
  }
  std::vector<std::string> described, refused, jit;
  for (const GpuInfo& gpu : report.gpus) {
    const std::string text = fmt::format("{}: {} (sm_{}{}, {})", gpu.index, gpu.name, gpu.major,
                                         gpu.minor, gib(gpu.memory_bytes));
    described.push_back(text);
    switch (build_supports_compute_capability(build, gpu.major, gpu.minor)) {
      case ArchSupport::kNative:
        break;
      case ArchSupport::kPtxJit:
        jit.push_back(text);
        break;
      case ArchSupport::kNo:
        refused.push_back(text);
        break;
    }
  }
  const std::string detail =
      fmt::format("{} GPU(s): {}; this build has code for {}", report.gpus.size(), join(described),
                  describe_archs(build));
  if (!build.with_cuda) {
    return fail_check(name, detail + " (a CPU-only build)",
                      "use a shardtrain built with CUDA (scripts/build.sh on a machine with the "
                      "CUDA toolkit)");
  }
  if (!refused.empty()) {
    return fail_check(name, detail + "; cannot run on " + join(refused),
                      "shardtrain needs compute capability 8.0+ (bf16: A100, A10G, L4, H100, "
                      "H200); for a newer GPU rebuild with -DSHARDTRAIN_CUDA_ARCH=<its sm>");
  }
  if (!jit.empty()) {
    return warn(name, detail + "; runs through PTX JIT on " + join(jit),
                "the first start compiles the kernels (minutes) and they may be slower; rebuild "
                "with -DSHARDTRAIN_CUDA_ARCH including this GPU's architecture");
  }
  return pass(name, detail);
}

CheckResult check_gpu_health(const GpuReport& report) {
  const char* name = "gpu_health";
  if (report.gpus.empty()) return pass(name, "no GPU to check");
  if (!report.nvml_error.empty()) {
    return warn(name, "not checked: NVML unavailable (" + report.nvml_error + ")",
                "install the NVIDIA driver's libnvidia-ml.so.1 (in containers: the NVIDIA "
                "container toolkit mounts it) to check ECC and retired pages");
  }
  std::vector<std::string> broken, doubtful, fine;
  for (const GpuInfo& gpu : report.gpus) {
    const std::string id = fmt::format("GPU {}", gpu.index);
    if (gpu.row_remap_failed.value_or(false)) broken.push_back(id + " row remapping failed");
    if (gpu.row_remap_pending.value_or(false)) broken.push_back(id + " row remap pending reset");
    if (gpu.retirement_pending.value_or(false)) broken.push_back(id + " page retirement pending");
    if (gpu.ecc_uncorrected_volatile.value_or(0) > 0) {
      broken.push_back(fmt::format("{} {} uncorrected ECC errors since driver load", id,
                                   *gpu.ecc_uncorrected_volatile));
    }
    if (gpu.ecc_enabled.has_value() && !*gpu.ecc_enabled) doubtful.push_back(id + " ECC off");
    std::string state = id + fmt::format(" ECC {}", !gpu.ecc_enabled.has_value() ? "n/a"
                                                    : *gpu.ecc_enabled           ? "on"
                                                                                 : "off");
    if (gpu.retired_pages) state += fmt::format(", {} retired pages", *gpu.retired_pages);
    fine.push_back(state);
  }
  const std::string driver = "driver " + report.driver_version + "; ";
  if (!broken.empty()) {
    return fail_check(name, driver + join(broken),
                      "drain this node: reset the GPU (nvidia-smi -r, or reboot) to apply pending "
                      "retirements/remaps; a failed remap or repeated uncorrected errors mean the "
                      "GPU must be replaced");
  }
  if (!doubtful.empty()) {
    return warn(name, driver + join(doubtful),
                "enable ECC (nvidia-smi -e 1, then reset) so memory errors are corrected and "
                "reported");
  }
  return pass(name, driver + join(fine));
}

CheckResult check_cuda_driver(const GpuReport& report, const CudaBuildInfo& build) {
  const char* name = "cuda_driver";
  if (report.driver_cuda_version == 0) {
    return fail_check(name, "no CUDA driver: " + report.driver_error,
                      "install the NVIDIA driver (libcuda.so.1); in containers run with the "
                      "NVIDIA container toolkit (--gpus all / the device plugin)");
  }
  const std::string driver =
      "driver supports CUDA " + cuda_version_text(report.driver_cuda_version) +
      (report.driver_version.empty() ? "" : " (" + report.driver_version + ")");
  if (!build.with_cuda) return pass(name, driver + "; this build has no CUDA backend");
  const std::string built = fmt::format(
      "; binary built with CUDA runtime {}, runtime loaded {}",
      cuda_version_text(build.runtime_built),
      build.runtime_loaded ? cuda_version_text(build.runtime_loaded) : std::string("none"));
  if (report.driver_cuda_version / 1000 < build.runtime_built / 1000) {
    return fail_check(
        name, driver + built,
        fmt::format("upgrade the NVIDIA driver to one for CUDA {}.x or newer, or use "
                    "a build made with the CUDA {} toolkit",
                    build.runtime_built / 1000, cuda_version_text(report.driver_cuda_version)));
  }
  if (report.driver_cuda_version < build.runtime_built) {
    return warn(name, driver + built,
                "runs under CUDA minor version compatibility; upgrade the driver if kernels fail "
                "to load (PTX JIT needs a driver as new as the toolkit)");
  }
  return pass(name, driver + built);
}

}  // namespace shardtrain::doctor
