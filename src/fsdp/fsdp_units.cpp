#include "fsdp/fsdp_units.h"

#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "core/error.h"

namespace shardtrain {
namespace {

// What the step's sums are, in timeouts and the hang watchdog's report.
constexpr const char* kStepTotals = "step totals (targets, tokens, loss)";

// kOnDemand needs a shard group of one and no frozen parameters (whose shard is the copy).
bool keeps_compute_copy(const ShardPlan& plan, const FsdpOptions& options) {
  return plan.group_size > 1 || options.compute_copy == ComputeCopy::kKeep || plan.has_frozen();
}

}  // namespace

FsdpUnits::FsdpUnits(Ops& ops, const ParamLayout& layout, Mesh& mesh, FsdpOptions options)
    : ops_(ops),
      layout_(layout),
      mesh_(mesh),
      options_(options),
      plan_(make_shard_plan(layout, mesh.shard_size(), mesh.expert_shard_size())),
      shards_(ops, layout, plan_, mesh.shard_rank(), mesh.expert_shard_rank(),
              keeps_compute_copy(plan_, options),
              /*keep_grad_shards=*/!options.update_in_backward),
      fp8_(ops, layout, plan_, shards_, mesh.shard_rank(), options.fp8_gather_ranges),
      gatherer_(ops, layout, plan_, shards_, mesh.shard(), mesh.expert_shard(), options.strategy,
                &fp8_),
      reducer_(ops, layout, plan_, shards_, mesh, options.reduce_on_last_micro_batch,
               options.update_in_backward),
      io_(ops, layout, plan_, shards_, mesh.shard(), mesh.expert_shard(), mesh.world_rank() == 0),
      update_ticket_(layout.units.size(), 0) {
  gatherer_.set_before_gather([this](int unit) { wait_for_update(unit); });
  SHARDTRAIN_CHECK(!options_.update_in_backward || mesh.world_size() == 1,
                   "update_in_backward on {} ranks", mesh.world_size());
  // A layout of local experts is made for this mesh's expert group (model/param_layout.h).
  SHARDTRAIN_CHECK(layout.expert_parallel == mesh.expert_size(),
                   "layout for {}-way expert parallelism on a mesh of {}", layout.expert_parallel,
                   mesh.expert_size());
}

void FsdpUnits::begin_step(int64_t local_targets) {
  local_targets_ = local_targets;
  global_targets_.reset();
  reducer_.begin_step();
}

double FsdpUnits::global_targets() {
  if (!global_targets_) {
    global_targets_ = mesh_.sum(static_cast<double>(local_targets_), kStepTotals);
  }
  return *global_targets_;
}

void FsdpUnits::begin_micro_batch(int64_t index, int64_t count) {
  SHARDTRAIN_CHECK(index >= 0 && index < count, "micro-batch {} of {}", index, count);
  SHARDTRAIN_CHECK(!options_.update_in_backward || count == 1,
                   "update in backward with {} micro-batches per step", count);
  reducer_.begin_micro_batch(index == count - 1);
}

StepTotals FsdpUnits::end_backward(int64_t local_tokens, double local_loss_sum) {
  const std::vector<double> sums =
      mesh_.sum({static_cast<double>(local_tokens), local_loss_sum}, kStepTotals);
  StepTotals totals;
  totals.tokens = sums[0];
  totals.loss_sum = sums[1];
  totals.grad_norm = std::sqrt(reducer_.global_square_sum());
  return totals;
}

void FsdpUnits::apply_optimizer(ShardOptimizer& optimizer, double lr, int64_t step,
                                float grad_scale) {
  if (options_.update_in_backward) {
    SHARDTRAIN_CHECK(reducer_.units_updated_in_backward() == unit_count() && grad_scale == 1.0f,
                     "update in backward: {} of {} units updated, grad_scale {}",
                     reducer_.units_updated_in_backward(), unit_count(), grad_scale);
    return;
  }
  // One pass: the update also writes the compute shards (no refresh_compute_params) and, when
  // the next backward adds into the grad shards (G > 1), zeroes them as it reads them (the next
  // begin_step skips its fill). G = 1: the next backward overwrites them.
  const bool next_backward_overwrites = plan_.group_size == 1;
  const GradsAfterStep grads_after =
      next_backward_overwrites ? GradsAfterStep::kKeep : GradsAfterStep::kZero;
  settle_updates();
  if (updates_aside()) {
    // Unit by unit, in the order the next forward takes them (the header comment).
    const std::vector<UnitBuffers>& view = shards_.optimizer_view();
    for (size_t u = 0; u < view.size(); ++u) {
      update_ticket_[u] = optimizer.step_aside({view[u]}, lr, step, grad_scale, grads_after);
    }
  } else {
    optimizer.step(shards_.optimizer_view(), lr, step, grad_scale, grads_after);
  }
  if (!next_backward_overwrites) reducer_.note_grads_zeroed();
  fp8_.trainable_changed();
}

void FsdpUnits::wait_for_update(int unit) {
  int64_t& ticket = update_ticket_[static_cast<size_t>(unit)];
  if (ticket == 0) return;
  ops_.wait_aside(ticket);
  ticket = 0;
}

void FsdpUnits::settle_updates() {
  for (int u = 0; u < unit_count(); ++u) wait_for_update(u);
}

void FsdpUnits::gather_experts_to_host(int unit, float* host_values) {
  settle_updates();
  SHARDTRAIN_CHECK(layout_.units[unit].experts, "unit {} holds no experts", unit);
  const int64_t numel = layout_.units[unit].numel;
  std::vector<float> mine(static_cast<size_t>(numel));
  io_.gather_to_host(unit, mine.data());  // over the expert shard group
  // Then over the expert group: each rank contributes its experts (device tensors: NCCL).
  const int ranks = mesh_.expert_size();
  DeviceBuffer all(ops_, static_cast<size_t>(numel) * ranks * sizeof(float));
  const Tensor all_flat = all.view(DType::kF32, {numel * ranks});
  const Tensor own = all_flat.rows(numel * mesh_.expert_rank(), numel * (mesh_.expert_rank() + 1));
  ops_.copy_from_host(own, mine.data());
  mesh_.expert().set_context(
      fmt::format("unit {} ({}) export gather", unit, layout_.units[unit].name));
  mesh_.expert().all_gather(all_flat, own);
  ops_.copy_to_host(host_values, all_flat);
}

GradBuffer FsdpUnits::acquire_grads(int unit) {
  wait_for_update(unit);
  gatherer_.begin_backward(unit);  // prefetches the unit backward needs next
  return reducer_.acquire(unit);
}

void FsdpUnits::grads_ready(int unit) {
  gatherer_.end_backward(unit);
  reducer_.ready(unit);
}

std::optional<double> FsdpUnits::take_compute_wait_seconds() {
  std::optional<double> total = mesh_.shard().take_compute_wait_seconds();
  if (&mesh_.replicate() != &mesh_.shard()) {
    if (const std::optional<double> replicate = mesh_.replicate().take_compute_wait_seconds()) {
      total = total.value_or(0) + *replicate;
    }
  }
  return total;
}

FsdpMemory FsdpUnits::memory() const {
  FsdpMemory m = shards_.memory();
  m.gathered_peak_bytes = gatherer_.peak_bytes();
  m.full_grad_peak_bytes = reducer_.peak_bytes();
  m.fp8_shard_bytes = fp8_.held_bytes();
  return m;
}

}  // namespace shardtrain
