// GlooComm: the Comm interface (dist/comm.h) over Gloo's TCP transport, for CPU ranks and
// multi-process tests.
//
// Rendezvous goes through our Store (an adapter implements gloo::rendezvous::Store), under
// `prefix`, so several groups (and the sub-groups of split()) can bootstrap through one store.
// Tensors must be fp32 on the CPU (Gloo's CPU backend; the NCCL Comm handles bf16 on GPUs).
//
// Network interface: GlooCommOptions::iface names one (GLOO_SOCKET_IFNAME, dist/worker_env.h);
// otherwise the address of MASTER_ADDR's interface is not guessed: all ranks on one node use
// loopback (127.0.0.1), and multi-node runs use this host's name (it must resolve to a routable
// address). Collective timeout: GlooCommOptions::timeout (SHARDTRAIN_COMM_TIMEOUT_S).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "dist/comm.h"
#include "dist/store.h"

namespace shardtrain {

struct GlooCommOptions {
  std::string iface;     // network interface to use ("" = by one_node)
  bool one_node = true;  // all ranks on this host: loopback; else this host's name
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
};

// Connects `size` ranks (this one is `rank`) through `store`, which must outlive the Comm and
// every Comm split from it. Every rank must call it with the same prefix and size. Throws Error
// when the other ranks do not appear: naming those that never reached this call, after one
// GlooCommOptions::timeout (a rank stopped or stuck loading holds up every rank).
std::unique_ptr<Comm> make_gloo_comm(Store& store, int rank, int size, std::string prefix,
                                     GlooCommOptions options = {});

}  // namespace shardtrain
