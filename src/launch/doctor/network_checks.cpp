#include "launch/doctor/network_checks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <sstream>

namespace shardtrain::doctor {
namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), ::tolower);
  return text;
}

std::string join(const std::vector<std::string>& items, const char* separator = ", ") {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : separator) + item;
  return text;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

std::vector<std::string> device_names(const std::vector<RdmaDevice>& devices) {
  std::vector<std::string> names;
  for (const RdmaDevice& d : devices) names.push_back(d.name);
  return names;
}

// The plugin file NCCL dlopens: libnccl-net-<NCCL_NET_PLUGIN>.so, or libnccl-net.so.
std::string plugin_nccl_loads(const SystemView& view) {
  const std::string chosen = view.getenv("NCCL_NET_PLUGIN");
  if (chosen.empty()) return "libnccl-net.so";
  if (chosen.find(".so") != std::string::npos) return std::filesystem::path(chosen).filename();
  return "libnccl-net-" + chosen + ".so";
}

bool plugin_loadable(const SystemView& view, const NetworkFacts& facts) {
  const std::string wanted = plugin_nccl_loads(view);
  return std::any_of(facts.plugins.begin(), facts.plugins.end(), [&](const std::string& path) {
    const std::string name = std::filesystem::path(path).filename();
    return name == wanted || name.rfind(wanted + ".", 0) == 0;  // libnccl-net.so.1 too
  });
}

std::optional<Transport> transport_of_nccl_net(const std::string& value) {
  const std::string v = lower(value);
  if (v.empty()) return std::nullopt;
  if (v == "socket") return Transport::kSocket;
  if (v == "ib") return Transport::kIb;
  if (v.find("ofi") != std::string::npos || v.find("libfabric") != std::string::npos ||
      v.find("aws") != std::string::npos) {
    return Transport::kEfa;
  }
  return std::nullopt;
}

// Problems with variables that name interfaces or HCAs that do not exist.
std::vector<std::string> naming_errors(const SystemView& view, const NetworkFacts& facts) {
  std::vector<std::string> errors;
  if (const std::string ifname = view.getenv("NCCL_SOCKET_IFNAME"); !ifname.empty()) {
    for (std::string item : split_list(ifname)) {
      if (item.front() == '^') continue;  // exclusions cannot be wrong
      const bool exact = item.front() == '=';
      if (exact) item.erase(0, 1);
      const bool found = std::any_of(
          facts.interfaces.begin(), facts.interfaces.end(),
          [&](const std::string& name) { return exact ? name == item : name.rfind(item, 0) == 0; });
      if (!found) {
        errors.push_back(
            fmt::format("NCCL_SOCKET_IFNAME entry '{}' matches no interface (have: {})", item,
                        join(facts.interfaces)));
      }
    }
  }
  if (const std::string hca = view.getenv("NCCL_IB_HCA"); !hca.empty()) {
    std::vector<std::string> names = device_names(facts.devices.hcas);
    for (const std::string& n : device_names(facts.devices.efa)) names.push_back(n);
    for (std::string item : split_list(hca)) {
      if (item.front() == '^') continue;
      if (item.front() == '=') item.erase(0, 1);
      item = item.substr(0, item.find(':'));  // mlx5_0:1 names a port
      const bool found = std::any_of(names.begin(), names.end(), [&](const std::string& name) {
        return name.rfind(item, 0) == 0;
      });
      if (!found) {
        errors.push_back(fmt::format("NCCL_IB_HCA entry '{}' matches no RDMA device (have: {})",
                                     item, names.empty() ? "none" : join(names)));
      }
    }
  }
  return errors;
}

std::string environment_summary(const SystemView& view) {
  std::vector<std::string> set;
  for (const char* name : {"NCCL_NET", "NCCL_NET_PLUGIN", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA",
                           "NCCL_IB_DISABLE", "FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA"}) {
    if (const std::string value = view.getenv(name); !value.empty()) {
      set.push_back(fmt::format("{}={}", name, value));
    }
  }
  return set.empty() ? "no NCCL_*/FI_* transport variables set" : join(set, " ");
}

}  // namespace

std::string nccl_version_text(int code) {
  if (code >= 10000) return fmt::format("{}.{}.{}", code / 10000, code / 100 % 100, code % 100);
  return fmt::format("{}.{}.{}", code / 1000, code / 100 % 10, code % 100);
}

NetworkFacts read_network_facts(const SystemView& view) {
  NetworkFacts facts;
  facts.devices = find_rdma_devices(view);
  facts.interfaces = network_interfaces(view);
  facts.plugins = find_nccl_net_plugins(view);
  facts.fabric = probe_libfabric(view);
  return facts;
}

