// EvalReport: one evaluation of the model on the held-out data (data.eval_path) during
// training, as every consumer reads it (the console line, the JSONL metrics, metric endpoints).
// The trainer (train/trainer.h) fills one every train.eval_every steps and after the last step;
// every value covers all ranks (each rank evaluates its share of the sequences; the sums are
// reduced). Units are in the names.
#pragma once

#include <cstdint>

namespace shardtrain {

struct EvalReport {
  int64_t step = 0;        // the optimizer step after which the model was evaluated
  double loss = 0;         // mean next-token cross-entropy over every eval target (all ranks)
  double perplexity = 0;   // exp(loss)
  int64_t targets = 0;     // predicted positions evaluated (the loss denominator, all ranks)
  int64_t sequences = 0;   // eval sequences evaluated (all ranks)
  double eval_time_s = 0;  // wall time of the evaluation
};

}  // namespace shardtrain
