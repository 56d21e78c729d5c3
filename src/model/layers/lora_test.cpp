// LoRA on a Linear against a direct fp32 computation of PEFT's formula, for a packed q/k/v
// Linear whose q and v have adapters and k has none (each slice writes only its own columns),
// with dropout (the same regenerated mask in forward and backward), plus the [lora] keys'
// validation and the LoRA parameter layout.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "core/host_buffer.h"
#include "model/layers/linear.h"
#include "model/lora_config.h"
#include "model/param_layout.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/lora_dropout.h"

namespace shardtrain {
namespace {

HostTensor filled(Shape shape, float first, int period = 17) {
  HostTensor t(DType::kF32, shape);
  for (int64_t i = 0; i < t.tensor.numel(); ++i) {
    t.tensor.f32()[i] = first + 0.03f * static_cast<float>((i * 7) % period) - 0.2f;
  }
  return t;
}

// y = x W^T + scale * (drop(x) A_q^T) B_q^T on q's columns, likewise v's; k's columns base only.
struct Reference {
  int64_t N, I, Oq, Ok, Ov, r;
  float scale, p;
  uint64_t seed;
  float drop(const float* x, int64_t index) const {
    if (p == 0.0f) return x[index];
    return lora_dropout_keep(seed, static_cast<uint64_t>(index), lora_dropout_threshold(p))
               ? x[index] / (1.0f - p)
               : 0.0f;
  }
};

TEST(LoraLinearTest, PackedSlicesWithDropoutMatchPeftsFormula) {
  CpuOps ops;
  const Reference ref{5, 6, 4, 2, 2, 3, 0.75f, 0.25f, 99};
  const int64_t N = ref.N, I = ref.I, O = ref.Oq + ref.Ok + ref.Ov, r = ref.r;
  HostTensor x = filled({N, I}, 0.4f), w = filled({O, I}, -0.1f);
  HostTensor a = filled({2 * r, I}, 0.3f, 11);  // A_q then A_v, back to back
  HostTensor bq = filled({ref.Oq, r}, -0.2f, 13), bv = filled({ref.Ov, r}, 0.1f, 7);
  HostTensor dout = filled({N, O}, 0.05f, 19);

  LoraScratch scratch;
  HostTensor h(DType::kF32, {N, 2 * r}), dh(DType::kF32, {N, 2 * r}), b(DType::kF32, {O, 2 * r}),
      db(DType::kF32, {O, 2 * r}), xd(DType::kF32, {N, I}), dxd(DType::kF32, {N, I});
  scratch = LoraScratch{h.tensor, dh.tensor, b.tensor, db.tensor, xd.tensor, dxd.tensor};
  Linear linear{w.tensor, Tensor(), true};
  linear.lora.A_SI = a.tensor;
  linear.lora.slices = {{bq.tensor, 0}, {bv.tensor, ref.Oq + ref.Ok}};
  linear.lora.rank = r;
  linear.lora.scale = ref.scale;
  linear.lora.dropout = ref.p;
  linear.lora.dropout_seed = ref.seed;
  linear.lora.scratch = &scratch;

  HostTensor out(DType::kF32, {N, O});
  linear.forward(ops, x.tensor, out.tensor);

  // Host reference, forward.
  const float* X = x.tensor.f32();
  const float* W = w.tensor.f32();
  const float* A = a.tensor.f32();
  const auto B = [&](int slice_index, int64_t o, int64_t k) {
    return slice_index == 0 ? bq.tensor.f32()[o * r + k] : bv.tensor.f32()[o * r + k];
  };
  std::vector<double> hq(N * r), hv(N * r);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < r; ++k) {
      double sq = 0, sv = 0;
      for (int64_t i = 0; i < I; ++i) {
        sq += ref.drop(X, n * I + i) * A[k * I + i];
        sv += ref.drop(X, n * I + i) * A[(r + k) * I + i];
      }
      hq[n * r + k] = sq;
      hv[n * r + k] = sv;
    }
  }
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t o = 0; o < O; ++o) {
      double y = 0;
      for (int64_t i = 0; i < I; ++i) y += double{X[n * I + i]} * W[o * I + i];
      if (o < ref.Oq) {
        for (int64_t k = 0; k < r; ++k) y += ref.scale * hq[n * r + k] * B(0, o, k);
      } else if (o >= ref.Oq + ref.Ok) {
        const int64_t ov = o - ref.Oq - ref.Ok;
        for (int64_t k = 0; k < r; ++k) y += ref.scale * hv[n * r + k] * B(1, ov, k);
      }
      EXPECT_NEAR(out.tensor.f32()[n * O + o], y, 1e-5) << n << "," << o;
    }
  }

  // Backward: gradients of A (both slices) and B, and dx (base + adapters through the mask).
  HostTensor da(DType::kF32, {2 * r, I}), dbq(DType::kF32, {ref.Oq, r}),
      dbv(DType::kF32, {ref.Ov, r}), dx(DType::kF32, {N, I});
  Linear grad;
  grad.lora.A_SI = da.tensor;
  grad.lora.slices = {{dbq.tensor, 0}, {dbv.tensor, ref.Oq + ref.Ok}};
  linear.backward(ops, grad, false, dout.tensor, x.tensor, dx.tensor, false);
  const float* G = dout.tensor.f32();
  // dB_q[o][k] = sum_n G[n][o] * scale * hq[n][k]
  for (int64_t o = 0; o < ref.Oq; ++o) {
    for (int64_t k = 0; k < r; ++k) {
      double s = 0;
      for (int64_t n = 0; n < N; ++n) s += G[n * O + o] * ref.scale * hq[n * r + k];
      EXPECT_NEAR(dbq.tensor.f32()[o * r + k], s, 1e-5);
    }
  }
  // dh_s[n][k] = scale * sum_o G[n][col_s + o] B_s[o][k]; dA_s = dh_s^T drop(x);
  // dx = G W + mask' (dh A).
  std::vector<double> dhq(N * r, 0), dhv(N * r, 0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < r; ++k) {
      for (int64_t o = 0; o < ref.Oq; ++o) dhq[n * r + k] += ref.scale * G[n * O + o] * B(0, o, k);
      for (int64_t o = 0; o < ref.Ov; ++o) {
        dhv[n * r + k] += ref.scale * G[n * O + ref.Oq + ref.Ok + o] * B(1, o, k);
      }
    }
  }
  for (int64_t k = 0; k < r; ++k) {
    for (int64_t i = 0; i < I; ++i) {
      double sq = 0, sv = 0;
      for (int64_t n = 0; n < N; ++n) {
        sq += dhq[n * r + k] * ref.drop(X, n * I + i);
        sv += dhv[n * r + k] * ref.drop(X, n * I + i);
      }
      EXPECT_NEAR(da.tensor.f32()[k * I + i], sq, 1e-5);
      EXPECT_NEAR(da.tensor.f32()[(r + k) * I + i], sv, 1e-5);
    }
  }
  const uint32_t threshold = lora_dropout_threshold(ref.p);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t i = 0; i < I; ++i) {
      double base = 0, adapter = 0;
      for (int64_t o = 0; o < O; ++o) base += double{G[n * O + o]} * W[o * I + i];
      for (int64_t k = 0; k < r; ++k) {
        adapter += dhq[n * r + k] * A[k * I + i] + dhv[n * r + k] * A[(r + k) * I + i];
      }
      const bool keep = lora_dropout_keep(ref.seed, static_cast<uint64_t>(n * I + i), threshold);
      const double want = base + (keep ? adapter / (1.0 - ref.p) : 0.0);
      EXPECT_NEAR(dx.tensor.f32()[n * I + i], want, 1e-5);
    }
  }
}

