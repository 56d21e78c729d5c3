#include "model/decoder_model.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/layers/embedding.h"
#include "model/rope.h"

namespace shardtrain {
namespace {

bool same_rope(const RopeConfig& a, const RopeConfig& b) {
  return a.theta == b.theta && a.type == b.type && a.factor == b.factor &&
         a.low_freq_factor == b.low_freq_factor && a.high_freq_factor == b.high_freq_factor &&
         a.original_max_position_embeddings == b.original_max_position_embeddings;
}

// Whether any block has sandwich norms (Gemma: every block does).
bool any_sandwich_norms(const ModelConfig& c) {
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (block_recipe(c, l).sandwich_norms) return true;
  }
  return false;
}

// The logits one head chunk may hold: with a final soft cap the head keeps two chunks (the
// head's output and the capped copy), so each gets half of the budget.
int64_t head_chunk_budget(const ModelConfig& c, int64_t head_chunk_logits) {
  return c.final_logit_softcapping > 0 ? std::max<int64_t>(head_chunk_logits / 2, 1)
                                       : head_chunk_logits;
}

bool any_qk_norm(const ModelConfig& c) {
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (block_recipe(c, l).qk_norm) return true;
  }
  return false;
}

}  // namespace

DecoderModel::DecoderModel(const ModelConfig& config, Ops& ops, const LoraConfig& lora)
    : config_(config), lora_(lora), layout_(make_param_layout(config, lora)), ops_(ops) {
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    recipes_.push_back(block_recipe(config, l));
  }
}

float DecoderModel::embedding_scale() const {
  if (!model_family(config_).gemma_blocks) return 1.0f;
  // transformers: hidden_size ** 0.5, cast to the embedding's dtype before the multiply.
  const float scale = std::sqrt(static_cast<float>(config_.hidden_size));
  const DType act = ops_.activation_dtype();
  if (act == DType::kF32) return scale;
  uint16_t bits = 0;
  convert_from_f32(&scale, act, &bits, 1);
  float rounded = 0;
  convert_to_f32(&bits, act, &rounded, 1);
  return rounded;
}

LmHead DecoderModel::lm_head() const {
  return LmHead(dims(), chunk_rows_, norm_eps(), model_family(config_).gemma_blocks,
                static_cast<float>(config_.final_logit_softcapping));
}

DecoderModel::Checkpointing DecoderModel::checkpointing_from_name(const std::string& name) {
  if (name == "full") return Checkpointing::kFull;
  if (name == "selective") return Checkpointing::kSelective;
  SHARDTRAIN_CHECK(name == "none", "activation checkpointing mode '{}'", name);
  return Checkpointing::kNone;
}

void DecoderModel::set_expert_dispatch(ExpertDispatch* dispatch) {
  expert_dispatch_ = dispatch;
  ExpertPlacement placement;
  if (dispatch != nullptr) placement = ExpertPlacement{dispatch->size(), dispatch->rank()};
  layout_ = make_param_layout(config_, lora_, placement);
}

void DecoderModel::acquire_local_experts(UnitAccess& units, int64_t layer, BlockWeights& w) const {
  const int unit = layout_.expert_unit[layer];
  if (unit < 0) return;
  local_expert_weights(layout_.units[unit], units.acquire_params(unit), w.moe);
}

void DecoderModel::acquire_local_expert_grads(UnitAccess& units, int64_t layer,
                                              BlockWeights& g) const {
  const int unit = layout_.expert_unit[layer];
  if (unit < 0) return;
  const GradBuffer grads = units.acquire_grads(unit);
  SHARDTRAIN_CHECK(grads.offset == 0, "unit {}: frozen experts", layout_.units[unit].name);
  local_expert_weights(layout_.units[unit], grads.flat, g.moe);
  g.moe.experts_accumulate = grads.accumulate ? 1 : 0;
}

void DecoderModel::release_local_experts(UnitAccess& units, int64_t layer, bool backward) const {
  const int unit = layout_.expert_unit[layer];
  if (unit < 0) return;
  units.release_params(unit);
  if (backward) units.grads_ready(unit);
}

std::vector<std::vector<ElementRange>> DecoderModel::fp8_weight_ranges() const {
  std::vector<std::vector<ElementRange>> ranges(layout_.units.size());
  for (int64_t layer = 0; layer < config_.num_hidden_layers; ++layer) {
    if (!block_uses_fp8(layer)) continue;
    const int unit = block_unit(layer);
    ranges[unit] = fp8_linear_weight_ranges(layout_.units[unit], layer);
  }
  return ranges;
}

