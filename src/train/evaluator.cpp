#include "train/evaluator.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "data/batch.h"

namespace shardtrain {

EvalTotals evaluate_share(DecoderModel& model, UnitAccess& units, Ops& ops,
                          const SequenceDataset& data, const EvalShare& share,
                          Tensor loss_scratch_1) {
  SHARDTRAIN_CHECK(share.micro_batch > 0 && share.world > 0 && share.rank >= 0 &&
                       share.rank < share.world && share.count <= data.size(),
                   "eval share {} of {} over {} sequences", share.rank, share.world, share.count);
  const size_t world = static_cast<size_t>(share.world);
  const size_t rank = static_cast<size_t>(share.rank);
  const size_t per_rank = (share.count + world - 1) / world;
  const size_t passes = (per_rank + share.micro_batch - 1) / share.micro_batch;
  EvalTotals totals;
  for (size_t pass = 0; pass < passes; ++pass) {
    std::vector<Example> examples;
    for (size_t k = 0; k < share.micro_batch; ++k) {
      const size_t index = (pass * share.micro_batch + k) * world + rank;
      if (index < share.count) examples.push_back(data.get(index));
    }
    totals.sequences += static_cast<int64_t>(examples.size());
    if (examples.empty()) {
      examples.push_back(data.get(0));
      examples.back().labels.assign(examples.back().labels.size(), kIgnoreIndex);
    }
    const Batch batch = make_batch(examples);
    model.set_batch(batch);
    ops.fill_zero(loss_scratch_1);
    model.forward(units, loss_scratch_1, nullptr);
    totals.loss_sum += ops.read_scalar(loss_scratch_1);
    totals.targets += batch.target_count;
  }
  return totals;
}

EvalReport eval_report(const EvalTotals& totals, int64_t step, double eval_time_s) {
  EvalReport report;
  report.step = step;
  report.targets = totals.targets;
  report.sequences = totals.sequences;
  report.loss = totals.targets > 0 ? totals.loss_sum / static_cast<double>(totals.targets) : 0;
  report.perplexity = std::exp(report.loss);
  report.eval_time_s = eval_time_s;
  return report;
}

}  // namespace shardtrain
