// Doctor checks of the host's resources, over a SystemView (system_view.h):
//   shm:        size of <root>/dev/shm against what NCCL's shared-memory transport and data
//               loading need for `local_gpus` ranks: 1 GiB per GPU passes; below half of that
//               fails (a container's default 64 MB breaks NCCL with "unhandled system error"),
//               between warns
//   memlock:    RLIMIT_MEMLOCK; EFA and InfiniBand register (pin) memory and need it
//               unlimited or CAP_IPC_LOCK: a limit without the capability FAILs when RDMA
//               devices exist or `expect` is efa/ib, WARNs otherwise (fine for sockets)
//   hostname:   what this host's name resolves to here: the address the launcher tells other
//               nodes to reach this one by, and what Gloo's multi-node transport binds to.
//               An address other nodes can reach passes; only loopback (Debian's
//               '127.0.1.1 <name>' in /etc/hosts) or no answer warns: one node is unaffected,
//               but across nodes the peers must resolve the name themselves, and Gloo on CPUs
//               cannot bind to it
//   disk:       free bytes at the checkpoint dir (its nearest existing ancestor) against what
//               the job's checkpoints need, when known (checkpoint_need_bytes), and that it is
//               writable
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "launch/doctor/check_result.h"
#include "launch/doctor/node_facts.h"
#include "launch/doctor/system_view.h"

namespace shardtrain::doctor {

CheckResult check_shm(const SystemView& view, int local_gpus);
CheckResult check_memlock(const SystemView& view, const RdmaDevices& devices,
                          std::optional<Transport> expect);

CheckResult check_hostname(const std::string& name, const HostResolution& resolution);

struct CheckpointNeed {
  uint64_t bytes = 0;  // all checkpoints kept at once, plus the one being written
  std::string how;     // "1.5e9 params x 12 B x (3 kept + 1 being written)"
};
// `dir` is an absolute or relative path on the real filesystem, read under view.root.
CheckResult check_disk(const SystemView& view, const std::string& dir,
                       const std::optional<CheckpointNeed>& need);

// 1.5 GiB, 64 MiB, 12 KiB, 100 B.
std::string human_bytes(uint64_t bytes);

}  // namespace shardtrain::doctor