BlockWeights DecoderModel::weights_of(int unit, Tensor flat, int64_t layer) const {
  BlockWeights w = block_weights(layout_.units[unit], flat, layer);
  const bool fp8 = block_uses_fp8(layer);
  // All five linears of an FP8 block run FP8, the attention projections (K = hidden) too: with
  // the casts included, FP8 took 0.66-0.98 of bf16's time at every projection of Qwen2.5-1.5B,
  // Llama-3.2-1B and Llama-2-7B on one H100, except Qwen2.5-1.5B's o (1.05; ops/cuda/FP8_NOTES.md,
  // cuda_fp8_throughput_gpu_test times each). A projection that loses in a bench row would be
  // marked bf16 here, by name, with its figure.
  // Each FP8 linear gets its own id (its delayed-scaling state in the backend); up reads the
  // same x as gate right before it (Mlp::forward and backward), so it may reuse gate's FP8 x.
  constexpr int64_t kFp8LinearsPerBlock = 5;
  int64_t id = layer * kFp8LinearsPerBlock;
  for (Linear* linear : {&w.attention.qkv, &w.attention.o, &w.mlp.gate, &w.mlp.up, &w.mlp.down}) {
    linear->fp8 = fp8;
    linear->fp8_site = Fp8Site{id++, linear == &w.mlp.up};
  }
  if (lora_.enabled) attach_lora(w, layout_.units[unit], flat, layer, lora_run(layer));
  return w;
}

DecoderModel::Activations DecoderModel::declare(ActivationPlan& plan, const ModelConfig& c,
                                            int64_t batch, int64_t seq_len,
                                            Checkpointing checkpointing, int64_t chunk_rows,
                                            const LoraConfig& lora) {
  const LayerDims d = LayerDims::of(c, batch, seq_len);
  const int64_t N = d.tokens(), C = d.hidden;
  const bool qk_norm = any_qk_norm(c);
  const bool sandwich = any_sandwich_norms(c);
  // LoRA runs recompute the MLP product in backward instead of saving it (model/layers/mlp.h):
  // with the base frozen, activations are most of their memory (Llama-2-7B at seq 4096: 3 GiB
  // of 17), and a one-GPU adapter run is one a user picks to save memory. Full fine-tuning
  // keeps it: the recompute costs ~2.5% of a step.
  const bool save_mlp_product = !lora.enabled;
  Activations a;
  a.blocks.resize(c.num_hidden_layers);
  // Without checkpointing every block keeps all its activations; with it, each block keeps
  // only its input (and, selective, its attention output and lse) and one shared set is
  // recomputed block by block in backward.
  if (checkpointing != Checkpointing::kNone) {
    for (BlockActivations& b : a.blocks) {
      b.x_in_NC = plan.take(ActivationUse::kCheckpoint, {N, C});
      if (checkpointing == Checkpointing::kSelective) {
        b.attention.attn_NHD = plan.take(ActivationUse::kCheckpoint, {N, d.q_width()});
        b.attention.lse_BHT =
            plan.take(ActivationUse::kCheckpoint, DType::kF32, {batch, d.heads, seq_len});
      }
    }
    a.recompute = BlockActivations::declare(plan, ActivationUse::kBlockSet, d, qk_norm, sandwich,
                                            save_mlp_product);
  } else {
    for (BlockActivations& b : a.blocks) {
      b = BlockActivations::declare(plan, ActivationUse::kBlockSet, d, qk_norm, sandwich,
                                    save_mlp_product);
    }
  }
  a.block_scratch = BlockScratch::declare(plan, d, qk_norm, sandwich, save_mlp_product);
  a.dresid_NC = plan.take(ActivationUse::kScratch, {N, C});
  a.head = HeadScratch::declare(plan, d, chunk_rows, c.final_logit_softcapping > 0);
  a.out_NC = plan.take(ActivationUse::kScratch, {N, C});
  a.ids_N = plan.take(ActivationUse::kScratch, DType::kI32, {N});
  a.targets_N = plan.take(ActivationUse::kScratch, DType::kI32, {N});
  a.positions_N = plan.take(ActivationUse::kScratch, DType::kI32, {N});
  a.document_start_N = plan.take(ActivationUse::kScratch, DType::kI32, {N});
  if (lora.enabled) {
    a.lora = declare_lora_scratch(plan, c, lora, N);
    // Like the blocks' saved activations: every block's, or the one recomputed set.
    a.lora_h.resize(checkpointing != Checkpointing::kNone ? 1 : c.num_hidden_layers);
    for (Tensor& h : a.lora_h) {
      h = plan.take(ActivationUse::kBlockSet, {N * lora_saved_columns(lora)});
    }
  }
  return a;
}