// One adapter over the whole output, with a bias, then as a residual Linear: the adapters write
// out first and the base GEMM adds to it; forward saves hs in its block of h_store, backward
// reads it from there (not recomputing) and adds its d(x) to what dx held (accumulate_dx).
TEST(LoraLinearTest, SavedProjectionBiasResidualAndAccumulatedDx) {
  CpuOps ops;
  const int64_t N = 4, I = 5, O = 3, r = 2, first = 3;  // this Linear's hs after 3 columns
  const float scale = 1.5f;
  HostTensor x = filled({N, I}, 0.2f), w = filled({O, I}, -0.3f), bias = filled({O}, 0.1f, 5);
  HostTensor a = filled({r, I}, 0.25f, 11), b = filled({O, r}, -0.15f, 13);
  HostTensor residual = filled({N, O}, 0.7f, 3), dout = filled({N, O}, 0.05f, 19);
  HostTensor h(DType::kF32, {N, r}), dh(DType::kF32, {N, r});
  LoraScratch scratch{h.tensor, dh.tensor, Tensor(), Tensor(), Tensor(), Tensor()};
  HostTensor store(DType::kF32, {N * (first + r) + 7});
  for (int64_t i = 0; i < store.tensor.numel(); ++i) store.tensor.f32()[i] = -9.0f;
  Linear linear{w.tensor, bias.tensor, true};
  linear.lora.A_SI = a.tensor;
  linear.lora.slices = {{b.tensor, 0}};
  linear.lora.rank = r;
  linear.lora.scale = scale;
  linear.lora.scratch = &scratch;
  linear.lora.h_store = store.tensor;
  linear.lora.h_first = first;

  const float *X = x.tensor.f32(), *W = w.tensor.f32(), *A = a.tensor.f32(), *B = b.tensor.f32();
  std::vector<double> hs(N * r, 0), base(N * O, 0), adapter(N * O, 0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < r; ++k) {
      for (int64_t i = 0; i < I; ++i) hs[n * r + k] += scale * double{X[n * I + i]} * A[k * I + i];
    }
    for (int64_t o = 0; o < O; ++o) {
      for (int64_t i = 0; i < I; ++i) base[n * O + o] += double{X[n * I + i]} * W[o * I + i];
      for (int64_t k = 0; k < r; ++k) adapter[n * O + o] += hs[n * r + k] * B[o * r + k];
    }
  }
  HostTensor out(DType::kF32, {N, O});
  linear.forward(ops, x.tensor, out.tensor);
  for (int64_t j = 0; j < N * O; ++j) {
    EXPECT_NEAR(out.tensor.f32()[j], base[j] + bias.tensor.f32()[j % O] + adapter[j], 1e-5) << j;
  }
  for (int64_t j = 0; j < N * first; ++j) EXPECT_EQ(store.tensor.f32()[j], -9.0f) << j;
  for (int64_t j = 0; j < N * r; ++j) EXPECT_NEAR(store.tensor.f32()[N * first + j], hs[j], 1e-5);
  EXPECT_EQ(store.tensor.f32()[N * (first + r)], -9.0f);

  linear.bias_O = Tensor();
  HostTensor out_res(DType::kF32, {N, O});
  linear.forward_residual(ops, x.tensor, residual.tensor, out_res.tensor);
  for (int64_t j = 0; j < N * O; ++j) {
    EXPECT_NEAR(out_res.tensor.f32()[j], residual.tensor.f32()[j] + base[j] + adapter[j], 1e-5);
  }
  // In place (out aliases the residual), as the decoder block runs it.
  linear.forward_residual(ops, x.tensor, residual.tensor, residual.tensor);
  for (int64_t j = 0; j < N * O; ++j) {
    EXPECT_NEAR(residual.tensor.f32()[j], out_res.tensor.f32()[j], 1e-6);
  }

  // Backward reads hs from the store: doubled there, d(B) doubles (d(A) and dx do not use it).
  for (int64_t j = 0; j < N * r; ++j) store.tensor.f32()[N * first + j] *= 2.0f;
  HostTensor da(DType::kF32, {r, I}), db(DType::kF32, {O, r}), dx(DType::kF32, {N, I});
  for (int64_t j = 0; j < N * I; ++j) dx.tensor.f32()[j] = 1.0f;
  Linear grad;
  grad.lora.A_SI = da.tensor;
  grad.lora.slices = {{db.tensor, 0}};
  linear.backward(ops, grad, false, dout.tensor, x.tensor, dx.tensor, true);
  const float* G = dout.tensor.f32();
  std::vector<double> dh_ref(N * r, 0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < r; ++k) {
      for (int64_t o = 0; o < O; ++o) dh_ref[n * r + k] += scale * G[n * O + o] * B[o * r + k];
    }
  }
  for (int64_t o = 0; o < O; ++o) {
    for (int64_t k = 0; k < r; ++k) {
      double want = 0;
      for (int64_t n = 0; n < N; ++n) want += G[n * O + o] * 2.0 * hs[n * r + k];
      EXPECT_NEAR(db.tensor.f32()[o * r + k], want, 1e-5);
    }
  }
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t i = 0; i < I; ++i) {
      double want = 1.0;
      for (int64_t o = 0; o < O; ++o) want += double{G[n * O + o]} * W[o * I + i];
      for (int64_t k = 0; k < r; ++k) want += dh_ref[n * r + k] * A[k * I + i];
      EXPECT_NEAR(dx.tensor.f32()[n * I + i], want, 1e-5);
    }
  }
  for (int64_t k = 0; k < r; ++k) {
    for (int64_t i = 0; i < I; ++i) {
      double want = 0;
      for (int64_t n = 0; n < N; ++n) want += dh_ref[n * r + k] * X[n * I + i];
      EXPECT_NEAR(da.tensor.f32()[k * I + i], want, 1e-5);
    }
  }
}

