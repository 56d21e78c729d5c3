// Embedding: the token lookup out_NC[n] = table_VC[ids_N[n]] and its backward, a scatter-add
// into the table's gradient. Gemma's sqrt(hidden) scale is a field here when that family lands.
//
// Saved activations: none (backward reads the batch's ids, which the model holds).
#pragma once

#include "ops/ops.h"

namespace shardtrain {

struct Embedding {
  Tensor table_VC;  // (V, C)

  void forward(Ops& ops, Tensor ids_N, Tensor out_NC) const;
  // dtable_VC += the rows of dout_NC at ids_N. With overwrite (a gradient buffer that holds
  // nothing to keep, UnitAccess GradBuffer::accumulate == false), the table gradient is zeroed
  // first: the scatter-add touches only the rows in the batch.
  void backward(Ops& ops, Tensor ids_N, Tensor dout_NC, Tensor dtable_VC, bool overwrite) const;
};

}  // namespace shardtrain
