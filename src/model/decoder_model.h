// DecoderModel: the decoder-only model of every supported family (model/family_table.h: llama,
// qwen2, mistral, qwen3, gemma3_text), as layers (model/layers/: embedding, per block a
// DecoderBlock made by the family's recipe, the lm head + loss), each a forward/backward pair.
//
// The model owns its activation memory (declared once, by the layers: model/layers/
// activation_plan.h) and the rope tables, and computes through `Ops` only, so the same code runs
// on the CPU reference backend and on CUDA. Parameters and gradients come from a UnitAccess
// (model/unit_access.h), unit by unit, so FSDP can gather and reduce around each unit without
// the model knowing.
//
// Usage: reserve(B, T) once for the largest micro-batch, then per micro-batch
// set_batch(batch) and forward_backward(...) (training) or forward(...) (eval, logits).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/batch.h"
#include "model/expert_dispatch.h"
#include "model/family_table.h"
#include "model/layers/activation_plan.h"
#include "model/layers/decoder_block.h"
#include "model/layers/layer_dims.h"
#include "model/layers/lm_head.h"
#include "model/layers/lora.h"
#include "model/lora_config.h"
#include "model/lora_weights.h"
#include "model/model_config.h"
#include "model/moe_aux_loss.h"
#include "model/param_layout.h"
#include "model/unit_access.h"
#include "model/weights.h"
#include "ops/device_buffer.h"
#include "ops/ops.h"

namespace shardtrain {

class DecoderModel {
 public:
  // With lora.enabled the base is frozen and LoRA adapters train (model/lora_config.h): the
  // layout adds them (model/param_layout.h), units' gradient buffers start at the adapters
  // (GradBuffer::offset), and the base's Linears run no weight-gradient GEMM.
  DecoderModel(const ModelConfig& config, Ops& ops, const LoraConfig& lora = LoraConfig());
  DecoderModel(const DecoderModel&) = delete;
  DecoderModel& operator=(const DecoderModel&) = delete;

  const ModelConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }

  // Expert parallelism (fsdp.expert_parallel > 1; model/expert_dispatch.h): the layout becomes
  // this rank's (ExpertPlacement{dispatch->size(), dispatch->rank()}: each sparse block's local
  // experts in a unit of their own, acquired beside the block's) and sparse blocks move their
  // rows through `dispatch`. Call before the layout is used (FSDP units are built on it).
  // `dispatch` must outlive the model; null (the default) keeps every expert in its block.
  void set_expert_dispatch(ExpertDispatch* dispatch);
  const LoraConfig& lora() const { return lora_; }
  int unit_count() const { return static_cast<int>(layout_.units.size()); }

  // Activation checkpointing (train.activation_checkpointing), per block:
  //   kFull: keep only each block's input in forward and recompute the block in backward (one
  //     extra block forward per block but the last; activation memory of one block plus L block
  //     inputs);
  //   kSelective: also keep each block's attention output and log-sum-exp, so the recompute
  //     skips attention, the costliest op to redo (Megatron's "selective" recomputation).
  // REQUIRES: called before reserve().
  enum class Checkpointing { kNone, kFull, kSelective };
  // "none" | "full" | "selective" (the config values; validated by the config schema).
  static Checkpointing checkpointing_from_name(const std::string& name);
  void set_activation_checkpointing(Checkpointing mode) { checkpointing_ = mode; }
  Checkpointing activation_checkpointing() const { return checkpointing_; }

  // train.precision: with kFp8 the blocks' linears (q/k/v, o, gate, up, down) run their GEMMs
  // in FP8 (Linear::fp8, Ops::linear_*_fp8), except the first and last `keep_bf16_layers`
  // blocks (fp8.keep_bf16_layers); the embedding, norms, attention, lm head and loss stay
  // bf16/fp32. REQUIRES: the backend runs FP8 (Ops::fp8_unsupported_reason() empty; the trainer
  // refuses the config otherwise).
  enum class Precision { kBf16, kFp8 };
  void set_precision(Precision precision, int64_t keep_bf16_layers = 0) {
    precision_ = precision;
    keep_bf16_layers_ = keep_bf16_layers;
  }
  // Whether block `layer`'s linears run in FP8.
  bool block_uses_fp8(int64_t layer) const {
    return precision_ == Precision::kFp8 && layer >= keep_bf16_layers_ &&
           layer < config_.num_hidden_layers - keep_bf16_layers_;
  }
  // Per unit (ParamLayout::units), the weights the FP8 linears read, one range per GEMM operand
  // (model/weights.h fp8_linear_weight_ranges): what fp8.all_gather gathers as e4m3
  // (fsdp/fp8_gather.h). Empty for every unit in bf16.
  std::vector<std::vector<ElementRange>> fp8_weight_ranges() const;

