#include "launch/doctor/nccl_log.h"

#include <algorithm>
#include <cctype>
#include <regex>
#include <sstream>

namespace shardtrain::doctor {

std::optional<Transport> transport_of_network(const std::string& network) {
  std::string n = network;
  std::transform(n.begin(), n.end(), n.begin(), ::tolower);
  if (n == "socket") return Transport::kSocket;
  if (n == "ib") return Transport::kIb;
  if (n.find("libfabric") != std::string::npos || n.find("ofi") != std::string::npos) {
    return Transport::kEfa;
  }
  return std::nullopt;
}

bool NcclLogTransports::used_network() const {
  return std::any_of(paths.begin(), paths.end(),
                     [](const std::string& p) { return p.rfind("NET/", 0) == 0; });
}

std::optional<Transport> NcclLogTransports::inter_node() const {
  for (const std::string& path : paths) {
    if (path.rfind("NET/", 0) == 0) {
      if (auto t = transport_of_network(path.substr(4))) return t;
    }
  }
  if (ofi_efa_provider) return Transport::kEfa;
  return transport_of_network(network);
}

std::string NcclLogTransports::describe_paths() const {
  std::string text;
  for (const std::string& path : paths) text += (text.empty() ? "" : "+") + path;
  return text.empty() ? "none" : text;
}

NcclLogTransports parse_nccl_log(const std::string& text) {
  static const std::regex using_network(R"(NCCL INFO Using network (.+?)\s*$)");
  static const std::regex via(R"( via (NET/[^/\s][^/]*|[A-Z0-9]+)(/|\s|$))");
  static const std::regex efa_provider(R"(NET/OFI Selected [Pp]rovider is efa)");
  NcclLogTransports found;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("NCCL") == std::string::npos) continue;
    std::smatch match;
    if (std::regex_search(line, match, using_network)) found.network = match[1].str();
    if (std::regex_search(line, match, via)) found.paths.insert(match[1].str());
    if (std::regex_search(line, efa_provider)) found.ofi_efa_provider = true;
  }
  return found;
}

}  // namespace shardtrain::doctor
