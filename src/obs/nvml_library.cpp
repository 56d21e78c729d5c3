#include "obs/nvml_library.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <chrono>
#include <thread>
#include <vector>

namespace shardtrain {
namespace {

// The ABI subset of nvml.h used here (stable across NVML versions; nvml.h is not needed to
// build).
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
using nvmlEventSet_t = void*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr int kClockSm = 1, kClockMem = 2;  // nvmlClockType_t
constexpr int kTemperatureGpu = 0;          // nvmlTemperatureSensors_t
constexpr unsigned long long kEventXidCriticalError = 0x8;
constexpr unsigned kBufferSize = 96;  // NVML_DEVICE_{NAME,UUID}_V2_BUFFER_SIZE

struct NvmlUtilization {
  unsigned gpu, memory;
};
struct NvmlMemory {
  unsigned long long total, free, used;
};
struct NvmlMemoryV2 {
  unsigned version;
  unsigned long long total, reserved, free, used;
};
constexpr unsigned kNvmlMemoryV2Version = sizeof(NvmlMemoryV2) | (2u << 24);
struct NvmlEventData {
  nvmlDevice_t device;
  unsigned long long event_type, event_data;
  unsigned gpu_instance_id, compute_instance_id;
};

}  // namespace

struct NvmlLibrary::Api {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*device_count)(unsigned*) = nullptr;
  nvmlReturn_t (*handle_by_index)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, NvmlUtilization*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, NvmlMemory*) = nullptr;
  nvmlReturn_t (*memory_v2)(nvmlDevice_t, NvmlMemoryV2*) = nullptr;  // optional
  nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*energy)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*pcie_replays)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*event_set_create)(nvmlEventSet_t*) = nullptr;
  nvmlReturn_t (*register_events)(nvmlDevice_t, unsigned long long, nvmlEventSet_t) = nullptr;
  nvmlReturn_t (*event_set_wait)(nvmlEventSet_t, NvmlEventData*, unsigned) = nullptr;
  nvmlReturn_t (*event_set_free)(nvmlEventSet_t) = nullptr;
  std::vector<nvmlDevice_t> devices;
};

namespace {

template <typename F>
bool bind(void* handle, const char* symbol, F& function, std::string& missing) {
  function = reinterpret_cast<F>(::dlsym(handle, symbol));
  if (function == nullptr && missing.empty()) missing = symbol;
  return function != nullptr;
}

}  // namespace

std::unique_ptr<NvmlLibrary> NvmlLibrary::open(const std::string& path, std::string& why_not) {
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = ::dlerror();
    why_not = fmt::format("cannot load {} ({})", path, error ? error : "not found");
    return nullptr;
  }
  auto api = std::make_unique<Api>();
  std::string missing;
  bind(handle, "nvmlInit_v2", api->init, missing);
  bind(handle, "nvmlShutdown", api->shutdown, missing);
  bind(handle, "nvmlDeviceGetCount_v2", api->device_count, missing);
  bind(handle, "nvmlDeviceGetHandleByIndex_v2", api->handle_by_index, missing);
  bind(handle, "nvmlDeviceGetName", api->name, missing);
  bind(handle, "nvmlDeviceGetUUID", api->uuid, missing);
  bind(handle, "nvmlDeviceGetUtilizationRates", api->utilization, missing);
  bind(handle, "nvmlDeviceGetMemoryInfo", api->memory, missing);
  bind(handle, "nvmlDeviceGetClockInfo", api->clock, missing);
  bind(handle, "nvmlDeviceGetTemperature", api->temperature, missing);
  bind(handle, "nvmlDeviceGetPowerUsage", api->power, missing);
  bind(handle, "nvmlDeviceGetTotalEnergyConsumption", api->energy, missing);
  bind(handle, "nvmlDeviceGetPcieReplayCounter", api->pcie_replays, missing);
  bind(handle, "nvmlEventSetCreate", api->event_set_create, missing);
  bind(handle, "nvmlDeviceRegisterEvents", api->register_events, missing);
  bind(handle, "nvmlEventSetWait_v2", api->event_set_wait, missing);
  bind(handle, "nvmlEventSetFree", api->event_set_free, missing);
  if (!missing.empty()) {
    why_not = fmt::format("{} lacks {} (driver too old)", path, missing);
    ::dlclose(handle);
    return nullptr;
  }
  std::string optional_missing;
  bind(handle, "nvmlDeviceGetMemoryInfo_v2", api->memory_v2, optional_missing);
  if (const nvmlReturn_t r = api->init(); r != kNvmlSuccess) {
    why_not = fmt::format("nvmlInit failed with NVML error {} (no driver or no GPU)", r);
    ::dlclose(handle);
    return nullptr;
  }
  return std::unique_ptr<NvmlLibrary>(new NvmlLibrary(handle, std::move(api)));
}

