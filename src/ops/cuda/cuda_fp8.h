// FP8 quantisation kernels (cuda_fp8.cu): per-tensor "current" scaling for the FP8 GEMMs.
//
// A tensor x (bf16 or f32, rows x cols, row-major) becomes q = saturate(x * scale) in an FP8
// format, with scale = fp8_max / amax(x) (1 when amax is 0), computed on the device from the
// amax the first kernel wrote: no host round trip. The cast also writes inv_scale = 1 / scale,
// which is the dequantisation factor cuBLASLt reads (CUBLASLT_MATMUL_DESC_{A,B}_SCALE_POINTER):
// x ~= q * inv_scale.
//
// The cast writes the row-major copy (rows x cols), the transposed copy (cols x rows), or both
// in one pass over x: FP8 cuBLASLt takes only the "TN" layout (both operands with K
// contiguous), so the backward GEMMs read transposed copies of dout, x and the weight.
//
// Rounding is round-to-nearest-even with saturation to the largest finite value
// (__NV_SATFINITE), as __nv_cvt_float_to_fp8 does on the host too: the tests compare bit for bit.
// Raw-pointer launchers, asynchronous on `stream`; no fmt (nvcc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace shardtrain::cuda_kernels {

enum class Fp8Format { kE4M3, kE5M2 };
// Largest finite value: 448 (e4m3), 57344 (e5m2).
float fp8_max(Fp8Format format);
const char* fp8_format_name(Fp8Format format);

// *amax = max |x| over n elements of `dtype` (f32 or bf16). Zeroes *amax first (enqueued), so
// it needs no preparation. NaN inputs are ignored by the max; inf gives inf.
void fp8_amax(DType dtype, const void* x, int64_t n, float* amax, cudaStream_t stream);

// Quantises x (rows x cols of `dtype`) with scale = fp8_max(format) / *amax into `out`
// (rows x cols, may be null) and `out_t` (cols x rows, may be null); writes 1 / scale to
// *inv_scale. REQUIRES: rows and cols multiples of 4; x aligned to 4 elements, out and out_t
// to 4 bytes (16-byte accesses where cols, rows are multiples of 16 and pointers 16-aligned).
void fp8_cast(DType dtype, const void* x, int64_t rows, int64_t cols, Fp8Format format,
              const float* amax, uint8_t* out, uint8_t* out_t, float* inv_scale,
              cudaStream_t stream);

// ---- Delayed scaling (one pass per operand) ----
// The state of one operand of one linear, kFp8StateFloats floats in device memory, zeroed before
// first use: the amax history of its last kFp8AmaxHistory casts (a ring), at
// kFp8ScaleAmaxIndex the amax the next cast scales by (the history's max), then the running amax
// and the block counter the cast uses internally (both back at 0 when a cast is done).
constexpr int kFp8AmaxHistory = 16;
constexpr int kFp8ScaleAmaxIndex = kFp8AmaxHistory;
constexpr int kFp8StateFloats = 64;  // 256 bytes: a state's scale amax keeps 16-byte alignment

// fp8_cast with scale = fp8_max / state[kFp8ScaleAmaxIndex] (the earlier casts' amax), taking
// this tensor's amax in the same pass: the cast's last block then stores it at
// history[history_pos] and sets state[kFp8ScaleAmaxIndex] to the history's max, so the next
// cast of the operand scales by it. Overflow policy: entries beyond the delayed amax saturate
// to +-fp8_max (this call only: its amax enters the history); a non-finite amax (inf/NaN in x)
// is not recorded, so one bad step does not zero the next 16 steps' scales. A first cast
// (empty history) needs state[kFp8ScaleAmaxIndex] set to the tensor's own amax (fp8_amax)
// beforehand: current scaling for that call. REQUIRES: as fp8_cast, rows and cols > 0,
// 0 <= history_pos < kFp8AmaxHistory, no other cast with the same state in flight.
void fp8_cast_delayed(DType dtype, const void* x, int64_t rows, int64_t cols, Fp8Format format,
                      float* state, int history_pos, uint8_t* out, uint8_t* out_t,
                      float* inv_scale, cudaStream_t stream);

// SwiGLU's backward (cuda_kernels::swiglu_backward's math: dgate = dact * up * silu'(gate),
// dup = dact * silu(gate), each rounded to bf16) written straight to FP8 with delayed scaling:
// dgate with state_gate (history slot pos_gate), dup with state_up, each in the row-major
// (rows x cols) and the transposed (cols x rows) copy, as fp8_cast_delayed would cast the bf16
// gradients; 1 / scale to inv_scale_gate and inv_scale_up. dact, gate, up: bf16 rows x cols.
// REQUIRES: as fp8_cast_delayed (both states past their first cast).
void swiglu_backward_fp8(const void* dact, const void* gate, const void* up, int64_t rows,
                         int64_t cols, Fp8Format format, float* state_gate, int pos_gate,
                         float* state_up, int pos_up, uint8_t* dgate_q, uint8_t* dgate_t,
                         uint8_t* dup_q, uint8_t* dup_t, float* inv_scale_gate,
                         float* inv_scale_up, cudaStream_t stream);

// SwiGLU's forward (act = silu(gate) * up, cuda_kernels::swiglu_forward's arithmetic, rounded to
// bf16) cast to e4m3 with delayed scaling in the same pass, as fp8_cast_delayed would cast the
// bf16 act: the row-major copy `out` and/or the transposed `out_t` (either may be null), 1 / scale
// to inv_scale; act (bf16 rows x cols) is written too unless null. gate, up: bf16 rows x cols.
// REQUIRES: as fp8_cast_delayed (the state past its first cast), gate, up, act 8-byte aligned.
void swiglu_forward_fp8(const void* gate, const void* up, int64_t rows, int64_t cols,
                        float* state, int history_pos, void* act, uint8_t* out, uint8_t* out_t,
                        float* inv_scale, cudaStream_t stream);

}  // namespace shardtrain::cuda_kernels
