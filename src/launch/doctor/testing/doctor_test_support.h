// Made-up systems for the doctor tests (header-only; tests only): a root directory the test
// fills with /sys, /etc and library files, a library loader answering from a table, a GPU
// source returning a fixed report, and filesystem sizes per path.
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "core/testing/test_support.h"
#include "launch/doctor/system_view.h"

namespace shardtrain::doctor::testing {

class TableLibrary final : public LoadedLibrary {
 public:
  explicit TableLibrary(std::map<std::string, void*> symbols) : symbols_(std::move(symbols)) {}
  void* symbol(const char* name) override {
    const auto it = symbols_.find(name);
    return it == symbols_.end() ? nullptr : it->second;
  }

 private:
  std::map<std::string, void*> symbols_;
};

class TableLoader final : public LibraryLoader {
 public:
  std::map<std::string, std::map<std::string, void*>> libraries;  // soname -> symbols
  std::unique_ptr<LoadedLibrary> open(const std::string& soname, std::string& error) override {
    const auto it = libraries.find(soname);
    if (it == libraries.end()) {
      error = soname + ": cannot open shared object file: No such file or directory";
      return nullptr;
    }
    return std::make_unique<TableLibrary>(it->second);
  }
};

class FixedGpus final : public GpuInfoSource {
 public:
  GpuReport report;
  GpuReport read() override { return report; }
};

// A SystemView over a fresh temporary root.
class FakeSystem {
 public:
  FakeSystem() : root_("shardtrain_doctor_root_") {
    view.root = root_.path();
    view.libraries = &loader;
    view.gpus = &gpus;
    view.filesystem_space =
        [this](const std::filesystem::path& path) -> std::optional<FilesystemSpace> {
      const auto it = spaces.find(path.string());
      if (it != spaces.end()) return it->second;
      if (!std::filesystem::exists(path)) return std::nullopt;
      return FilesystemSpace{1ull << 40, 1ull << 40};  // 1 TiB by default
    };
  }

  // Writes `text` at the absolute path `absolute` under the root (parents created).
  void write(const std::string& absolute, const std::string& text = "") const {
    const std::filesystem::path path = view.at(absolute);
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
  void mkdir(const std::string& absolute) const {
    std::filesystem::create_directories(view.at(absolute));
  }
  // A symlink at `absolute` pointing to `target` (taken literally).
  void symlink(const std::string& target, const std::string& absolute) const {
    std::filesystem::create_directories(view.at(absolute).parent_path());
    std::filesystem::create_symlink(target, view.at(absolute));
  }
  // An RDMA device under /sys/class/infiniband with the given driver and port states.
  void rdma_device(const std::string& name, const std::string& driver,
                   const std::vector<std::string>& port_states,
                   const std::string& link_layer = "InfiniBand") const {
    const std::string dir = "/sys/class/infiniband/" + name;
    symlink("../../../../bus/pci/drivers/" + driver, dir + "/device/driver");
    for (size_t i = 0; i < port_states.size(); ++i) {
      const std::string port = dir + "/ports/" + std::to_string(i + 1);
      write(port + "/state", port_states[i] + "\n");
      write(port + "/link_layer", link_layer + "\n");
    }
  }
  void set_space(const std::string& absolute, uint64_t size, uint64_t free) {
    spaces[view.at(absolute).string()] = FilesystemSpace{size, free};
  }

  TableLoader loader;
  FixedGpus gpus;
  std::map<std::string, FilesystemSpace> spaces;  // by path under root
  SystemView view;

 private:
  shardtrain::testing::TempDir root_;
};

}  // namespace shardtrain::doctor::testing
