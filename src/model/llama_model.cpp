#include "model/llama_model.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/rope.h"

namespace shardtrain {
namespace {

// The first shape.numel() elements of `t`, viewed with `shape`.
Tensor fit(Tensor t, Shape shape) {
  SHARDTRAIN_CHECK(shape.numel() <= t.numel(), "{} does not fit {}", shape.to_string(),
                   t.shape().to_string());
  return Tensor(t.data(), t.dtype(), shape, t.device());
}

// Logit rows per chunk of the lm head. A chunk holds at most max_logits (by default
// LlamaModel::kDefaultHeadChunkLogits = 448M logits, 896 MiB in bf16), so peak memory does not grow
// with tokens x vocab; chunks are as large as that allows because each one re-reads and re-writes
// the whole fp32 lm-head gradient (vocab x hidden) in its weight-gradient GEMM: with ~200-row
// chunks that traffic, not the FLOPs, bounded the head. Rows are split evenly over the chunks and
// rounded up to a multiple of 128 (GEMM tiles).
int64_t head_chunk_rows(int64_t tokens, int64_t vocab, int64_t max_logits) {
  const int64_t max_rows = std::max<int64_t>(max_logits / std::max<int64_t>(vocab, 1), 1);
  const int64_t chunks = (tokens + max_rows - 1) / max_rows;
  int64_t rows = (tokens + chunks - 1) / chunks;
  if (rows > 128) rows = std::min(max_rows, (rows + 127) / 128 * 128);
  return std::clamp<int64_t>(rows, 1, std::max<int64_t>(tokens, 1));
}

}  // namespace

LlamaModel::LlamaModel(const ModelConfig& config, Ops& ops)
    : config_(config), layout_(make_param_layout(config)), ops_(ops) {}

LlamaModel::Checkpointing LlamaModel::checkpointing_from_name(const std::string& name) {
  if (name == "full") return Checkpointing::kFull;
  if (name == "selective") return Checkpointing::kSelective;
  SHARDTRAIN_CHECK(name == "none", "activation checkpointing mode '{}'", name);
  return Checkpointing::kNone;
}

size_t LlamaModel::activation_bytes_for(const ModelConfig& c, int64_t batch, int64_t seq_len,
                                        DType act, Checkpointing checkpointing,
                                        int64_t head_chunk_logits) {
  return activation_breakdown_for(c, batch, seq_len, act, checkpointing, head_chunk_logits).total();
}

LlamaModel::ActivationBytes LlamaModel::activation_breakdown_for(const ModelConfig& c,
                                                                 int64_t batch, int64_t seq_len,
                                                                 DType act,
                                                                 Checkpointing checkpointing,
                                                                 int64_t head_chunk_logits) {
  const int64_t N = batch * seq_len, C = c.hidden_size, F = c.intermediate_size;
  const int64_t QD = c.num_attention_heads * c.head_dim, KD = c.num_key_value_heads * c.head_dim;
  const int64_t H = c.num_attention_heads, V = c.vocab_size;
  const size_t a = dtype_size(act);
  const size_t slack = Arena::kAlignment;
  const size_t per_block = (4 * N * C + 2 * QD * N + 2 * KD * N + 3 * N * F) * a +
                           (2 * N + batch * H * seq_len) * 4 + 16 * slack;
  const size_t head_logits = head_chunk_rows(N, V, head_chunk_logits) * V * a;
  const size_t scratch = (5 * N * C + 2 * QD * N + 2 * KD * N + 3 * N * F + N * (QD + 2 * KD)) * a +
                         N * 4 + 3 * N * 4 + 18 * slack;
  // Without checkpointing every block keeps all its activations; with it, each block keeps
  // only its input (and, selective, its attention output and lse) and one shared set is
  // recomputed block by block in backward.
  const bool checkpointed = checkpointing != Checkpointing::kNone;
  const int64_t stored_blocks = checkpointed ? 1 : c.num_hidden_layers;
  size_t kept_per_block = 0;
  if (checkpointing == Checkpointing::kFull) kept_per_block = N * C * a + slack;
  if (checkpointing == Checkpointing::kSelective) {
    kept_per_block = (N * C + QD * N) * a + batch * H * seq_len * 4 + 3 * slack;
  }
  ActivationBytes bytes;
  bytes.block_sets = per_block * stored_blocks;
  bytes.checkpoints = kept_per_block * c.num_hidden_layers;
  bytes.head_logits = head_logits;
  bytes.scratch = scratch;
  return bytes;
}

void LlamaModel::reserve(int64_t batch, int64_t seq_len) {
  const ModelConfig& c = config_;
  if (seq_len > c.max_position_embeddings) {
    fail(
        "data.seq_len = {} exceeds the model's max_position_embeddings = {}; HINT: lower "
        "data.seq_len",
        seq_len, c.max_position_embeddings);
  }
  if (c.sliding_window > 0 && seq_len > c.sliding_window) {
    fail(
        "data.seq_len = {} exceeds the model's sliding_window = {} (sliding-window attention "
        "is not supported); HINT: lower data.seq_len",
        seq_len, c.sliding_window);
  }
  reserved_batch_ = batch;
  reserved_seq_ = seq_len;
  const int64_t N = batch * seq_len, C = c.hidden_size, F = c.intermediate_size;
  const int64_t QD = c.num_attention_heads * c.head_dim, KD = c.num_key_value_heads * c.head_dim;
  const int64_t H = c.num_attention_heads;
  const int64_t V = c.vocab_size;
  chunk_rows_ = head_chunk_rows(N, V, head_chunk_logits_);
  const DType act = ops_.activation_dtype();
  arena_ =
      Arena(ops_, activation_bytes_for(c, batch, seq_len, act, checkpointing_, head_chunk_logits_));

  auto take_block = [&] {
    BlockActivations b;
    b.x_in_NC = arena_.take(act, {N, C});
    b.ln1_NC = arena_.take(act, {N, C});
    b.rstd1_N = arena_.take(DType::kF32, {N});
    b.q_NHD = arena_.take(act, {N, QD});
    b.k_NKD = arena_.take(act, {N, KD});
    b.v_NKD = arena_.take(act, {N, KD});
    b.attn_NHD = arena_.take(act, {N, QD});
    b.lse_BHT = arena_.take(DType::kF32, {batch, H, seq_len});
    b.h_NC = arena_.take(act, {N, C});
    b.ln2_NC = arena_.take(act, {N, C});
    b.rstd2_N = arena_.take(DType::kF32, {N});
    b.gate_NF = arena_.take(act, {N, F});
    b.up_NF = arena_.take(act, {N, F});
    b.act_NF = arena_.take(act, {N, F});
    return b;
  };
  acts_.assign(c.num_hidden_layers, {});
  if (checkpointing_ != Checkpointing::kNone) {
    for (auto& b : acts_) {
      b.x_in_NC = arena_.take(act, {N, C});
      if (checkpointing_ == Checkpointing::kSelective) {
        b.attn_NHD = arena_.take(act, {N, QD});
        b.lse_BHT = arena_.take(DType::kF32, {batch, H, seq_len});
      }
    }
    recompute_ = take_block();
  } else {
    for (auto& b : acts_) b = take_block();
  }
  Scratch& s = scratch_;
  s.dresid_NC = arena_.take(act, {N, C});
  s.dln_NC = arena_.take(act, {N, C});
  s.dattn_NHD = arena_.take(act, {N, QD});
  s.dq_NHD = arena_.take(act, {N, QD});
  s.dk_NKD = arena_.take(act, {N, KD});
  s.dv_NKD = arena_.take(act, {N, KD});
  s.qkv_NX = arena_.take(act, {N, QD + 2 * KD});
  s.dgate_NF = arena_.take(act, {N, F});
  s.dup_NF = arena_.take(act, {N, F});
  s.dact_NF = arena_.take(act, {N, F});
  s.xf_NC = arena_.take(act, {N, C});
  s.rstdf_N = arena_.take(DType::kF32, {N});
  s.dxf_NC = arena_.take(act, {N, C});
  s.logits_chunk = arena_.take(act, {chunk_rows_, V});
  s.out_NC = arena_.take(act, {N, C});
  ids_N_ = arena_.take(DType::kI32, {N});
  targets_N_ = arena_.take(DType::kI32, {N});
  positions_N_ = arena_.take(DType::kI32, {N});

  const RopeTables tables = make_rope_tables(c.rope, c.head_dim, seq_len);
  const Shape table_shape{tables.positions, tables.half_dim};
  rope_cos_ = DeviceBuffer(ops_, tables.cos.size() * sizeof(float));
  rope_sin_ = DeviceBuffer(ops_, tables.sin.size() * sizeof(float));
  rope_cos_PR_ = rope_cos_.view(DType::kF32, table_shape);
  rope_sin_PR_ = rope_sin_.view(DType::kF32, table_shape);
  ops_.copy_from_host(rope_cos_PR_, tables.cos.data());
  ops_.copy_from_host(rope_sin_PR_, tables.sin.data());
}

void LlamaModel::set_batch(const Batch& batch) {
  SHARDTRAIN_CHECK(batch.batch_size <= reserved_batch_ && batch.seq_len <= reserved_seq_,
                   "batch ({}, {}) exceeds reserved ({}, {})", batch.batch_size, batch.seq_len,
                   reserved_batch_, reserved_seq_);
  batch_ = batch.batch_size;
  seq_ = batch.seq_len;
  const int64_t N = batch_ * seq_;
  SHARDTRAIN_CHECK(static_cast<int64_t>(batch.input_ids.size()) == N, "batch size mismatch");
  ops_.copy_from_host(fit(ids_N_, {N}), batch.input_ids.data());
  ops_.copy_from_host(fit(targets_N_, {N}), batch.targets.data());
  ops_.copy_from_host(fit(positions_N_, {N}), batch.positions.data());
}

LlamaModel::BlockActivations LlamaModel::sized_for_batch(const BlockActivations& a) const {
  const ModelConfig& c = config_;
  const int64_t N = batch_ * seq_, C = c.hidden_size, F = c.intermediate_size;
  const int64_t QD = c.num_attention_heads * c.head_dim, KD = c.num_key_value_heads * c.head_dim;
  BlockActivations s;
  s.x_in_NC = fit(a.x_in_NC, {N, C});
  s.ln1_NC = fit(a.ln1_NC, {N, C});
  s.rstd1_N = fit(a.rstd1_N, {N});
  s.q_NHD = fit(a.q_NHD, {N, QD});
  s.k_NKD = fit(a.k_NKD, {N, KD});
  s.v_NKD = fit(a.v_NKD, {N, KD});
  s.attn_NHD = fit(a.attn_NHD, {N, QD});
  s.lse_BHT = fit(a.lse_BHT, {batch_, c.num_attention_heads, seq_});
  s.h_NC = fit(a.h_NC, {N, C});
  s.ln2_NC = fit(a.ln2_NC, {N, C});
  s.rstd2_N = fit(a.rstd2_N, {N});
  s.gate_NF = fit(a.gate_NF, {N, F});
  s.up_NF = fit(a.up_NF, {N, F});
  s.act_NF = fit(a.act_NF, {N, F});
  return s;
}

void LlamaModel::embed_forward(const RootWeights& root, Tensor out_NC) {
  ops_.embedding_forward(fit(ids_N_, {batch_ * seq_}), root.embed_tokens, out_NC);
}

void LlamaModel::block_forward(const BlockWeights& w, BlockActivations& a, Tensor out_NC,
                               bool reuse_attention) {
  const ModelConfig& c = config_;
  const int64_t N = batch_ * seq_, D = c.head_dim;
  const int64_t H = c.num_attention_heads, K = c.num_key_value_heads;
  const Tensor positions = fit(positions_N_, {N});
  const BlockActivations sized = sized_for_batch(a);
  const Tensor &x = sized.x_in_NC, &ln1 = sized.ln1_NC, &q = sized.q_NHD, &k = sized.k_NKD;
  const Tensor &v = sized.v_NKD, &attn = sized.attn_NHD, &h = sized.h_NC, &ln2 = sized.ln2_NC;
  const Tensor &gate = sized.gate_NF, &up = sized.up_NF, &act = sized.act_NF;

  ops_.rmsnorm_forward(x, w.input_norm, static_cast<float>(c.rms_norm_eps), ln1, sized.rstd1_N);
  // One GEMM for q, k and v (packed weights), then split with rope applied to q and k.
  const Tensor qkv = fit(scratch_.qkv_NX, {N, (H + 2 * K) * D});
  ops_.linear_forward(ln1, w.qkv_proj, w.qkv_bias, qkv);
  ops_.split_qkv_rope(qkv, positions, rope_cos_PR_, rope_sin_PR_, q.reshaped({N, H, D}),
                      k.reshaped({N, K, D}), v.reshaped({N, K, D}));
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  if (!reuse_attention) {
    ops_.attention_forward(q.reshaped({batch_, seq_, H, D}), k.reshaped({batch_, seq_, K, D}),
                           v.reshaped({batch_, seq_, K, D}), scale,
                           attn.reshaped({batch_, seq_, H, D}), sized.lse_BHT);
  }
  ops_.linear_forward_residual(attn, w.o_proj, x, h);  // h = x + o(attn)
  ops_.rmsnorm_forward(h, w.post_attention_norm, static_cast<float>(c.rms_norm_eps), ln2,
                       sized.rstd2_N);
  ops_.linear_forward(ln2, w.gate_proj, Tensor(), gate);
  ops_.linear_forward(ln2, w.up_proj, Tensor(), up);
  ops_.swiglu_forward(gate, up, act);
  ops_.linear_forward_residual(act, w.down_proj, h, out_NC);  // out = h + down(act)
}

void LlamaModel::block_backward(const BlockWeights& w, const BlockWeights& g, bool accumulate,
                                BlockActivations& a, Tensor dresid_NC) {
  const ModelConfig& c = config_;
  const int64_t N = batch_ * seq_, C = c.hidden_size, F = c.intermediate_size, D = c.head_dim;
  const int64_t H = c.num_attention_heads, K = c.num_key_value_heads;
  const Scratch& s = scratch_;
  const Tensor positions = fit(positions_N_, {N});
  const BlockActivations sized = sized_for_batch(a);
  const Tensor &x = sized.x_in_NC, &ln1 = sized.ln1_NC, &q = sized.q_NHD, &k = sized.k_NKD;
  const Tensor &v = sized.v_NKD, &attn = sized.attn_NHD, &h = sized.h_NC, &ln2 = sized.ln2_NC;
  const Tensor &gate = sized.gate_NF, &up = sized.up_NF, &act = sized.act_NF;
  const Tensor dln = fit(s.dln_NC, {N, C}), dattn = fit(s.dattn_NHD, {N, H * D});
  const Tensor dq = fit(s.dq_NHD, {N, H * D}), dk = fit(s.dk_NKD, {N, K * D});
  const Tensor dv = fit(s.dv_NKD, {N, K * D});
  const Tensor dgate = fit(s.dgate_NF, {N, F}), dup = fit(s.dup_NF, {N, F});
  const Tensor dact = fit(s.dact_NF, {N, F});

  // MLP: out = h + down(silu(gate(ln2)) * up(ln2)); dresid holds d(out), becomes d(h).
  ops_.linear_backward(dresid_NC, act, w.down_proj, dact, g.down_proj, Tensor(), false, accumulate);
  ops_.swiglu_backward(dact, gate, up, dgate, dup);
  ops_.linear_backward(dgate, ln2, w.gate_proj, dln, g.gate_proj, Tensor(), false, accumulate);
  ops_.linear_backward(dup, ln2, w.up_proj, dln, g.up_proj, Tensor(), true, accumulate);
  ops_.rmsnorm_backward(dln, h, w.post_attention_norm, sized.rstd2_N, dresid_NC,
                        g.post_attention_norm, true, accumulate);

  // Attention: h = x + o(attn(rope(q(ln1)), rope(k(ln1)), v(ln1))); dresid becomes d(x).
  ops_.linear_backward(dresid_NC, attn, w.o_proj, dattn, g.o_proj, Tensor(), false, accumulate);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  ops_.attention_backward(dattn.reshaped({batch_, seq_, H, D}), q.reshaped({batch_, seq_, H, D}),
                          k.reshaped({batch_, seq_, K, D}), v.reshaped({batch_, seq_, K, D}),
                          attn.reshaped({batch_, seq_, H, D}), sized.lse_BHT, scale,
                          dq.reshaped({batch_, seq_, H, D}), dk.reshaped({batch_, seq_, K, D}),
                          dv.reshaped({batch_, seq_, K, D}));
  const Tensor dqkv = fit(s.qkv_NX, {N, (H + 2 * K) * D});
  ops_.pack_qkv_rope_backward(dq.reshaped({N, H, D}), dk.reshaped({N, K, D}),
                              dv.reshaped({N, K, D}), positions, rope_cos_PR_, rope_sin_PR_, dqkv);
  ops_.linear_backward(dqkv, ln1, w.qkv_proj, dln, g.qkv_proj, g.qkv_bias, false, accumulate);
  ops_.rmsnorm_backward(dln, x, w.input_norm, sized.rstd1_N, dresid_NC, g.input_norm, true,
                        accumulate);
}

void LlamaModel::head(const RootWeights& root, const RootWeights* root_grads, bool accumulate_grads,
                      float grad_scale, Tensor loss_sum_1, float* logits_host_NV) {
  const ModelConfig& c = config_;
  const int64_t N = batch_ * seq_, C = c.hidden_size, V = c.vocab_size;
  const Scratch& s = scratch_;
  const Tensor last = fit(s.out_NC, {N, C});
  const Tensor xf = fit(s.xf_NC, {N, C}), rstdf = fit(s.rstdf_N, {N});
  const Tensor targets = fit(targets_N_, {N});
  ops_.rmsnorm_forward(last, root.final_norm, static_cast<float>(c.rms_norm_eps), xf, rstdf);
  const bool with_grad = root_grads != nullptr;
  const Tensor dxf = fit(s.dxf_NC, {N, C});
  for (int64_t begin = 0; begin < N; begin += chunk_rows_) {
    const int64_t end = std::min(N, begin + chunk_rows_);
    const Tensor logits = fit(s.logits_chunk, {end - begin, V});
    const Tensor xf_chunk = xf.rows(begin, end);
    ops_.linear_forward(xf_chunk, root.lm_head, Tensor(), logits);
    if (logits_host_NV != nullptr) copy_logits_to_host(logits, logits_host_NV + begin * V);
    if (loss_sum_1.defined() || with_grad) {
      ops_.cross_entropy(logits, targets.rows(begin, end), grad_scale, loss_sum_1, with_grad);
    }
    if (with_grad) {
      ops_.linear_backward(logits, xf_chunk, root.lm_head, dxf.rows(begin, end),
                           root_grads->lm_head, Tensor(), false, accumulate_grads || begin > 0);
    }
  }
  if (with_grad) {
    ops_.rmsnorm_backward(dxf, last, root.final_norm, rstdf, fit(s.dresid_NC, {N, C}),
                          root_grads->final_norm, false, accumulate_grads);
  }
}

LlamaModel::BlockActivations& LlamaModel::block_storage(int64_t layer) {
  if (checkpointing_ == Checkpointing::kNone) return acts_[layer];
  recompute_.x_in_NC = acts_[layer].x_in_NC;
  if (checkpointing_ == Checkpointing::kSelective) {
    recompute_.attn_NHD = acts_[layer].attn_NHD;
    recompute_.lse_BHT = acts_[layer].lse_BHT;
  }
  return recompute_;
}

void LlamaModel::copy_logits_to_host(Tensor logits, float* host) {
  if (logits.dtype() == DType::kF32) {
    ops_.copy_to_host(host, logits);
    return;
  }
  std::vector<uint16_t> bits(logits.numel());
  ops_.copy_to_host(bits.data(), logits);
  convert_to_f32(bits.data(), logits.dtype(), host, bits.size());
}

Tensor LlamaModel::block_output(int64_t layer) {
  const int64_t N = batch_ * seq_, C = config_.hidden_size;
  if (layer + 1 < config_.num_hidden_layers) return fit(acts_[layer + 1].x_in_NC, {N, C});
  return fit(scratch_.out_NC, {N, C});
}

void LlamaModel::forward_backward(UnitAccess& units, float grad_scale, Tensor loss_sum_1) {
  SHARDTRAIN_CHECK(batch_ > 0, "set_batch before forward_backward");
  const ModelConfig& c = config_;
  const bool bias = c.attention_bias;
  const int64_t N = batch_ * seq_, C = c.hidden_size;
  const UnitLayout& root_layout = layout_.units[kRootUnit];

  const RootWeights root = forward_blocks(units);
  const GradBuffer root_buffer = units.acquire_grads(kRootUnit);
  const RootWeights root_grads = root_weights(root_layout, root_buffer.flat, c.tie_word_embeddings);
  head(root, &root_grads, root_buffer.accumulate, grad_scale, loss_sum_1, nullptr);

  const Tensor dresid = fit(scratch_.dresid_NC, {N, C});
  for (int64_t l = c.num_hidden_layers - 1; l >= 0; --l) {
    const int unit = block_unit(l);
    const BlockWeights w = block_weights(layout_.units[unit], units.acquire_params(unit), l, bias);
    const GradBuffer grads = units.acquire_grads(unit);
    const BlockWeights g = block_weights(layout_.units[unit], grads.flat, l, bias);
    BlockActivations& a = block_storage(l);
    // Recompute the block's activations from its saved input; the output (equal to the next
    // block's saved input) goes to a scratch buffer that backward overwrites before use. The
    // last block needs none: forward left its activations in the shared recompute set.
    if (checkpointing_ != Checkpointing::kNone && l + 1 < c.num_hidden_layers) {
      block_forward(w, a, fit(scratch_.dln_NC, {N, C}),
                    checkpointing_ == Checkpointing::kSelective);
    }
    block_backward(w, g, grads.accumulate, a, dresid);
    units.release_params(unit);
    units.grads_ready(unit);
  }
  // Tied: the head's gradient (written above) is the table's, and the lookup adds to it. Untied,
  // the scatter-add touches only the rows in the batch, so an overwritten table starts at zero.
  if (!root_buffer.accumulate && !c.tie_word_embeddings) ops_.fill_zero(root_grads.embed_tokens);
  ops_.embedding_backward(fit(ids_N_, {N}), dresid, root_grads.embed_tokens);
  units.release_params(kRootUnit);
  units.grads_ready(kRootUnit);
}

RootWeights LlamaModel::forward_blocks(UnitAccess& units) {
  SHARDTRAIN_CHECK(batch_ > 0, "set_batch before a forward pass");
  const ModelConfig& c = config_;
  const int64_t N = batch_ * seq_, C = c.hidden_size;
  const RootWeights root = root_weights(layout_.units[kRootUnit], units.acquire_params(kRootUnit),
                                        c.tie_word_embeddings);
  embed_forward(root, fit(acts_[0].x_in_NC, {N, C}));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const int unit = block_unit(l);
    const BlockWeights w =
        block_weights(layout_.units[unit], units.acquire_params(unit), l, c.attention_bias);
    block_forward(w, block_storage(l), block_output(l));
    units.release_params(unit);
  }
  return root;
}