  // The lm head and loss run over chunks of at most this many logits (rows x vocab; at least
  // one row per chunk), so peak memory does not grow with tokens x vocab. Tests lower it to
  // exercise several chunks on tiny models. REQUIRES: called before reserve().
  // 448M logits (896 MB in bf16): the Qwen2.5-1.5B benchmark's 8192 tokens go in 3 chunks of
  // <= 2816 rows. Each chunk's weight-gradient GEMM re-reads and re-writes the fp32 head gradient,
  // so fewer chunks are cheaper; measured on the H200 (head forward + backward per 8192 tokens,
  // vocab 151936): 1664-row chunks 16.6 ms, 2816 15.0 ms, 4096 17.5 ms (cuBLASLt's choice there
  // is slower).
  static constexpr int64_t kDefaultHeadChunkLogits = int64_t{448} << 20;
  void set_head_chunk_logits(int64_t max_logits) { head_chunk_logits_ = max_logits; }

  // The load-balancing loss of a mixture-of-experts model (model/moe_aux_loss.h), per forward
  // pass: when on, every forward computes it (last_aux_loss()) and forward_backward adds the
  // gradient of router_aux_loss_coef * weight * aux (weight: the micro-batch's share of the
  // step's mean, 1 for one micro-batch). Off (the default; eval): routing only, as transformers
  // without output_router_logits. No effect on a dense model.
  void set_router_aux_loss(bool on, float weight = 1.0f) {
    router_aux_loss_ = on;
    router_aux_weight_ = static_cast<float>(config_.moe.router_aux_loss_coef) * weight;
  }
  // The last forward's aux loss (before the coefficient); 0 when off or dense.
  double last_aux_loss() const { return moe_aux_loss_.value(); }

  // Allocates activations for micro-batches up to (batch, seq_len). Throws Error if seq_len
  // exceeds max_position_embeddings. A sliding window shorter than seq_len is a windowed
  // attention mask (the CPU backend runs it; CUDA refuses it with an Error at the first step).
  void reserve(int64_t batch, int64_t seq_len);
  // Activation memory reserve() takes for this shape: a pure function, so `shardtrain plan`
  // can report it before anything runs.
  static size_t activation_bytes_for(const ModelConfig& config, int64_t batch, int64_t seq_len,
                                     DType activation_dtype, Checkpointing checkpointing,
                                     int64_t head_chunk_logits = kDefaultHeadChunkLogits,
                                     const LoraConfig& lora = LoraConfig());
  // The same bytes by what they hold (their sum is activation_bytes_for).
  using ActivationBytes = shardtrain::ActivationBytes;
  static ActivationBytes activation_breakdown_for(
      const ModelConfig& config, int64_t batch, int64_t seq_len, DType activation_dtype,
      Checkpointing checkpointing, int64_t head_chunk_logits = kDefaultHeadChunkLogits,
      const LoraConfig& lora = LoraConfig());
  // Bytes of activation memory reserved.
  size_t activation_bytes() const { return arena_.capacity(); }

  // Copies a micro-batch to the device. REQUIRES: batch shape fits reserve(); ids < vocab.
  // Packed documents (batch.document_start_BT, several in one sequence) become every block's
  // document mask (ops/attention_mask.h); CUDA refuses them with an Error at the first
  // attention until its kernels read the mask.
  void set_batch(const Batch& batch);

  // Forward and backward of the current batch. Parameter gradients accumulate into the
  // UnitAccess grad buffers, scaled by grad_scale (1 / number of targets in the global batch).
  // loss_sum_1 (f32 [1], device) += sum of per-target cross-entropy.
  void forward_backward(UnitAccess& units, float grad_scale, Tensor loss_sum_1) {
    forward_backward(
        units, [grad_scale] { return grad_scale; }, loss_sum_1);
  }
  // The same with the scale asked for when the loss needs it, once the forward is enqueued (a
  // distributed job's global target count is a collective that waits for the device; asked for
  // there, the forward overlaps the optimizer update running aside: fsdp/fsdp_units.h).
  void forward_backward(UnitAccess& units, const std::function<float()>& grad_scale,
                        Tensor loss_sum_1);

  // Forward only. loss_sum_1 += summed cross-entropy when defined; logits_host_NV (fp32,
  // N = B*T rows of V) receives the logits when non-null.
  void forward(UnitAccess& units, Tensor loss_sum_1, float* logits_host_NV);
  // Forward only, returning just the logits of each sequence's last position (B rows of V)
  // for generation: the lm head runs on B rows instead of B*T.
  void forward_last_logits(UnitAccess& units, float* logits_host_BV);