CheckResult check_nccl(const SystemView& view, int built_version) {
  const char* name = "nccl";
  std::string error;
  std::unique_ptr<LoadedLibrary> library = view.libraries->open("libnccl.so.2", error);
  if (!library) {
    return fail_check(name, "libnccl.so.2 not found: " + error,
                      "install NCCL (Debian/Ubuntu: libnccl2 from NVIDIA's CUDA repository) or "
                      "add its directory to LD_LIBRARY_PATH");
  }
  using GetVersion = int (*)(int*);
  const auto get_version = reinterpret_cast<GetVersion>(library->symbol("ncclGetVersion"));
  int version = 0;
  if (!get_version || get_version(&version) != 0) {
    return fail_check(name, "libnccl.so.2 loads but ncclGetVersion fails",
                      "reinstall NCCL; the library found is broken or not NCCL");
  }
  const std::string found = "NCCL " + nccl_version_text(version);
  if (built_version == 0) {
    return warn(name, found + "; this build has no NCCL (one GPU per job only)",
                "use a shardtrain built with CUDA and NCCL for multi-GPU jobs");
  }
  const std::string detail = found + ", built with " + nccl_version_text(built_version);
  if (version / 100 < built_version / 100) {
    return fail_check(name, detail,
                      fmt::format("install NCCL {} or newer (the binary uses its API)",
                                  nccl_version_text(built_version / 100 * 100)));
  }
  if (version < built_version) {
    return warn(name, detail,
                "an older patch release than the build's; upgrade NCCL if "
                "collectives misbehave");
  }
  return pass(name, detail);
}

CheckResult check_nccl_net_plugin(const SystemView& view, const NetworkFacts& facts,
                                  std::optional<Transport> expect) {
  const char* name = "nccl_net_plugin";
  const std::string wanted = plugin_nccl_loads(view);
  const std::string install_hint =
      "install aws-ofi-nccl (the EFA installer puts it in /opt/amazon/ofi-nccl/lib) and add its "
      "lib dir to LD_LIBRARY_PATH";
  if (facts.plugins.empty()) {
    const std::string detail = "no libnccl-net*.so in the loader's directories";
    if (expect == Transport::kEfa) return fail_check(name, detail, install_hint);
    if (!facts.devices.efa.empty()) {
      return warn(name, detail + ", but this node has EFA devices: NCCL will use sockets",
                  install_hint);
    }
    return pass(name, detail + " (none needed: no EFA devices)");
  }
  const std::string detail = "found " + join(facts.plugins);
  if (!plugin_loadable(view, facts)) {
    const std::string hint = fmt::format(
        "NCCL loads {}; set NCCL_NET_PLUGIN to the part after 'libnccl-net-' of the plugin you "
        "want (e.g. NCCL_NET_PLUGIN=ofi for libnccl-net-ofi.so)",
        wanted);
    if (expect == Transport::kEfa) return fail_check(name, detail + "; none named " + wanted, hint);
    return warn(name, detail + "; none named " + wanted, hint);
  }
  return pass(name, detail);
}

CheckResult check_libfabric(const NetworkFacts& facts, std::optional<Transport> expect) {
  const char* name = "libfabric";
  const bool needed = expect == Transport::kEfa || !facts.devices.efa.empty();
  if (!facts.fabric.found) {
    const std::string detail = "libfabric.so.1 not found";
    if (!needed) return pass(name, detail + " (not needed: no EFA)");
    return fail_check(name, detail + ": " + facts.fabric.error,
                      "install the AWS EFA software (efa_installer.sh), which provides libfabric "
                      "with the efa provider in /opt/amazon/efa/lib");
  }
  const std::string detail = fmt::format(
      "libfabric {}: providers {}", facts.fabric.version.empty() ? "?" : facts.fabric.version,
      facts.fabric.providers.empty() ? "none (" + facts.fabric.error + ")"
                                     : join(facts.fabric.providers));
  if (needed && !facts.fabric.has_provider("efa")) {
    return fail_check(name, detail + "; no efa provider",
                      "use the libfabric of the AWS EFA installer (/opt/amazon/efa/lib) ahead of "
                      "the distribution's on LD_LIBRARY_PATH, and check the EFA devices below");
  }
  return pass(name, detail);
}

CheckResult check_efa_devices(const NetworkFacts& facts, std::optional<Transport> expect) {
  const char* name = "efa_devices";
  if (facts.devices.efa.empty()) {
    if (expect == Transport::kEfa) {
      return fail_check(name, "no EFA device in /sys/class/infiniband",
                        "use an EFA-enabled instance with EFA interfaces attached; in Kubernetes "
                        "request vpc.amazonaws.com/efa (EFA device plugin) in the pod's limits");
    }
    return pass(name, "none");
  }
  return pass(name, fmt::format("{} EFA device(s): {}", facts.devices.efa.size(),
                                join(device_names(facts.devices.efa))));
}

