// FP8 all-gather kernels (cuda_fp8_gather.cu): the casts behind Ops::fp8_range_amax,
// fp8_range_quantize and fp8_range_dequantize (ops/ops.h "FP8 all-gather"), one range of a flat
// tensor a launch.
//
// Each launcher works on elements [begin, end) of a flat, contiguous tensor given by its base
// pointer (element i is x[i], bytes[i], out[i]), with the per-tensor scale of core/fp8_e4m3.h:
// scale = fp8_gather_scale(*amax) = 448 / *amax (1 when *amax is 0 or not finite), computed on
// the device with IEEE division, so no host round trip. Quantisation is
// e4m3(x * scale) in fp32, round-to-nearest-even saturating to +-448 (__nv_cvt_float_to_fp8 with
// __NV_SATFINITE; NaN becomes 0x7f); dequantisation is e4m3_to_f32(byte) * (1 / scale) in fp32,
// rounded to the output dtype (bf16: nearest even). The results equal CpuOps' (core/fp8_e4m3.h)
// bit for bit (bf16 NaN payloads aside). Elements outside [begin, end) are never read or written.
//
// REQUIRES (all): 0 <= begin <= end (begin == end is a no-op); x/out dtype f32 or bf16; pointers
// aligned to their element size. Any begin, end and further alignment work: where x/out are
// 16-byte and bytes 8-byte aligned, a range's 8-element-aligned body takes vector accesses, and
// the rest goes one element at a time.
// Raw-pointer launchers, asynchronous on `stream`; no fmt (nvcc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace shardtrain::cuda_kernels {

// *amax = max(*amax, max |x[begin, end)|), NaN ignored (inf counts). Does not zero *amax first:
// ranges sharing a scale accumulate into one amax, and the caller zeroes it once.
void fp8_range_amax(DType dtype, const void* x, int64_t begin, int64_t end, float* amax,
                    cudaStream_t stream);

// bytes[i] = e4m3(x[i] * fp8_gather_scale(*amax)) for i in [begin, end).
void fp8_range_quantize(DType dtype, const void* x, int64_t begin, int64_t end, const float* amax,
                        uint8_t* bytes, cudaStream_t stream);

// out[i] = e4m3_to_f32(bytes[i]) * (1 / fp8_gather_scale(*amax)), as `out_dtype`, for i in
// [begin, end).
void fp8_range_dequantize(const uint8_t* bytes, int64_t begin, int64_t end, const float* amax,
                          DType out_dtype, void* out, cudaStream_t stream);

}  // namespace shardtrain::cuda_kernels
