#include "launch/doctor/nvml_gpu_info.h"

#include <fmt/format.h>

namespace shardtrain::doctor {
namespace {

// The few driver-API and NVML entry points used, with their C signatures (cuda.h, nvml.h);
// handles are opaque pointers, enums ints.
using CuInit = int (*)(unsigned);
using CuIntOut = int (*)(int*);
using CuDeviceGet = int (*)(int*, int);
using CuDeviceGetName = int (*)(char*, int, int);
using CuDeviceGetAttribute = int (*)(int*, int, int);
using CuDeviceTotalMem = int (*)(size_t*, int);
using CuDeviceGetPciBusId = int (*)(char*, int, int);
constexpr int kCuAttributeCcMajor = 75, kCuAttributeCcMinor = 76;

using NvmlDevice = void*;
using NvmlInit = int (*)();
using NvmlSystemGetDriverVersion = int (*)(char*, unsigned);
using NvmlGetHandleByPciBusId = int (*)(const char*, NvmlDevice*);
using NvmlGetEccMode = int (*)(NvmlDevice, int*, int*);
using NvmlGetTotalEccErrors = int (*)(NvmlDevice, int, int, unsigned long long*);
using NvmlGetRetiredPages = int (*)(NvmlDevice, int, unsigned*, unsigned long long*);
using NvmlGetRetiredPagesPending = int (*)(NvmlDevice, int*);
using NvmlGetRemappedRows = int (*)(NvmlDevice, unsigned*, unsigned*, unsigned*, unsigned*);
constexpr int kNvmlSuccess = 0, kNvmlInsufficientSize = 7;
constexpr int kNvmlUncorrected = 1, kNvmlVolatile = 0, kNvmlDoubleBitRetirement = 1;

template <typename Function>
Function find(LoadedLibrary& library, const char* name) {
  return reinterpret_cast<Function>(library.symbol(name));
}

class DriverGpuInfo final : public GpuInfoSource {
 public:
  explicit DriverGpuInfo(LibraryLoader& libraries) : libraries_(libraries) {}

  GpuReport read() override {
    GpuReport report;
    std::vector<std::string> bus_ids;
    read_cuda(report, bus_ids);
    read_nvml(report, bus_ids);
    return report;
  }

 private:
  void read_cuda(GpuReport& report, std::vector<std::string>& bus_ids) {
    cuda_ = libraries_.open("libcuda.so.1", report.driver_error);
    if (!cuda_) return;
    const auto init = find<CuInit>(*cuda_, "cuInit");
    const auto version = find<CuIntOut>(*cuda_, "cuDriverGetVersion");
    const auto count = find<CuIntOut>(*cuda_, "cuDeviceGetCount");
    const auto get = find<CuDeviceGet>(*cuda_, "cuDeviceGet");
    const auto name = find<CuDeviceGetName>(*cuda_, "cuDeviceGetName");
    const auto attribute = find<CuDeviceGetAttribute>(*cuda_, "cuDeviceGetAttribute");
    const auto memory = find<CuDeviceTotalMem>(*cuda_, "cuDeviceTotalMem_v2");
    const auto bus_id = find<CuDeviceGetPciBusId>(*cuda_, "cuDeviceGetPCIBusId");
    if (!init || !version || !count || !get || !name || !attribute || !memory || !bus_id) {
      report.driver_error = "libcuda.so.1 lacks driver API entry points (too old a driver?)";
      return;
    }
    version(&report.driver_cuda_version);
    if (const int status = init(0); status != 0) {
      // 100 = CUDA_ERROR_NO_DEVICE: a driver without GPUs is an answer, not an error.
      if (status != 100)
        report.driver_error = fmt::format("cuInit failed with CUresult {}", status);
      return;
    }
    int devices = 0;
    if (count(&devices) != 0) devices = 0;
    for (int i = 0; i < devices; ++i) {
      int device = 0;
      if (get(&device, i) != 0) continue;
      GpuInfo gpu;
      gpu.index = i;
      char text[256] = {};
      if (name(text, sizeof(text) - 1, device) == 0) gpu.name = text;
      attribute(&gpu.major, kCuAttributeCcMajor, device);
      attribute(&gpu.minor, kCuAttributeCcMinor, device);
      size_t bytes = 0;
      if (memory(&bytes, device) == 0) gpu.memory_bytes = bytes;
      char bus[64] = {};
      bus_ids.push_back(bus_id(bus, sizeof(bus) - 1, device) == 0 ? bus : "");
      report.gpus.push_back(gpu);
    }
  }