TEST(LoraDropoutTest, DropsAboutPAndIsAFunctionOfSeedAndIndex) {
  const uint32_t threshold = lora_dropout_threshold(0.25f);
  int dropped = 0, differ = 0;
  for (uint64_t i = 0; i < 20000; ++i) {
    dropped += !lora_dropout_keep(7, i, threshold);
    differ += lora_dropout_keep(7, i, threshold) != lora_dropout_keep(8, i, threshold);
  }
  EXPECT_NEAR(dropped / 20000.0, 0.25, 0.015);
  EXPECT_GT(differ, 4000);  // another seed, another mask
  EXPECT_TRUE(lora_dropout_keep(1, 5, lora_dropout_threshold(0.0f)));
}

LoraConfig enabled_lora(const std::string& targets) {
  LoraConfig lora;
  lora.enabled = true;
  lora.rank = 4;
  lora.target_modules = targets;
  return lora;
}

std::string validation_error(const LoraConfig& lora) {
  try {
    lora.validate();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(LoraConfigTest, RefusesBadKeysWithOneLine) {
  LoraConfig lora = enabled_lora("q_proj,wq");
  const std::string unknown = validation_error(lora);
  EXPECT_NE(unknown.find("'wq'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"),
            std::string::npos)
      << unknown;
  lora = enabled_lora("all-linear");
  lora.rank = 0;
  EXPECT_NE(validation_error(lora).find("'lora.rank' must be > 0, got 0"), std::string::npos);
  lora.rank = -3;
  EXPECT_NE(validation_error(lora).find("got -3"), std::string::npos);
  lora.rank = 8;
  lora.dropout = 1.0;
  EXPECT_NE(validation_error(lora).find("'lora.dropout'"), std::string::npos);
  for (const std::string& e : {unknown, validation_error(lora)}) {
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  lora.enabled = false;  // keys of a disabled section are not checked, only named
  EXPECT_EQ(validation_error(lora), "");
  EXPECT_EQ(lora.keys_set_while_disabled(), (std::vector<std::string>{"lora.dropout"}));
  EXPECT_TRUE(LoraConfig().keys_set_while_disabled().empty());
  EXPECT_TRUE(enabled_lora("q_proj").keys_set_while_disabled().empty());
  // An adapter to continue with LoRA off would silently train the whole model instead.
  lora.adapter = "/adapters/run1";
  const std::string adapter_off = validation_error(lora);
  EXPECT_NE(adapter_off.find("'lora.adapter' (/adapters/run1) is set but 'lora.enabled' is false"),
            std::string::npos)
      << adapter_off;
  EXPECT_EQ(adapter_off.find('\n'), std::string::npos) << adapter_off;
}

TEST(LoraConfigTest, ScaleTargetsAndKeys) {
  LoraConfig lora = enabled_lora("v_proj, q_proj");
  lora.alpha = 16;
  EXPECT_FLOAT_EQ(lora.scale(), 4.0f);
  lora.use_rslora = true;
  EXPECT_FLOAT_EQ(lora.scale(), 8.0f);
  EXPECT_EQ(lora.modules(), (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(enabled_lora("all-linear").modules().size(), 7u);
  EXPECT_EQ(lora_param_name(3, "down_proj", 'B'), "model.layers.3.mlp.down_proj.lora_B.weight");

  LoraConfig loaded;
  ConfigSchema schema;
  loaded.register_config(schema);
  schema.load_toml_text("[lora]\nenabled = true\nrank = 16\ntarget_modules = \"all-linear\"\n",
                        "job.toml");
  EXPECT_TRUE(loaded.enabled);
  EXPECT_EQ(loaded.rank, 16);
}

ModelConfig tiny_config() {
  ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = 96;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 128;
  return c;
}

TEST(LoraLayoutTest, BaseFrozenFirstAdaptersAfterWithQkvAPacked) {
  const ParamLayout plain = make_param_layout(tiny_config());
  const ParamLayout layout =
      make_param_layout(tiny_config(), enabled_lora("q_proj,v_proj,down_proj"));
  ASSERT_EQ(layout.units.size(), plain.units.size());
  for (const ParamSpec& p : layout.units[kRootUnit].params) EXPECT_FALSE(p.trainable) << p.name;
  const UnitLayout& block = layout.units[block_unit(1)];
  const UnitLayout& base = plain.units[block_unit(1)];
  // The base part is the plain layout (what --merge writes), frozen.
  for (size_t i = 0; i < base.params.size(); ++i) {
    EXPECT_EQ(block.params[i].name, base.params[i].name);
    EXPECT_EQ(block.params[i].offset, base.params[i].offset);
    EXPECT_FALSE(block.params[i].trainable);
  }
  std::vector<std::string> adapters;
  for (size_t i = base.params.size(); i < block.params.size(); ++i) {
    EXPECT_TRUE(block.params[i].trainable);
    adapters.push_back(block.params[i].name);
  }
  const std::string p = "model.layers.1.";
  EXPECT_EQ(adapters,
            (std::vector<std::string>{
                p + "self_attn.q_proj.lora_A.weight", p + "self_attn.v_proj.lora_A.weight",
                p + "self_attn.q_proj.lora_B.weight", p + "self_attn.v_proj.lora_B.weight",
                p + "mlp.down_proj.lora_A.weight", p + "mlp.down_proj.lora_B.weight"}));
  const ParamSpec& aq = block.params[block.find(p + "self_attn.q_proj.lora_A.weight")];
  const ParamSpec& av = block.params[block.find(p + "self_attn.v_proj.lora_A.weight")];
  EXPECT_EQ(aq.shape, (Shape{4, 64}));
  EXPECT_EQ(av.offset, aq.offset + aq.numel());  // one GEMM for both
  EXPECT_EQ(block.params[block.find(p + "mlp.down_proj.lora_B.weight")].shape, (Shape{64, 4}));
  EXPECT_EQ(aq.offset, base.numel);  // the trainable region starts after the base
}

}  // namespace
}  // namespace shardtrain