void LlamaModel::forward(UnitAccess& units, Tensor loss_sum_1, float* logits_host_NV) {
  const RootWeights root = forward_blocks(units);
  head(root, nullptr, true, 1.0f, loss_sum_1, logits_host_NV);
  units.release_params(kRootUnit);
}

void LlamaModel::forward_last_logits(UnitAccess& units, float* logits_host_BV) {
  const RootWeights root = forward_blocks(units);
  const ModelConfig& c = config_;
  const int64_t N = batch_ * seq_, C = c.hidden_size, V = c.vocab_size;
  const Tensor xf = fit(scratch_.xf_NC, {N, C});
  ops_.rmsnorm_forward(fit(scratch_.out_NC, {N, C}), root.final_norm,
                       static_cast<float>(c.rms_norm_eps), xf, fit(scratch_.rstdf_N, {N}));
  const Tensor logits = fit(scratch_.logits_chunk, {1, V});
  for (int64_t b = 0; b < batch_; ++b) {
    const int64_t last = b * seq_ + seq_ - 1;
    ops_.linear_forward(xf.rows(last, last + 1), root.lm_head, Tensor(), logits);
    copy_logits_to_host(logits, logits_host_BV + b * V);
  }
  units.release_params(kRootUnit);
}

}  // namespace shardtrain
