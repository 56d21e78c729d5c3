// Embedding: the token lookup out_NC[n] = table_VC[ids_N[n]] * scale and its backward, a
// scatter-add of d(out) * scale into the table's gradient. scale is 1, or Gemma's
// sqrt(hidden_size) rounded to the activation dtype (transformers casts it to the weights'
// dtype before multiplying).
//
// Saved activations: none (backward reads the batch's ids, which the model holds).
#pragma once

#include "ops/ops.h"

namespace shardtrain {

struct Embedding {
  Tensor table_VC;  // (V, C)
  float scale = 1.0f;

  void forward(Ops& ops, Tensor ids_N, Tensor out_NC) const;
  // dtable_VC += the rows of dout_NC at ids_N. With overwrite (a gradient buffer that holds
  // nothing to keep, UnitAccess GradBuffer::accumulate == false), the table gradient is zeroed
  // first: the scatter-add touches only the rows in the batch. With a scale, dout_NC is scaled
  // in place (the model reads it no more).
  void backward(Ops& ops, Tensor ids_N, Tensor dout_NC, Tensor dtable_VC, bool overwrite) const;
};

}  // namespace shardtrain
