// CpuOps: the LoRA path's column-block copy and dropout (ops/ops.h), fp32.
#include "core/error.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/lora_dropout.h"
#include "ops/op_checks.h"

namespace shardtrain {

void CpuOps::copy_columns(Tensor src_NX, int64_t src_col, Tensor dst_NY, int64_t dst_col,
                          int64_t width, float alpha, bool accumulate) {
  SHARDTRAIN_CHECK(src_NX.dtype() == DType::kF32 && dst_NY.dtype() == DType::kF32,
                   "copy_columns: fp32 on the CPU");
  const int64_t rows = op_checks::row_count(src_NX);
  const int64_t src_width = op_checks::row_width(src_NX), dst_width = op_checks::row_width(dst_NY);
  SHARDTRAIN_CHECK(rows == op_checks::row_count(dst_NY), "copy_columns: {} rows into {}", rows,
                   op_checks::row_count(dst_NY));
  SHARDTRAIN_CHECK(src_col >= 0 && dst_col >= 0 && width >= 0 && src_col + width <= src_width &&
                       dst_col + width <= dst_width,
                   "copy_columns: columns [{}, +{}) of {} into [{}, +{}) of {}", src_col, width,
                   src_width, dst_col, width, dst_width);
  const float* src = src_NX.f32();
  float* dst = dst_NY.f32();
  for (int64_t n = 0; n < rows; ++n) {
    const float* from = src + n * src_width + src_col;
    float* to = dst + n * dst_width + dst_col;
    if (accumulate) {
      for (int64_t j = 0; j < width; ++j) to[j] += alpha * from[j];
    } else {
      for (int64_t j = 0; j < width; ++j) to[j] = alpha * from[j];
    }
  }
}

void CpuOps::dropout(Tensor x, Tensor out, float p, uint64_t seed, bool accumulate) {
  SHARDTRAIN_CHECK(x.dtype() == DType::kF32 && out.dtype() == DType::kF32,
                   "dropout: fp32 on the CPU");
  op_checks::require_same_numel(x, out, "dropout");
  SHARDTRAIN_CHECK(p >= 0.0f && p < 1.0f, "dropout probability {}", p);
  const uint32_t threshold = lora_dropout_threshold(p);
  const float keep_scale = 1.0f / (1.0f - p);
  const float* in = x.f32();
  float* o = out.f32();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float value =
        lora_dropout_keep(seed, static_cast<uint64_t>(i), threshold) ? in[i] * keep_scale : 0.0f;
    o[i] = accumulate ? o[i] + value : value;
  }
}

}  // namespace shardtrain
