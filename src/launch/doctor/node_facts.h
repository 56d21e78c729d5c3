// Facts about this node's network stack that several doctor checks share, each read once from a
// SystemView (system_view.h):
//   - RDMA devices under <root>/sys/class/infiniband: EFA (driver "efa") and other HCAs with
//     their ports' state and link layer;
//   - network interfaces (<root>/sys/class/net);
//   - NCCL network plugins (libnccl-net*.so) in the loader's directories: LD_LIBRARY_PATH,
//     /etc/ld.so.conf(.d), the system library dirs and aws-ofi-nccl's install dirs, under root;
//   - libfabric (dlopen through the view's loader) and the providers fi_getinfo lists.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launch/doctor/system_view.h"

namespace shardtrain::doctor {

// The inter-node transports NCCL can use, in the names of --expect-transport.
enum class Transport { kSocket, kIb, kEfa };
const char* transport_name(Transport transport);  // "socket", "ib", "efa"
// Parses "efa" | "ib" | "socket"; nullopt otherwise.
std::optional<Transport> parse_transport(const std::string& text);

struct RdmaPort {
  std::string number;      // "1"
  std::string state;       // "ACTIVE", "DOWN", ... (from "4: ACTIVE")
  std::string link_layer;  // "InfiniBand", "Ethernet" (RoCE); "" when not reported
};
struct RdmaDevice {
  std::string name;    // "rdmap16s27", "mlx5_0"
  std::string driver;  // "efa", "mlx5_core", "" when unknown
  std::vector<RdmaPort> ports;
  bool any_port_active() const;
};
struct RdmaDevices {
  std::vector<RdmaDevice> efa;   // driver efa
  std::vector<RdmaDevice> hcas;  // everything else (InfiniBand / RoCE)
  bool any_active_hca() const;
};
RdmaDevices find_rdma_devices(const SystemView& view);

// Interface names under <root>/sys/class/net, sorted.
std::vector<std::string> network_interfaces(const SystemView& view);

// Directories the dynamic loader searches, in order, as absolute paths (not under root).
std::vector<std::string> library_search_dirs(const SystemView& view);
// Absolute paths of libnccl-net*.so* files in those directories (looked up under root).
std::vector<std::string> find_nccl_net_plugins(const SystemView& view);

struct FabricInfo {
  bool found = false;
  std::string error;                   // why not found / fi_getinfo failed
  std::string version;                 // "1.22"
  std::vector<std::string> providers;  // distinct prov_name values, e.g. {"efa", "tcp", "shm"}
  bool has_provider(const std::string& name) const;
};
FabricInfo probe_libfabric(const SystemView& view);

// The part of libfabric's ABI (rdma/fabric.h, stable across 1.x) that probe_libfabric reads;
// tests build fake provider lists with it.
namespace fabric_abi {
struct FabricAttr {
  void* fabric;
  char* name;
  char* prov_name;
  uint32_t prov_version;
  uint32_t api_version;
};
struct Info {
  Info* next;
  uint64_t caps, mode;
  uint32_t addr_format;
  size_t src_addrlen, dest_addrlen;
  void *src_addr, *dest_addr, *handle, *tx_attr, *rx_attr, *ep_attr, *domain_attr;
  FabricAttr* fabric_attr;
  void* nic;
};
using GetInfo = int (*)(uint32_t version, const char* node, const char* service, uint64_t flags,
                        const Info* hints, Info** info);
using FreeInfo = void (*)(Info*);
using Version = uint32_t (*)();
}  // namespace fabric_abi

}  // namespace shardtrain::doctor
