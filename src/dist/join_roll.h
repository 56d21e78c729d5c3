// JoinRoll: which ranks reached a process group's connect, so that a connect that times out
// names the ranks that never came (a rank stopped, or stuck loading or on a hung file system,
// holds up every rank) instead of a bare timeout on some handshake key.
//
// Each rank marks itself under `<prefix>/joined/<rank>` in the group's store before it starts
// to connect; after a timeout, missing() lists the ranks without a mark. Used by the Gloo and
// NCCL connects (dist/gloo_comm.cpp, dist/nccl_comm.cpp).
#pragma once

#include <string>
#include <vector>

#include "dist/store.h"

namespace shardtrain {

// What to do about a rank that did not join, for the HINT of the connects' messages.
inline constexpr char kJoinHint[] =
    "is that process running? A rank that is stopped or stuck before this point (loading data or "
    "weights, a hung file system) holds up every rank; SHARDTRAIN_COMM_TIMEOUT_S sets how long "
    "to wait";

class JoinRoll {
 public:
  // REQUIRES: `store` outlives the roll; 0 < size.
  JoinRoll(Store& store, std::string prefix, int size);

  void mark(int rank);
  // The ranks in [0, size) without a mark, ascending.
  std::vector<int> missing() const;
  // "rank 1 did not join" or "ranks 1, 3 did not join"; empty when every rank joined.
  std::string describe_missing() const;

 private:
  std::string key(int rank) const;

  Store& store_;
  std::string prefix_;
  int size_;
};

}  // namespace shardtrain