  void read_nvml(GpuReport& report, const std::vector<std::string>& bus_ids) {
    nvml_ = libraries_.open("libnvidia-ml.so.1", report.nvml_error);
    if (!nvml_) return;
    const auto init = find<NvmlInit>(*nvml_, "nvmlInit_v2");
    const auto driver = find<NvmlSystemGetDriverVersion>(*nvml_, "nvmlSystemGetDriverVersion");
    const auto handle = find<NvmlGetHandleByPciBusId>(*nvml_, "nvmlDeviceGetHandleByPciBusId_v2");
    if (!init || !driver || !handle) {
      report.nvml_error = "libnvidia-ml.so.1 lacks nvmlInit_v2 or device lookups";
      return;
    }
    if (const int status = init(); status != kNvmlSuccess) {
      report.nvml_error = fmt::format("nvmlInit_v2 failed with nvmlReturn_t {}", status);
      return;
    }
    char version[96] = {};
    if (driver(version, sizeof(version) - 1) == kNvmlSuccess) report.driver_version = version;
    for (size_t i = 0; i < report.gpus.size() && i < bus_ids.size(); ++i) {
      NvmlDevice device = nullptr;
      if (bus_ids[i].empty() || handle(bus_ids[i].c_str(), &device) != kNvmlSuccess) continue;
      read_health(device, report.gpus[i]);
    }
    if (const auto shutdown = find<NvmlInit>(*nvml_, "nvmlShutdown")) shutdown();
  }

  // Each query is optional: GPUs without ECC, or without page retirement (Hopper remaps rows
  // instead), answer NOT_SUPPORTED and the field stays nullopt.
  void read_health(NvmlDevice device, GpuInfo& gpu) {
    if (const auto ecc = find<NvmlGetEccMode>(*nvml_, "nvmlDeviceGetEccMode")) {
      int current = 0, pending = 0;
      if (ecc(device, &current, &pending) == kNvmlSuccess) gpu.ecc_enabled = current == 1;
    }
    if (const auto errors = find<NvmlGetTotalEccErrors>(*nvml_, "nvmlDeviceGetTotalEccErrors")) {
      unsigned long long count = 0;
      if (errors(device, kNvmlUncorrected, kNvmlVolatile, &count) == kNvmlSuccess) {
        gpu.ecc_uncorrected_volatile = count;
      }
    }
    if (const auto retired = find<NvmlGetRetiredPages>(*nvml_, "nvmlDeviceGetRetiredPages")) {
      unsigned pages = 0;
      const int status = retired(device, kNvmlDoubleBitRetirement, &pages, nullptr);
      if (status == kNvmlSuccess || status == kNvmlInsufficientSize) gpu.retired_pages = pages;
    }
    if (const auto pending =
            find<NvmlGetRetiredPagesPending>(*nvml_, "nvmlDeviceGetRetiredPagesPendingStatus")) {
      int state = 0;
      if (pending(device, &state) == kNvmlSuccess) gpu.retirement_pending = state == 1;
    }
    if (const auto rows = find<NvmlGetRemappedRows>(*nvml_, "nvmlDeviceGetRemappedRows")) {
      unsigned corrected = 0, uncorrected = 0, is_pending = 0, failed = 0;
      if (rows(device, &corrected, &uncorrected, &is_pending, &failed) == kNvmlSuccess) {
        gpu.row_remap_pending = is_pending != 0;
        gpu.row_remap_failed = failed != 0;
      }
    }
  }

  LibraryLoader& libraries_;
  std::unique_ptr<LoadedLibrary> cuda_;  // kept open: CUDA must not be unloaded once initialised
  std::unique_ptr<LoadedLibrary> nvml_;
};

}  // namespace

std::unique_ptr<GpuInfoSource> make_driver_gpu_info(LibraryLoader& libraries) {
  return std::make_unique<DriverGpuInfo>(libraries);
}

}  // namespace shardtrain::doctor
