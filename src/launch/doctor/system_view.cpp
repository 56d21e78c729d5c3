#include "launch/doctor/system_view.h"

#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/statvfs.h>

#include <cstdlib>
#include <fstream>
#include <string>

extern char** environ;

namespace shardtrain::doctor {
namespace {

class DlopenLibrary final : public LoadedLibrary {
 public:
  explicit DlopenLibrary(void* handle) : handle_(handle) {}
  ~DlopenLibrary() override { ::dlclose(handle_); }
  DlopenLibrary(const DlopenLibrary&) = delete;
  DlopenLibrary& operator=(const DlopenLibrary&) = delete;
  void* symbol(const char* name) override { return ::dlsym(handle_, name); }

 private:
  void* handle_;
};

class DlopenLoader final : public LibraryLoader {
 public:
  std::unique_ptr<LoadedLibrary> open(const std::string& soname, std::string& error) override {
    void* handle = ::dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = ::dlerror();
      error = why ? why : soname + ": not found";
      return nullptr;
    }
    return std::make_unique<DlopenLibrary>(handle);
  }
};

std::optional<FilesystemSpace> statvfs_space(const std::filesystem::path& path) {
  struct statvfs info {};
  if (::statvfs(path.c_str(), &info) != 0) return std::nullopt;
  return FilesystemSpace{static_cast<uint64_t>(info.f_blocks) * info.f_frsize,
                         static_cast<uint64_t>(info.f_bavail) * info.f_frsize};
}

}  // namespace

std::unique_ptr<LibraryLoader> make_dlopen_loader() { return std::make_unique<DlopenLoader>(); }

std::filesystem::path SystemView::at(const std::string& absolute) const {
  return root / std::filesystem::path(absolute).relative_path();
}

std::string SystemView::getenv(const std::string& name) const {
  const auto it = env.find(name);
  return it == env.end() ? "" : it->second;
}

namespace {

// Bit `capability` of CapEff in /proc/self/status (false when unreadable).
bool effective_capability(int capability) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    const unsigned long long mask = std::strtoull(line.c_str() + 7, nullptr, 16);
    return (mask >> capability & 1ULL) != 0;
  }
  return false;
}

}  // namespace

SystemView make_host_view(LibraryLoader& libraries, GpuInfoSource& gpus) {
  SystemView view;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const size_t equals = text.find('=');
    if (equals != std::string::npos) view.env[text.substr(0, equals)] = text.substr(equals + 1);
  }
  view.libraries = &libraries;
  view.gpus = &gpus;
  view.filesystem_space = statvfs_space;
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_MEMLOCK, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    view.memlock_bytes = static_cast<uint64_t>(limit.rlim_cur);
  }
  view.ipc_lock = effective_capability(14);  // CAP_IPC_LOCK
  view.host_name = shardtrain::host_name();
  view.resolve_host = shardtrain::resolve_host;
  return view;
}

}  // namespace shardtrain::doctor