size_t DecoderModel::activation_bytes_for(const ModelConfig& c, int64_t batch, int64_t seq_len,
                                        DType act, Checkpointing checkpointing,
                                        int64_t head_chunk_logits, const LoraConfig& lora) {
  return activation_breakdown_for(c, batch, seq_len, act, checkpointing, head_chunk_logits, lora)
      .total();
}

DecoderModel::ActivationBytes DecoderModel::activation_breakdown_for(const ModelConfig& c,
                                                                 int64_t batch, int64_t seq_len,
                                                                 DType act,
                                                                 Checkpointing checkpointing,
                                                                 int64_t head_chunk_logits,
                                                                 const LoraConfig& lora) {
  ActivationPlan plan(act);
  const int64_t rows = head_chunk_rows(batch * seq_len, c.vocab_size,
                                      head_chunk_budget(c, head_chunk_logits));
  declare(plan, c, batch, seq_len, checkpointing, rows, lora);
  return plan.bytes();
}

void DecoderModel::reserve(int64_t batch, int64_t seq_len) {
  const ModelConfig& c = config_;
  if (seq_len > c.max_position_embeddings) {
    fail(
        "data.seq_len = {} exceeds the model's max_position_embeddings = {}; HINT: lower "
        "data.seq_len",
        seq_len, c.max_position_embeddings);
  }
  reserved_batch_ = batch;
  reserved_seq_ = seq_len;
  chunk_rows_ = head_chunk_rows(batch * seq_len, c.vocab_size,
                                head_chunk_budget(c, head_chunk_logits_));
  const DType act = ops_.activation_dtype();
  arena_ = Arena(ops_, activation_bytes_for(c, batch, seq_len, act, checkpointing_,
                                            head_chunk_logits_, lora_));
  ActivationPlan plan(act, arena_);
  acts_ = declare(plan, c, batch, seq_len, checkpointing_, chunk_rows_, lora_);
  if (lora_.enabled && lora_grad_sink_.data() == nullptr) {
    const int64_t sink = std::max(c.hidden_size, c.head_dim);
    lora_grad_sink_ = DeviceBuffer(ops_, static_cast<size_t>(sink) * sizeof(float));
  }
  build_rope_tables(seq_len);
}

void DecoderModel::build_rope_tables(int64_t seq_len) {
  rope_tables_.clear();
  rope_of_block_.clear();
  for (const BlockRecipe& recipe : recipes_) {
    auto same = [&](const RopeTableBuffers& t) { return same_rope(t.rope, recipe.rope); };
    auto found = std::find_if(rope_tables_.begin(), rope_tables_.end(), same);
    rope_of_block_.push_back(static_cast<int>(found - rope_tables_.begin()));
    if (found != rope_tables_.end()) continue;
    const RopeTables tables = make_rope_tables(recipe.rope, config_.head_dim, seq_len);
    const Shape table_shape{tables.positions, tables.half_dim};
    RopeTableBuffers& t = rope_tables_.emplace_back();
    t.rope = recipe.rope;
    t.cos = DeviceBuffer(ops_, tables.cos.size() * sizeof(float));
    t.sin = DeviceBuffer(ops_, tables.sin.size() * sizeof(float));
    t.view =
        RopeTablesView{t.cos.view(DType::kF32, table_shape), t.sin.view(DType::kF32, table_shape)};
    ops_.copy_from_host(t.view.cos_PR, tables.cos.data());
    ops_.copy_from_host(t.view.sin_PR, tables.sin.data());
  }
}

void DecoderModel::set_batch(const Batch& batch) {
  SHARDTRAIN_CHECK(batch.batch_size <= reserved_batch_ && batch.seq_len <= reserved_seq_,
                   "batch ({}, {}) exceeds reserved ({}, {})", batch.batch_size, batch.seq_len,
                   reserved_batch_, reserved_seq_);
  batch_ = batch.batch_size;
  seq_ = batch.seq_len;
  const int64_t N = batch_ * seq_;
  SHARDTRAIN_CHECK(static_cast<int64_t>(batch.input_ids.size()) == N, "batch size mismatch");
  ops_.copy_from_host(fit(acts_.ids_N, {N}), batch.input_ids.data());
  ops_.copy_from_host(fit(acts_.targets_N, {N}), batch.targets.data());
  ops_.copy_from_host(fit(acts_.positions_N, {N}), batch.positions.data());
  // One document per sequence is the plain causal mask: no copy, and every kernel runs it.
  batch_has_documents_ = batch.has_documents() && batch.max_documents > 1;
  ++lora_micro_batches_;
  if (batch_has_documents_) {
    SHARDTRAIN_CHECK(static_cast<int64_t>(batch.document_start_BT.size()) == N,
                     "document starts {} for {} tokens", batch.document_start_BT.size(), N);
    ops_.copy_from_host(fit(acts_.document_start_N, {N}), batch.document_start_BT.data());
  }
}

