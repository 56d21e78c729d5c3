#include "launch/doctor/host_checks.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

namespace shardtrain::doctor {
namespace fs = std::filesystem;

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", value, units[unit]);
}

CheckResult check_shm(const SystemView& view, int local_gpus) {
  const char* name = "shm";
  const uint64_t gpus = static_cast<uint64_t>(std::max(local_gpus, 1));
  const uint64_t need = gpus << 30;
  const std::optional<FilesystemSpace> space = view.filesystem_space(view.at("/dev/shm"));
  const std::string hint = fmt::format(
      "give /dev/shm at least {}: docker run --shm-size={}g; in Kubernetes mount an emptyDir "
      "with medium: Memory (sizeLimit {}Gi) at /dev/shm",
      human_bytes(need), gpus, gpus);
  if (!space) return fail_check(name, "/dev/shm does not exist", hint);
  const std::string detail =
      fmt::format("/dev/shm {} ({} free); {} for {} local GPU(s)", human_bytes(space->size_bytes),
                  human_bytes(space->free_bytes), human_bytes(need), gpus);
  if (space->size_bytes < need / 2) return fail_check(name, detail + " needed", hint);
  if (space->size_bytes < need) return warn(name, detail + " recommended", hint);
  if (space->free_bytes < need / 2) {
    return warn(name, detail + " recommended, but little is free",
                "something else fills /dev/shm: look for stale files (ls -la /dev/shm)");
  }
  return pass(name, detail + " recommended");
}

CheckResult check_memlock(const SystemView& view, const RdmaDevices& devices,
                          std::optional<Transport> expect) {
  const char* name = "memlock";
  if (!view.memlock_bytes) return pass(name, "ulimit -l unlimited");
  const std::string detail = "ulimit -l " + human_bytes(*view.memlock_bytes);
  if (view.ipc_lock) {
    return pass(name, detail + ", but CAP_IPC_LOCK lets EFA/InfiniBand pin memory past it");
  }
  const std::string hint =
      "raise it to unlimited: `ulimit -l unlimited` (needs CAP_SYS_RESOURCE), "
      "/etc/security/limits.conf `* - memlock unlimited`, docker --ulimit memlock=-1; in "
      "Kubernetes add the IPC_LOCK capability to the container (shardtrain k8s does with EFA) or "
      "set the container runtime's default ulimits (containerd LimitMEMLOCK=infinity)";
  const bool rdma = !devices.efa.empty() || !devices.hcas.empty() || expect == Transport::kEfa ||
                    expect == Transport::kIb;
  if (rdma) return fail_check(name, detail + "; EFA/InfiniBand need it unlimited", hint);
  return warn(name, detail + "; fine for sockets, but EFA/InfiniBand need it unlimited", hint);
}

CheckResult check_disk(const SystemView& view, const std::string& dir,
                       const std::optional<CheckpointNeed>& need) {
  const char* name = "disk";
  fs::path existing = view.at(fs::absolute(dir).string());
  std::error_code ec;
  while (!fs::exists(existing, ec) && existing.has_parent_path() &&
         existing != existing.parent_path()) {
    existing = existing.parent_path();
  }
  const std::optional<FilesystemSpace> space = view.filesystem_space(existing);
  if (!space) {
    return fail_check(
        name, "cannot stat the filesystem of checkpoint dir " + dir,
        "mount the checkpoint volume (e.g. a PersistentVolumeClaim or FSx) at " + dir);
  }
  if (::access(existing.c_str(), W_OK) != 0) {
    return fail_check(name,
                      fmt::format("checkpoint dir {}: {} is not writable", dir, existing.string()),
                      "fix the volume's permissions (runAsUser / fsGroup in Kubernetes)");
  }
  std::string detail = fmt::format("checkpoint dir {}: {} free of {}", dir,
                                   human_bytes(space->free_bytes), human_bytes(space->size_bytes));
  if (!need) return pass(name, detail + " (pass --config to compare with the job's checkpoints)");
  detail +=
      fmt::format("; the job's checkpoints need {} ({})", human_bytes(need->bytes), need->how);
  if (space->free_bytes < need->bytes) {
    return fail_check(name, detail,
                      "free space, use a bigger volume, or lower train.keep_checkpoints");
  }
  if (space->free_bytes < need->bytes + need->bytes / 4) {
    return warn(name, detail + "; less than 25% headroom",
                "logs, exports and a slower prune can fill the rest; use a bigger volume");
  }
  return pass(name, detail);
}

CheckResult check_hostname(const std::string& name, const HostResolution& resolution) {
  if (!resolution.routable.empty()) {
    return pass("hostname", fmt::format("'{}' resolves to {}: other nodes reach this one there",
                                        name, resolution.routable));
  }
  const std::string hint = fmt::format(
      "one node: nothing to do; several nodes: map '{}' to this node's address in /etc/hosts "
      "(or DNS), since other nodes are told to reach it by that name and Gloo (CPU ranks) binds "
      "to what it resolves to",
      name);
  if (!resolution.resolved) {
    return warn("hostname", fmt::format("'{}' does not resolve here ({})", name, resolution.error),
                hint);
  }
  return warn("hostname",
              fmt::format("'{}' resolves only to loopback or link-local addresses here", name),
              hint);
}

}  // namespace shardtrain::doctor
