// CudaOps' casts of the FP8 all-gather (ops/ops.h "FP8 all-gather"): dtype and range checks,
// then one launch of cuda_fp8_gather.cu a range, on the compute stream.
#include <initializer_list>
#include <vector>

#include "core/error.h"
#include "ops/cuda/cuda_fp8_gather.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/op_checks.h"

namespace shardtrain {
namespace {

// Every tensor of a call on the GPU (the dtypes and ranges: op_checks::check_fp8_ranges).
void require_on_gpu(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    SHARDTRAIN_CHECK(t->device() == Device::kCuda, "{}: a {} tensor, want cuda", op,
                     device_name(t->device()));
  }
}

}  // namespace

void CudaOps::fp8_range_amax(Tensor x, const std::vector<Fp8Range>& ranges, Tensor amax_S) {
  require_on_gpu("fp8_range_amax", {&x, &amax_S});
  op_checks::check_fp8_ranges("fp8_range_amax", x, ranges, amax_S);
  for (const Fp8Range& r : ranges)
    cuda_kernels::fp8_range_amax(x.dtype(), x.data(), r.begin, r.end, amax_S.f32() + r.scale,
                                 stream_);
}

void CudaOps::fp8_range_quantize(Tensor x, const std::vector<Fp8Range>& ranges, Tensor amax_S,
                                 Tensor bytes_u8) {
  require_on_gpu("fp8_range_quantize", {&x, &amax_S, &bytes_u8});
  op_checks::check_fp8_ranges("fp8_range_quantize", x, ranges, amax_S, bytes_u8);
  auto* bytes = static_cast<uint8_t*>(bytes_u8.data());
  for (const Fp8Range& r : ranges)
    cuda_kernels::fp8_range_quantize(x.dtype(), x.data(), r.begin, r.end, amax_S.f32() + r.scale,
                                     bytes, stream_);
}

void CudaOps::fp8_range_dequantize(Tensor bytes_u8, const std::vector<Fp8Range>& ranges,
                                   Tensor amax_S, Tensor out) {
  require_on_gpu("fp8_range_dequantize", {&bytes_u8, &amax_S, &out});
  op_checks::check_fp8_ranges("fp8_range_dequantize", out, ranges, amax_S, bytes_u8);
  const auto* bytes = static_cast<const uint8_t*>(bytes_u8.data());
  for (const Fp8Range& r : ranges)
    cuda_kernels::fp8_range_dequantize(bytes, r.begin, r.end, amax_S.f32() + r.scale, out.dtype(),
                                       out.data(), stream_);
}

}  // namespace shardtrain
