#include "launch/doctor/node_facts.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

namespace shardtrain::doctor {
namespace fs = std::filesystem;
namespace {

std::string first_line(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::vector<fs::path> entries(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) out.push_back(entry.path());
  std::sort(out.begin(), out.end());
  return out;
}

RdmaDevice read_rdma_device(const fs::path& dir) {
  RdmaDevice device;
  device.name = dir.filename().string();
  std::error_code ec;
  const fs::path driver = fs::read_symlink(dir / "device" / "driver", ec);
  if (!ec) device.driver = driver.filename().string();
  for (const fs::path& port : entries(dir / "ports")) {
    RdmaPort p;
    p.number = port.filename().string();
    const std::string state = first_line(port / "state");  // "4: ACTIVE"
    const size_t colon = state.find(':');
    p.state = colon == std::string::npos ? state : state.substr(colon + 1);
    p.state.erase(0, p.state.find_first_not_of(' '));
    p.link_layer = first_line(port / "link_layer");
    device.ports.push_back(p);
  }
  return device;
}

// Directories named by one ld.so.conf file, following "include" globs of the form DIR/*.conf.
void read_ld_conf(const SystemView& view, const fs::path& file, std::vector<std::string>& dirs,
                  int depth) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string word;
    if (!(words >> word)) continue;
    if (word == "include" && depth < 4) {
      std::string pattern;
      words >> pattern;
      const fs::path dir = fs::path(pattern).parent_path();
      for (const fs::path& conf : entries(view.at(dir.string()))) {
        if (conf.extension() == ".conf") read_ld_conf(view, conf, dirs, depth + 1);
      }
    } else if (word.front() == '/') {
      dirs.push_back(word);
    }
  }
}

}  // namespace

const char* transport_name(Transport transport) {
  switch (transport) {
    case Transport::kSocket:
      return "socket";
    case Transport::kIb:
      return "ib";
    case Transport::kEfa:
      return "efa";
  }
  return "?";
}

std::optional<Transport> parse_transport(const std::string& text) {
  if (text == "socket") return Transport::kSocket;
  if (text == "ib") return Transport::kIb;
  if (text == "efa") return Transport::kEfa;
  return std::nullopt;
}

bool RdmaDevice::any_port_active() const {
  return std::any_of(ports.begin(), ports.end(),
                     [](const RdmaPort& p) { return p.state == "ACTIVE"; });
}

bool RdmaDevices::any_active_hca() const {
  return std::any_of(hcas.begin(), hcas.end(),
                     [](const RdmaDevice& d) { return d.any_port_active(); });
}

RdmaDevices find_rdma_devices(const SystemView& view) {
  RdmaDevices devices;
  for (const fs::path& dir : entries(view.at("/sys/class/infiniband"))) {
    RdmaDevice device = read_rdma_device(dir);
    (device.driver == "efa" ? devices.efa : devices.hcas).push_back(std::move(device));
  }
  return devices;
}

std::vector<std::string> network_interfaces(const SystemView& view) {
  std::vector<std::string> names;
  for (const fs::path& dir : entries(view.at("/sys/class/net"))) {
    names.push_back(dir.filename().string());
  }
  return names;
}

std::vector<std::string> library_search_dirs(const SystemView& view) {
  std::vector<std::string> dirs;
  std::istringstream path(view.getenv("LD_LIBRARY_PATH"));
  for (std::string dir; std::getline(path, dir, ':');) {
    if (!dir.empty()) dirs.push_back(dir);
  }
  read_ld_conf(view, view.at("/etc/ld.so.conf"), dirs, 0);
  for (const char* dir :
       {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu", "/lib", "/usr/lib", "/lib64", "/usr/lib64", "/usr/local/lib",
        "/opt/amazon/ofi-nccl/lib", "/opt/amazon/ofi-nccl/lib64", "/opt/aws-ofi-nccl/lib"}) {
    dirs.push_back(dir);
  }
  std::vector<std::string> unique;
  for (const std::string& dir : dirs) {
    if (std::find(unique.begin(), unique.end(), dir) == unique.end()) unique.push_back(dir);
  }
  return unique;
}

std::vector<std::string> find_nccl_net_plugins(const SystemView& view) {
  std::vector<std::string> plugins;
  for (const std::string& dir : library_search_dirs(view)) {
    for (const fs::path& file : entries(view.at(dir))) {
      const std::string name = file.filename().string();
      if (name.rfind("libnccl-net", 0) == 0 && name.find(".so") != std::string::npos) {
        plugins.push_back((fs::path(dir) / name).string());
      }
    }
  }
  return plugins;
}

bool FabricInfo::has_provider(const std::string& name) const {
  return std::find(providers.begin(), providers.end(), name) != providers.end();
}

FabricInfo probe_libfabric(const SystemView& view) {
  FabricInfo info;
  std::unique_ptr<LoadedLibrary> library;
  for (const char* name : {"libfabric.so.1", "/opt/amazon/efa/lib/libfabric.so.1",
                           "/opt/amazon/efa/lib64/libfabric.so.1"}) {
    std::string error;
    library = view.libraries->open(name, error);
    if (library) break;
    if (info.error.empty()) info.error = error;
  }
  if (!library) return info;
  info.found = true;
  info.error.clear();
  const auto get_info = reinterpret_cast<fabric_abi::GetInfo>(library->symbol("fi_getinfo"));
  const auto free_info = reinterpret_cast<fabric_abi::FreeInfo>(library->symbol("fi_freeinfo"));
  const auto version = reinterpret_cast<fabric_abi::Version>(library->symbol("fi_version"));
  if (!get_info || !free_info) {
    info.error = "libfabric lacks fi_getinfo/fi_freeinfo";
    return info;
  }
  uint32_t api = (1u << 16) | 18u;  // FI_VERSION(1, 18): what aws-ofi-nccl asks for
  if (version) {
    const uint32_t v = version();
    info.version = std::to_string(v >> 16) + "." + std::to_string(v & 0xFFFF);
    api = std::min(api, v);
  }
  fabric_abi::Info* list = nullptr;
  if (const int status = get_info(api, nullptr, nullptr, 0, nullptr, &list); status != 0) {
    info.error = "fi_getinfo returned " + std::to_string(status) + " (no provider usable)";
    return info;
  }
  std::set<std::string> seen;
  for (const fabric_abi::Info* entry = list; entry != nullptr; entry = entry->next) {
    if (entry->fabric_attr && entry->fabric_attr->prov_name) {
      // Layered providers read "tcp;ofi_rxm": each part counts.
      std::istringstream parts(entry->fabric_attr->prov_name);
      for (std::string name; std::getline(parts, name, ';');) {
        if (!name.empty() && seen.insert(name).second) info.providers.push_back(name);
      }
    }
  }
  free_info(list);
  return info;
}

}  // namespace shardtrain::doctor