 private:
  // Everything reserve() takes, declared by the layers (declare() also counts it).
  struct Activations {
    // Per block: all of it, or with checkpointing only what is kept (the input; selective:
    // also the attention output and lse).
    std::vector<BlockActivations> blocks;
    BlockActivations recompute;  // checkpointing: the one recomputed block
    BlockScratch block_scratch;
    HeadScratch head;
    Tensor dresid_NC;  // d(residual stream), block to block in backward
    Tensor out_NC;     // output of the last block
    Tensor ids_N, targets_N, positions_N;
    Tensor document_start_N;  // i32; read only when the batch has several documents a sequence
    LoraScratch lora;         // with LoRA: what the adapters of every Linear share
    // With LoRA: each block's saved hs (flat, tokens x lora_saved_columns); with checkpointing
    // one, shared like `recompute` (a block's forward rewrites it before its backward).
    std::vector<Tensor> lora_h;
  };
  static Activations declare(ActivationPlan& plan, const ModelConfig& config, int64_t batch,
                             int64_t seq_len, Checkpointing checkpointing, int64_t chunk_rows,
                             const LoraConfig& lora);

  LayerDims dims() const { return LayerDims::of(config_, batch_, seq_); }
  float norm_eps() const { return static_cast<float>(config_.rms_norm_eps); }
  DecoderBlock block(int64_t layer) const {
    return DecoderBlock(dims(), recipes_[layer], norm_eps());
  }
  BlockInputs block_inputs(int64_t layer) const;
  // Block `layer`'s weights as the layers take them: block_weights() with the linears marked
  // FP8 where block_uses_fp8(layer), and with LoRA the base frozen and the adapters attached.
  BlockWeights weights_of(int unit, Tensor flat, int64_t layer) const;
  // Expert parallelism: block `layer`'s unit of local experts (its parameters or gradients)
  // acquired from `units` into w.moe; nothing for a block without one.
  void acquire_local_experts(UnitAccess& units, int64_t layer, BlockWeights& w) const;
  void acquire_local_expert_grads(UnitAccess& units, int64_t layer, BlockWeights& g) const;
  void release_local_experts(UnitAccess& units, int64_t layer, bool backward) const;
  // The final norm, head and loss (Gemma: 1 + weight norm, final soft cap).
  LmHead lm_head() const;
  // What the embedding output is multiplied by: 1, or Gemma's sqrt(hidden_size) in the
  // activation dtype.
  float embedding_scale() const;
  void build_rope_tables(int64_t seq_len);
  // Backward of every block, last to first; dresid_NC holds d(last block's output) and ends
  // holding d(embedding output).
  void backward_blocks(UnitAccess& units);
  Tensor block_output(int64_t layer);
  // Embedding and every block for the current batch; returns the (still acquired) root
  // weights, which the caller releases after the head.
  RootWeights forward_blocks(UnitAccess& units);
  // Where block `layer` keeps its activations (sized for the batch): its own set, or
  // (checkpointing) the shared recompute set pointed at the block's saved input.
  BlockActivations block_storage(int64_t layer);
  // Block `layer`'s gradient views in `grads` (with LoRA: the adapters' only; base Linears
  // without views, frozen norms on the sink).
  BlockWeights block_grads(int64_t layer, const GradBuffer& grads) const;
  // The root's gradient views (with LoRA none: the root is frozen; its norm writes the sink).
  RootWeights root_grads(const GradBuffer& grads) const;
  // LoRA's run state; with layer >= 0 also where block `layer` saves hs.
  LoraRun lora_run(int64_t layer = -1) const;

  ModelConfig config_;
  LoraConfig lora_;
  ParamLayout layout_;
  Ops& ops_;
  int64_t reserved_batch_ = 0, reserved_seq_ = 0;
  int64_t batch_ = 0, seq_ = 0;
  bool batch_has_documents_ = false;  // the current batch packs several documents a sequence
  int64_t chunk_rows_ = 0;
  int64_t head_chunk_logits_ = kDefaultHeadChunkLogits;
  Arena arena_;
  Checkpointing checkpointing_ = Checkpointing::kNone;
  Precision precision_ = Precision::kBf16;
  int64_t keep_bf16_layers_ = 0;
  std::vector<BlockRecipe> recipes_;  // per block, from the family table
  Activations acts_;
  // One pair of rope tables per distinct rope config of the blocks; rope_of_block_[l] indexes it.
  struct RopeTableBuffers {
    RopeConfig rope;
    DeviceBuffer cos, sin;
    RopeTablesView view;
  };
  std::vector<RopeTableBuffers> rope_tables_;
  std::vector<int> rope_of_block_;
  bool router_aux_loss_ = false;
  float router_aux_weight_ = 0;
  MoeAuxLoss moe_aux_loss_;
  MoeAux moe_aux_;  // what block_inputs() hands the sparse blocks now (forward or backward)
  ExpertDispatch* expert_dispatch_ = nullptr;  // set_expert_dispatch
  // LoRA: frozen norms' weight gradients land here (fp32, never read); the micro-batch count
  // seeds dropout (forward, recompute and backward of one micro-batch share the masks);
  // dropout applies in forward_backward only.
  DeviceBuffer lora_grad_sink_;
  uint64_t lora_micro_batches_ = 0;
  bool lora_training_ = false;
};

}  // namespace shardtrain