BlockInputs DecoderModel::block_inputs(int64_t layer) const {
  return BlockInputs{
      fit(acts_.positions_N, {batch_ * seq_}), rope_tables_[rope_of_block_[layer]].view,
      batch_has_documents_ ? fit(acts_.document_start_N, {batch_ * seq_}) : Tensor(), moe_aux_};
}

BlockActivations DecoderModel::block_storage(int64_t layer) {
  if (checkpointing_ == Checkpointing::kNone) return acts_.blocks[layer].sized(dims());
  BlockActivations& shared = acts_.recompute;
  shared.x_in_NC = acts_.blocks[layer].x_in_NC;
  if (checkpointing_ == Checkpointing::kSelective) {
    shared.attention.attn_NHD = acts_.blocks[layer].attention.attn_NHD;
    shared.attention.lse_BHT = acts_.blocks[layer].attention.lse_BHT;
  }
  return shared.sized(dims());
}

Tensor DecoderModel::block_output(int64_t layer) {
  const int64_t N = batch_ * seq_, C = config_.hidden_size;
  if (layer + 1 < config_.num_hidden_layers) return fit(acts_.blocks[layer + 1].x_in_NC, {N, C});
  return fit(acts_.out_NC, {N, C});
}

LoraRun DecoderModel::lora_run(int64_t layer) const {
  LoraRun run;
  if (layer >= 0 && !acts_.lora_h.empty()) {
    run.h_store = acts_.lora_h[checkpointing_ != Checkpointing::kNone ? 0 : layer];
  }
  run.config = &lora_;
  run.scratch = &acts_.lora;
  run.training = lora_training_;
  run.dropout_seed = lora_micro_batches_;
  if (lora_grad_sink_.data() != nullptr) {
    run.grad_sink =
        lora_grad_sink_.view(DType::kF32, {std::max(config_.hidden_size, config_.head_dim)});
  }
  return run;
}

BlockWeights DecoderModel::block_grads(int64_t layer, const GradBuffer& grads) const {
  const UnitLayout& unit = layout_.units[block_unit(layer)];
  if (lora_.enabled) return lora_block_grads(unit, grads, layer, lora_run());
  // Gradient views are laid out from the unit's first parameter: only LoRA freezes parameters.
  SHARDTRAIN_CHECK(grads.offset == 0, "block {}: frozen parameters without LoRA", layer);
  return block_weights(unit, grads.flat, layer);
}

RootWeights DecoderModel::root_grads(const GradBuffer& grads) const {
  if (!lora_.enabled) {
    SHARDTRAIN_CHECK(grads.offset == 0, "root: frozen parameters without LoRA");
    return root_weights(layout_.units[kRootUnit], grads.flat, config_.tie_word_embeddings);
  }
  RootWeights none;  // frozen: the head runs no weight-gradient GEMM, the lookup no scatter-add
  none.final_norm = fit(lora_run().grad_sink, {config_.hidden_size});
  return none;
}

void DecoderModel::forward_backward(UnitAccess& units, const std::function<float()>& grad_scale,
                                    Tensor loss_sum_1) {
  SHARDTRAIN_CHECK(batch_ > 0, "set_batch before forward_backward");
  const ModelConfig& c = config_;
  const int64_t N = batch_ * seq_, C = c.hidden_size;
  lora_training_ = true;  // LoRA dropout: in training only

  const RootWeights root = forward_blocks(units);
  const GradBuffer root_buffer = units.acquire_grads(kRootUnit);
  const RootWeights grads = root_grads(root_buffer);
  lm_head().run(ops_, root, &grads, root_buffer.accumulate, grad_scale(),
                fit(acts_.out_NC, {N, C}), fit(acts_.targets_N, {N}), acts_.head, loss_sum_1,
                nullptr, fit(acts_.dresid_NC, {N, C}));
  backward_blocks(units);
  // Tied: the head's gradient (written above) is the table's, and the lookup adds to it. Untied,
  // the scatter-add touches only the rows in the batch, so an overwritten table starts at zero.
  // A frozen table (LoRA) has no gradient.
  if (grads.embed_tokens.defined()) {
    Embedding{root.embed_tokens, embedding_scale()}.backward(ops_, fit(acts_.ids_N, {N}),
                                          fit(acts_.dresid_NC, {N, C}), grads.embed_tokens,
                                          !root_buffer.accumulate && !c.tie_word_embeddings);
  }
  units.release_params(kRootUnit);
  units.grads_ready(kRootUnit);
}