NvmlLibrary::NvmlLibrary(void* handle, std::unique_ptr<Api> api)
    : handle_(handle), api_(std::move(api)) {
  unsigned count = 0;
  if (api_->device_count(&count) != kNvmlSuccess) count = 0;
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t device = nullptr;
    if (api_->handle_by_index(i, &device) != kNvmlSuccess) break;
    api_->devices.push_back(device);
  }
  device_count_ = static_cast<int>(api_->devices.size());
  nvmlEventSet_t set = nullptr;
  if (device_count_ > 0 && api_->event_set_create(&set) == kNvmlSuccess) {
    bool any = false;
    for (nvmlDevice_t device : api_->devices) {
      any = api_->register_events(device, kEventXidCriticalError, set) == kNvmlSuccess || any;
    }
    if (any) {
      event_set_ = set;
    } else {
      api_->event_set_free(set);
    }
  }
}

NvmlLibrary::~NvmlLibrary() {
  if (event_set_ != nullptr) api_->event_set_free(event_set_);
  api_->shutdown();
  ::dlclose(handle_);
}

std::string NvmlLibrary::device_name(int device) const {
  char buffer[kBufferSize] = {};
  if (api_->name(api_->devices.at(device), buffer, kBufferSize) != kNvmlSuccess) return "";
  return buffer;
}

std::string NvmlLibrary::device_uuid(int device) const {
  char buffer[kBufferSize] = {};
  if (api_->uuid(api_->devices.at(device), buffer, kBufferSize) != kNvmlSuccess) return "";
  return buffer;
}

GpuReading NvmlLibrary::read(int index) const {
  const nvmlDevice_t device = api_->devices.at(index);
  GpuReading r;
  if (NvmlUtilization u{}; api_->utilization(device, &u) == kNvmlSuccess) {
    r.gpu_util_percent = u.gpu;
    r.memory_util_percent = u.memory;
  }
  // v2 reports "used" without the driver's reserved memory, as nvidia-smi does.
  NvmlMemoryV2 m2{};
  m2.version = kNvmlMemoryV2Version;
  if (api_->memory_v2 != nullptr && api_->memory_v2(device, &m2) == kNvmlSuccess) {
    r.fb_used_bytes = m2.used;
    r.fb_free_bytes = m2.free;
  } else if (NvmlMemory m{}; api_->memory(device, &m) == kNvmlSuccess) {
    r.fb_used_bytes = m.used;
    r.fb_free_bytes = m.free;
  }
  unsigned value = 0;
  if (api_->clock(device, kClockSm, &value) == kNvmlSuccess) r.sm_clock_mhz = value;
  if (api_->clock(device, kClockMem, &value) == kNvmlSuccess) r.memory_clock_mhz = value;
  if (api_->temperature(device, kTemperatureGpu, &value) == kNvmlSuccess) r.temperature_c = value;
  if (api_->power(device, &value) == kNvmlSuccess) r.power_mw = value;
  if (api_->pcie_replays(device, &value) == kNvmlSuccess) r.pcie_replays = value;
  if (unsigned long long mj = 0; api_->energy(device, &mj) == kNvmlSuccess) r.energy_mj = mj;
  return r;
}

std::optional<XidEvent> NvmlLibrary::wait_xid(unsigned timeout_ms) {
  if (event_set_ == nullptr) {
    std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
    return std::nullopt;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  NvmlEventData data{};
  if (api_->event_set_wait(event_set_, &data, timeout_ms) != kNvmlSuccess ||
      (data.event_type & kEventXidCriticalError) == 0) {
    // A timeout returns at the deadline; an error may return at once: never spin.
    std::this_thread::sleep_until(deadline);
    return std::nullopt;
  }
  XidEvent event;
  event.xid = data.event_data;
  for (int i = 0; i < device_count_; ++i) {
    if (api_->devices[i] == data.device) event.device = i;
  }
  return event;
}

}  // namespace shardtrain
