// The evaluation loop, written once for the trainer's eval steps (train.eval_every, every rank
// its share, the totals summed over ranks by the caller) and for `shardtrain eval` (one process,
// every sequence): forward passes of micro_batch sequences, the summed next-token loss of the
// labels the data gives (input_ids unless masked) and the count of predicted positions, as
// transformers computes the loss with labels.
//
// A rank's share is sequences rank, rank + world, rank + 2 world, ... of the first `count`,
// micro_batch at a time. Every rank runs the same number of forward passes, because FSDP's
// parameter gathers inside forward are collective: a rank whose share ran out forwards sequence
// 0 with every label ignored (it adds nothing). With world = 1 the passes are sequences
// [0, micro_batch), [micro_batch, 2 micro_batch), ... in order.
#pragma once

#include <cstddef>
#include <cstdint>

#include "data/dataset.h"
#include "model/decoder_model.h"
#include "model/unit_access.h"
#include "obs/eval_report.h"
#include "ops/ops.h"

namespace shardtrain {

// This rank's part of an evaluation, or (summed) every rank's.
struct EvalTotals {
  double loss_sum = 0;    // summed next-token cross-entropy (nats) over the targets
  int64_t targets = 0;    // predicted positions (labels not ignored)
  int64_t sequences = 0;  // sequences evaluated (padding passes excluded)
};

struct EvalShare {
  size_t count = 0;        // evaluate the first `count` sequences of the data
  size_t micro_batch = 1;  // sequences per forward pass, > 0
  int rank = 0, world = 1;
};

// Runs this rank's forward passes (header comment); `loss_scratch_1` (f32 [1] on the device of
// `ops`) holds each pass's loss. REQUIRES: model.reserve() covers share.micro_batch sequences of
// the data's length; count <= data.size(); data non-empty when count > 0.
EvalTotals evaluate_share(DecoderModel& model, UnitAccess& units, Ops& ops,
                          const SequenceDataset& data, const EvalShare& share,
                          Tensor loss_scratch_1);

// The report of `totals` (all ranks): mean loss and perplexity (0 and 1 without targets).
EvalReport eval_report(const EvalTotals& totals, int64_t step, double eval_time_s);

}  // namespace shardtrain
