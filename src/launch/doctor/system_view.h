// SystemView: everything `shardtrain doctor`'s node checks read from the machine, injectable, so
// each check is a plain function that tests run against made-up system trees:
//   - `root`: the directory that stands for "/" (/sys, /proc, /dev/shm, /etc and the library
//     directories are read under it);
//   - `env`: the environment variables that decide the transport;
//   - `libraries`: opens shared libraries (dlopen on a real machine, a table in tests);
//   - `gpus`: the GPU and driver facts (gpu_info.h);
//   - `filesystem_space`: size and free bytes of the filesystem holding a path (statvfs);
//   - `memlock_bytes`: RLIMIT_MEMLOCK (nullopt = unlimited);
//   - `ipc_lock`: CAP_IPC_LOCK in the effective set (the kernel then lets the process pin
//     memory past RLIMIT_MEMLOCK, which is what Kubernetes' `capabilities: add: [IPC_LOCK]`
//     gives an EFA pod);
//   - `host_name` and `resolve_host`: this machine's name and what a name resolves to here
//     (dist/host_name.h; unset resolve_host: the hostname check is left out).
// make_host_view() fills it from this process's machine.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "dist/host_name.h"
#include "launch/doctor/gpu_info.h"

namespace shardtrain::doctor {

class LoadedLibrary {
 public:
  virtual ~LoadedLibrary() = default;
  virtual void* symbol(const char* name) = 0;  // nullptr when absent
};

class LibraryLoader {
 public:
  virtual ~LibraryLoader() = default;
  // Opens `soname` the way the dynamic loader would; nullptr with `error` set when it cannot.
  virtual std::unique_ptr<LoadedLibrary> open(const std::string& soname, std::string& error) = 0;
};

// dlopen/dlsym; the handle is closed when the LoadedLibrary is destroyed.
std::unique_ptr<LibraryLoader> make_dlopen_loader();

struct FilesystemSpace {
  uint64_t size_bytes = 0;
  uint64_t free_bytes = 0;  // available to unprivileged users
};

struct SystemView {
  std::filesystem::path root = "/";
  std::map<std::string, std::string> env;
  LibraryLoader* libraries = nullptr;  // not owned; REQUIRES: set
  GpuInfoSource* gpus = nullptr;       // not owned; REQUIRES: set
  // nullopt when the path (taken as is: callers pass at(...)) does not exist or cannot be read.
  std::function<std::optional<FilesystemSpace>(const std::filesystem::path&)> filesystem_space;
  std::optional<uint64_t> memlock_bytes;
  bool ipc_lock = false;
  std::string host_name;
  std::function<HostResolution(const std::string&)> resolve_host;

  // `absolute` ("/sys/class/infiniband") under root.
  std::filesystem::path at(const std::string& absolute) const;
  // The variable's value, or "" when unset.
  std::string getenv(const std::string& name) const;
};

// The machine this process runs on: root "/", this process's environment, dlopen, statvfs,
// getrlimit. `libraries` and `gpus` must outlive the view.
SystemView make_host_view(LibraryLoader& libraries, GpuInfoSource& gpus);

}  // namespace shardtrain::doctor