CheckResult check_ib_devices(const NetworkFacts& facts, std::optional<Transport> expect) {
  const char* name = "ib_devices";
  std::vector<std::string> described, down;
  for (const RdmaDevice& hca : facts.devices.hcas) {
    for (const RdmaPort& port : hca.ports) {
      const std::string text =
          fmt::format("{} port {} {}{}", hca.name, port.number, port.state,
                      port.link_layer.empty() ? "" : " (" + port.link_layer + ")");
      described.push_back(text);
      if (port.state != "ACTIVE") down.push_back(text);
    }
  }
  if (facts.devices.hcas.empty()) {
    if (expect == Transport::kIb) {
      return fail_check(name, "no InfiniBand/RoCE HCA in /sys/class/infiniband",
                        "use nodes with HCAs; in Kubernetes expose them to the pod (RDMA shared "
                        "device plugin / SR-IOV) and load the mlx5_ib driver");
    }
    return pass(name, "none");
  }
  const std::string detail = join(described);
  if (!facts.devices.any_active_hca()) {
    const std::string hint =
        "no port is ACTIVE: check cables, the subnet manager (opensm) and "
        "`ibstat`";
    if (expect == Transport::kIb) return fail_check(name, detail, hint);
    return warn(name, detail, hint);
  }
  if (!down.empty()) {
    return warn(name, detail,
                "some ports are not ACTIVE; NCCL uses the active ones (restrict with "
                "NCCL_IB_HCA), check the others with `ibstat`");
  }
  return pass(name, detail);
}

Transport predict_transport(const SystemView& view, const NetworkFacts& facts) {
  if (auto named = transport_of_nccl_net(view.getenv("NCCL_NET"))) return *named;
  if (plugin_loadable(view, facts) && !facts.devices.efa.empty()) return Transport::kEfa;
  if (facts.devices.any_active_hca() && view.getenv("NCCL_IB_DISABLE") != "1") {
    return Transport::kIb;
  }
  return Transport::kSocket;
}

CheckResult check_transport(const SystemView& view, const NetworkFacts& facts,
                            std::optional<Transport> expect) {
  const char* name = "transport";
  const Transport predicted = predict_transport(view, facts);
  std::string detail =
      environment_summary(view) + "; NCCL will use " + transport_name(predicted) + " between nodes";
  if (const std::string net = view.getenv("NCCL_NET");
      !net.empty() && !transport_of_nccl_net(net)) {
    return warn(name, detail + " (NCCL_NET=" + net + " is not a network shardtrain knows)",
                "NCCL_NET takes Socket, IB, or a plugin's name such as \"AWS Libfabric\"");
  }
  if (const std::vector<std::string> errors = naming_errors(view, facts); !errors.empty()) {
    return fail_check(name, detail + "; " + join(errors, "; "),
                      "fix or unset the variable; interfaces are in /sys/class/net, HCAs in "
                      "/sys/class/infiniband");
  }
  const bool efa_in_play = expect == Transport::kEfa || predicted == Transport::kEfa;
  if (const std::string provider = view.getenv("FI_PROVIDER");
      efa_in_play && !provider.empty() && provider != "efa") {
    return fail_check(name, detail + "; FI_PROVIDER=" + provider + " hides the efa provider",
                      "set FI_PROVIDER=efa or unset it");
  }
  if (expect && *expect != predicted) {
    return fail_check(name,
                      detail + fmt::format(", but --expect-transport {}", transport_name(*expect)),
                      *expect == Transport::kEfa
                          ? "EFA needs EFA devices, libfabric with the efa provider and the "
                            "aws-ofi-nccl plugin (see the checks above); unset NCCL_NET=Socket"
                      : *expect == Transport::kIb
                          ? "IB needs an ACTIVE HCA port; unset NCCL_IB_DISABLE and NCCL_NET"
                          : "to force sockets set NCCL_NET=Socket");
  }
  if (!expect && !facts.devices.efa.empty() && predicted == Transport::kSocket) {
    return warn(name, detail + " although EFA devices are present",
                "install aws-ofi-nccl so NCCL uses EFA (about twice the bandwidth of TCP); pass "
                "--expect-transport efa to make this a failure");
  }
  if (efa_in_play && view.getenv("FI_EFA_USE_DEVICE_RDMA") == "0") {
    return warn(name, detail + "; FI_EFA_USE_DEVICE_RDMA=0 turns off GPUDirect RDMA",
                "unset FI_EFA_USE_DEVICE_RDMA (or set 1) on instances with RDMA-capable EFA "
                "(p4d, p5)");
  }
  return pass(name, detail);
}

}  // namespace shardtrain::doctor
