#include "model/layers/embedding.h"

namespace shardtrain {

void Embedding::forward(Ops& ops, Tensor ids_N, Tensor out_NC) const {
  ops.embedding_forward(ids_N, table_VC, out_NC);
  if (scale != 1.0f) ops.scale(out_NC, scale);
}

void Embedding::backward(Ops& ops, Tensor ids_N, Tensor dout_NC, Tensor dtable_VC,
                         bool overwrite) const {
  if (overwrite) ops.fill_zero(dtable_VC);
  if (scale != 1.0f) ops.scale(dout_NC, scale);
  ops.embedding_backward(ids_N, dout_NC, dtable_VC);
}

}  // namespace shardtrain
