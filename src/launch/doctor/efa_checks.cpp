#include "launch/doctor/efa_checks.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

namespace shardtrain::doctor {
namespace {

constexpr size_t kPluginScanBytes = size_t{64} << 20;

std::string trimmed(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())) != 0) {
    text.pop_back();
  }
  return text;
}

std::string read_first_line(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return trimmed(line.substr(0, 128));
}

std::vector<int> version_parts(const std::string& text) {
  std::vector<int> parts;
  std::istringstream in(text);
  for (std::string part; std::getline(in, part, '.');) {
    int value = 0;
    for (char c : part) {
      if (std::isdigit(static_cast<unsigned char>(c)) == 0) break;
      value = value * 10 + (c - '0');
      if (value > 100000) break;
    }
    parts.push_back(value);
  }
  return parts;
}

// Reads each plugin in 1 MiB chunks (the tail of the previous chunk kept, so a marker across
// the boundary is found), at most kPluginScanBytes of it.
std::string plugin_version(const SystemView& view, const NetworkFacts& network) {
  constexpr size_t kChunk = size_t{1} << 20, kOverlap = 64;
  for (const std::string& plugin : network.plugins) {
    std::ifstream in(view.at(plugin), std::ios::binary);
    std::string window;
    std::vector<char> chunk(kChunk);
    for (size_t read = 0; in && read < kPluginScanBytes; read += kChunk) {
      in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
      const size_t got = static_cast<size_t>(in.gcount());
      if (got == 0) break;
      window.append(chunk.data(), got);
      if (std::string version = find_ofi_nccl_version(window); !version.empty()) return version;
      window.erase(0, window.size() > kOverlap ? window.size() - kOverlap : 0);
    }
  }
  return "";
}

}  // namespace

std::optional<bool> efa_rdma_read(const std::string& instance_type) {
  // EFA RDMA read: p4d/p4de, p5/p5e/p5en, p6, trn1/trn1n, trn2. Without it: g5, g6, g6e, p3dn
  // and the CPU families.
  static constexpr std::array<std::string_view, 9> with = {
      "p4d.", "p4de.", "p5.", "p5e.", "p5en.", "p6-", "trn1.", "trn1n.", "trn2."};
  static constexpr std::array<std::string_view, 9> without = {
      "g4dn.", "g5.", "g6.", "g6e.", "gr6.", "p3dn.", "c5n.", "c6in.", "hpc6a."};
  for (std::string_view prefix : with) {
    if (instance_type.rfind(prefix, 0) == 0) return true;
  }
  for (std::string_view prefix : without) {
    if (instance_type.rfind(prefix, 0) == 0) return false;
  }
  return std::nullopt;
}

std::string find_ofi_nccl_version(const std::string& bytes) {
  const std::string marker = "aws-ofi-nccl ";
  for (size_t at = bytes.find(marker); at != std::string::npos; at = bytes.find(marker, at + 1)) {
    size_t end = at + marker.size();
    while (end < bytes.size() && end - at < marker.size() + 24 &&
           (std::isdigit(static_cast<unsigned char>(bytes[end])) != 0 || bytes[end] == '.')) {
      ++end;
    }
    const std::string version = bytes.substr(at + marker.size(), end - at - marker.size());
    // A version running into the end of `bytes` may continue in the next chunk: not yet.
    if (end < bytes.size() && !version.empty() &&
        std::isdigit(static_cast<unsigned char>(version[0])) != 0 &&
        version.find('.') != std::string::npos) {
      return version;
    }
  }
  return "";
}

bool version_less(const std::string& a, const std::string& b) {
  return version_parts(a) < version_parts(b);
}

EfaFacts read_efa_facts(const SystemView& view, const NetworkFacts& network) {
  EfaFacts facts;
  facts.instance_type = read_first_line(view.at("/sys/devices/virtual/dmi/id/product_name"));
  facts.rdma_read = efa_rdma_read(facts.instance_type);
  facts.plugin_version = plugin_version(view, network);
  return facts;
}

CheckResult check_efa_config(const SystemView& view, const NetworkFacts& network,
                             const EfaFacts& efa, std::optional<Transport> expect) {
  const char* name = "efa_config";
  if (network.devices.efa.empty() && expect != Transport::kEfa) {
    return pass(name, "not an EFA node");
  }
  const std::string rdma_var = view.getenv("FI_EFA_USE_DEVICE_RDMA");
  const std::string provider = view.getenv("FI_PROVIDER");
  const std::string detail =
      fmt::format("instance {} ({}), aws-ofi-nccl {}, libfabric {}{}{}",
                  efa.instance_type.empty() ? "unknown" : efa.instance_type,
                  !efa.rdma_read   ? "RDMA read unknown"
                  : *efa.rdma_read ? "RDMA read"
                                   : "no RDMA read",
                  efa.plugin_version.empty() ? "?" : efa.plugin_version,
                  network.fabric.version.empty() ? "?" : network.fabric.version,
                  rdma_var.empty() ? "" : ", FI_EFA_USE_DEVICE_RDMA=" + rdma_var,
                  provider.empty() ? "" : ", FI_PROVIDER=" + provider);
  if (rdma_var == "1" && efa.rdma_read == false) {
    return fail_check(name, detail,
                      fmt::format("unset FI_EFA_USE_DEVICE_RDMA: {}'s EFA has no RDMA read and "
                                  "libfabric aborts when it is 1 (shardtrain k8s --efa-rdma auto)",
                                  efa.instance_type));
  }
  const bool plugin_detects =
      !efa.plugin_version.empty() && !version_less(efa.plugin_version, "1.7");
  if (!efa.plugin_version.empty() && !plugin_detects) {
    return warn(name, detail,
                "aws-ofi-nccl before 1.7 does not detect GPUDirect RDMA; install 1.7 or newer "
                "(the EFA installer's), or set FI_EFA_USE_DEVICE_RDMA=1 on p4d/p5 only");
  }
  const bool fabric_detects =
      !network.fabric.version.empty() && !version_less(network.fabric.version, "1.18");
  if (plugin_detects && fabric_detects && (!rdma_var.empty() || !provider.empty())) {
    return warn(name, detail,
                "with aws-ofi-nccl >= 1.7 and libfabric >= 1.18 the provider and RDMA are "
                "detected: AWS advises leaving FI_PROVIDER and FI_EFA_USE_DEVICE_RDMA unset");
  }
  return pass(name, detail);
}

}  // namespace shardtrain::doctor