void DecoderModel::backward_blocks(UnitAccess& units) {
  const ModelConfig& c = config_;
  const int64_t N = batch_ * seq_, C = c.hidden_size;
  const Tensor dresid = fit(acts_.dresid_NC, {N, C});
  const BlockScratch scratch = acts_.block_scratch.sized(dims());
  for (int64_t l = c.num_hidden_layers - 1; l >= 0; --l) {
    const int unit = block_unit(l);
    BlockWeights w = weights_of(unit, units.acquire_params(unit), l);
    acquire_local_experts(units, l, w);
    const GradBuffer grads = units.acquire_grads(unit);
    BlockWeights g = block_grads(l, grads);
    acquire_local_expert_grads(units, l, g);
    const BlockActivations a = block_storage(l);
    const DecoderBlock decoder = block(l);
    // Recompute the block's activations from its saved input; the output (equal to the next
    // block's saved input) goes to a scratch buffer that backward overwrites before use. The
    // last block needs none: forward left its activations in the shared recompute set.
    if (checkpointing_ != Checkpointing::kNone && l + 1 < c.num_hidden_layers) {
      decoder.forward(ops_, w, block_inputs(l), a, scratch, scratch.dln_NC,
                      checkpointing_ == Checkpointing::kSelective);
    }
    decoder.backward(ops_, w, g, grads.accumulate, block_inputs(l), a, scratch, dresid);
    release_local_experts(units, l, true);
    units.release_params(unit);
    units.grads_ready(unit);
  }
}

RootWeights DecoderModel::forward_blocks(UnitAccess& units) {
  SHARDTRAIN_CHECK(batch_ > 0, "set_batch before a forward pass");
  const ModelConfig& c = config_;
  const int64_t N = batch_ * seq_, C = c.hidden_size;
  const RootWeights root = root_weights(layout_.units[kRootUnit], units.acquire_params(kRootUnit),
                                        c.tie_word_embeddings);
  // Sparse blocks collect the load-balancing loss's counts in forward; backward (and its
  // recompute, which must not count again) then gets only its gradient.
  moe_aux_loss_.configure(c.moe.num_experts, router_aux_loss_, router_aux_weight_);
  moe_aux_ = moe_aux_loss_.begin_forward(ops_);
  moe_aux_.dispatch = expert_dispatch_;
  Embedding{root.embed_tokens, embedding_scale()}.forward(ops_, fit(acts_.ids_N, {N}),
                                       fit(acts_.blocks[0].x_in_NC, {N, C}));
  const BlockScratch scratch = acts_.block_scratch.sized(dims());
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const int unit = block_unit(l);
    BlockWeights w = weights_of(unit, units.acquire_params(unit), l);
    acquire_local_experts(units, l, w);
    block(l).forward(ops_, w, block_inputs(l), block_storage(l), scratch, block_output(l));
    release_local_experts(units, l, false);
    units.release_params(unit);
  }
  moe_aux_ = moe_aux_loss_.end_forward(ops_, N, c.moe.sparse_layer_count(c.num_hidden_layers));
  moe_aux_.dispatch = expert_dispatch_;
  return root;
}

void DecoderModel::forward(UnitAccess& units, Tensor loss_sum_1, float* logits_host_NV) {
  lora_training_ = false;
  const RootWeights root = forward_blocks(units);
  const int64_t N = batch_ * seq_, C = config_.hidden_size;
  lm_head().run(ops_, root, nullptr, true, 1.0f, fit(acts_.out_NC, {N, C}),
                fit(acts_.targets_N, {N}), acts_.head, loss_sum_1, logits_host_NV, Tensor());
  units.release_params(kRootUnit);
}

void DecoderModel::forward_last_logits(UnitAccess& units, float* logits_host_BV) {
  lora_training_ = false;
  const RootWeights root = forward_blocks(units);
  const int64_t N = batch_ * seq_, C = config_.hidden_size;
  lm_head().last_logits(ops_, root, fit(acts_.out_NC, {N, C}), acts_.head, logits_host_BV);
  units.release_params(kRootUnit);
}

}  // namespace shardtrain
