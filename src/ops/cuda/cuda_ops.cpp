// CudaOps: construction, memory, elementwise, optimizer and norm ops; layer ops live in
// cuda_layers.cpp and the linear ops in cuda_gemm.cpp.
#include "ops/cuda/cuda_ops.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "ops/cuda/cuda_attention_tuning.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_dispatch.h"
#include "ops/cuda/cuda_gemm.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/cuda_linear_fp8.h"
#include "ops/op_checks.h"
#include "ops/ops_switches.h"

namespace shardtrain {
namespace {

void require_cuda(const Tensor& t, const char* what) {
  SHARDTRAIN_CHECK(t.device() == Device::kCuda, "{} is a {} tensor, want cuda", what,
                   device_name(t.device()));
}

void require_f32(const Tensor& t, const char* what) {
  require_cuda(t, what);
  SHARDTRAIN_CHECK(t.dtype() == DType::kF32, "{} is {}, want f32", what, dtype_name(t.dtype()));
}

using op_checks::require_same_numel;

}  // namespace

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: clear the sticky-free error, report none
    return 0;
  }
  return count;
}

void cuda_memory_info(size_t* free_bytes, size_t* total_bytes) {
  SHARDTRAIN_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
}

std::unique_ptr<Ops> make_cuda_ops(int device_index) {
  SHARDTRAIN_CUDA_CHECK(cudaSetDevice(device_index));
  // Below compute capability 8.0 (V100, T4: no bf16 tensor cores) nothing runs: say so first.
  cuda_kernels::require_supported_device(cuda_kernels::device_limits(), device_index);
  return std::make_unique<CudaOps>();
}

namespace {

// The bf16 GEMMs' candidate search, as SHARDTRAIN_GEMM_SEARCH says (ops/ops_switches.h).
CublasLtGemm::Tuning gemm_tuning() {
  CublasLtGemm::Tuning tuning;
  tuning.autotune = gemm_autotune_switch();
  switch (gemm_search_switch()) {
    case GemmSearch::kWide:
      tuning.candidates = 4 * CublasLtGemm::kTuneCandidates;
      break;
    case GemmSearch::kSplitK:
      tuning.split_k = CublasLtGemm::SplitK::kEvery;
      break;
    case GemmSearch::kTop8:
      break;
  }
  return tuning;
}

}  // namespace

CudaOps::CudaOps(bool aside_by_default) : aside_(ops_aside_switch(aside_by_default)) {
  SHARDTRAIN_CHECK(cuda_device_count() > 0, "CudaOps needs a visible GPU");
  SHARDTRAIN_CUDA_CHECK(cudaGetDevice(&device_index_));
  // Priorities: lower numbers first; the least is the default.
  int least_priority = 0, greatest_priority = 0;
  SHARDTRAIN_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority));
  SHARDTRAIN_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking,
                                                     aside_ ? greatest_priority : least_priority));
  SHARDTRAIN_CUDA_CHECK(
      cudaStreamCreateWithPriority(&aside_stream_, cudaStreamNonBlocking, least_priority));
  SHARDTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  SHARDTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
  if (aside_) {
    // As many as the units of a large model's update (one ticket each), so a step's tickets
    // never share an event.
    ticket_events_.resize(256);
    for (cudaEvent_t& event : ticket_events_) {
      SHARDTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    }
  }
  gemm_ = std::make_unique<CublasLtGemm>(stream_, gemm_tuning());
  if (aside_) {
    aside_gemm_sms_ = aside_gemm_sms_switch();
    SHARDTRAIN_CUDA_CHECK(
        cudaDeviceGetAttribute(&device_sms_, cudaDevAttrMultiProcessorCount, device_index_));
  }
  adamw_multi_ = std::make_unique<cuda_kernels::AdamWMultiLauncher>();
  attention_tuning_ = std::make_unique<cuda_kernels::AttentionForwardTuning>();
}

CudaOps::~CudaOps() {
  cudaStreamSynchronize(aside_stream_);
  cudaStreamSynchronize(stream_);
  gemm_.reset();
  fp8_.reset();
  adamw_multi_.reset();
  if (scratch_ != nullptr) cudaFree(scratch_);
  for (cudaEvent_t event : ticket_events_) cudaEventDestroy(event);
  cudaEventDestroy(join_);
  cudaEventDestroy(fork_);
  cudaStreamDestroy(aside_stream_);
  cudaStreamDestroy(stream_);
}

template <typename Call>
void CudaOps::count_host_wait(Call&& call) {
  const auto start = std::chrono::steady_clock::now();
  call();
  host_wait_ns_.fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count(),
      std::memory_order_relaxed);
}

float* CudaOps::scratch_floats(size_t count) {
  const size_t bytes = count * sizeof(float);
  if (bytes > scratch_bytes_) {
    wait_for_stream();  // the old scratch may be in use
    if (scratch_ != nullptr) SHARDTRAIN_CUDA_CHECK(cudaFree(scratch_));
    const size_t grown = std::max(bytes, 2 * scratch_bytes_);
    SHARDTRAIN_CUDA_CHECK(cudaMalloc(&scratch_, grown));
    scratch_bytes_ = grown;
  }
  return static_cast<float*>(scratch_);
}

// ---- memory ----

void* CudaOps::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* pointer = nullptr;
  SHARDTRAIN_CUDA_CHECK(cudaMalloc(&pointer, bytes));
  SHARDTRAIN_CUDA_CHECK(cudaMemsetAsync(pointer, 0, bytes, stream_));
  return pointer;
}

void CudaOps::release(void* pointer) {
  if (pointer == nullptr) return;
  // cudaFree waits for the device, so work still reading the buffer finishes first.
  count_host_wait([&] { SHARDTRAIN_CUDA_CHECK(cudaFree(pointer)); });
}

void CudaOps::copy_from_host(Tensor dst, const void* src) {
  require_cuda(dst, "copy_from_host dst");
  if (dst.bytes() == 0) return;
  // From pageable memory this returns once `src` has been staged, so the caller may reuse it;
  // staging may wait for the stream's earlier work, so its time counts as a host wait.
  count_host_wait([&] {
    SHARDTRAIN_CUDA_CHECK(
        cudaMemcpyAsync(dst.data(), src, dst.bytes(), cudaMemcpyHostToDevice, stream_));
  });
}

void CudaOps::copy_to_host(void* dst, Tensor src) {
  require_cuda(src, "copy_to_host src");
  read_to_host(dst, src.data(), src.bytes());
}

void CudaOps::read_to_host(void* dst, const void* src, size_t bytes) {
  join_aside();
  // Into pageable memory the copy itself waits for the stream's earlier work (it is synchronous
  // there), so the copy is timed with the synchronisation that follows it.
  count_host_wait([&] {
    if (bytes != 0) {
      SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    }
    SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_));
  });
}

void CudaOps::fill_zero(Tensor dst) {
  require_cuda(dst, "fill_zero dst");
  if (dst.bytes() != 0) SHARDTRAIN_CUDA_CHECK(cudaMemsetAsync(dst.data(), 0, dst.bytes(), stream_));
}

void CudaOps::cast(Tensor dst, Tensor src) {
  require_cuda(dst, "cast dst");
  require_cuda(src, "cast src");
  require_same_numel(dst, src, "cast");
  SHARDTRAIN_CHECK(
      dst.dtype() == src.dtype() || dst.dtype() == DType::kF32 || src.dtype() == DType::kF32,
      "cast {} -> {}: one side must be f32", dtype_name(src.dtype()), dtype_name(dst.dtype()));
  SHARDTRAIN_CHECK(
      dst.dtype() == src.dtype() || (dst.dtype() != DType::kI32 && src.dtype() != DType::kI32),
      "cast {} -> {}: i32 casts are not supported", dtype_name(src.dtype()),
      dtype_name(dst.dtype()));
  cuda_kernels::cast(dst.dtype(), dst.data(), src.dtype(), src.data(), src.numel(), stream_);
}

void CudaOps::synchronize() { wait_for_stream(); }

void CudaOps::wait_for_stream() {
  join_aside();
  count_host_wait([&] { SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_)); });
}

std::optional<double> CudaOps::host_wait_seconds() const {
  return static_cast<double>(host_wait_ns_.load(std::memory_order_relaxed)) * 1e-9;
}

// ---- elementwise ----

void CudaOps::add(Tensor out, Tensor a, Tensor b) {
  require_cuda(out, "add out");
  require_cuda(a, "add a");
  require_cuda(b, "add b");
  require_same_numel(out, a, "add");
  require_same_numel(out, b, "add");
  SHARDTRAIN_CHECK(out.dtype() == a.dtype() && out.dtype() == b.dtype(),
                   "add: dtypes {} = {} + {} must match", dtype_name(out.dtype()),
                   dtype_name(a.dtype()), dtype_name(b.dtype()));
  cuda_kernels::add(out.dtype(), out.data(), a.data(), b.data(), out.numel(), stream_);
}

void CudaOps::scale(Tensor x, float factor) {
  require_cuda(x, "scale x");
  cuda_kernels::scale(x.dtype(), x.data(), factor, x.numel(), stream_);
}

// ---- optimizer and norms ----

void CudaOps::adamw(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWStep& step) {
  require_f32(param, "adamw param");
  require_f32(grad, "adamw grad");
  require_f32(m, "adamw m");
  require_f32(v, "adamw v");
  require_same_numel(param, grad, "adamw grad");
  require_same_numel(param, m, "adamw m");
  require_same_numel(param, v, "adamw v");
  const AdamWCoefficients c = adamw_coefficients(step);
  cuda_kernels::adamw(param.f32(), grad.f32(), m.f32(), v.f32(), param.numel(), c, stream_);
}

void CudaOps::adamw_multi(const std::vector<AdamWSegment>& segments, const AdamWStep& step) {
  launch_adamw_multi(segments, step, stream_);
}

int64_t CudaOps::adamw_multi_aside(const std::vector<AdamWSegment>& segments,
                                   const AdamWStep& step) {
  if (!aside_) {
    adamw_multi(segments, step);
    return 0;
  }
  SHARDTRAIN_CUDA_CHECK(cudaEventRecord(fork_, stream_));
  SHARDTRAIN_CUDA_CHECK(cudaStreamWaitEvent(aside_stream_, fork_, 0));
  launch_adamw_multi(segments, step, aside_stream_);
  const int64_t ticket = next_ticket_++;
  SHARDTRAIN_CUDA_CHECK(cudaEventRecord(
      ticket_events_[static_cast<size_t>(ticket) % ticket_events_.size()], aside_stream_));
  aside_pending_ = true;
  update_gemm_sm_target();
  return ticket;
}

void CudaOps::update_gemm_sm_target() {
  if (aside_gemm_sms_ == 0) return;
  const bool pending = waited_ticket_ < next_ticket_ - 1;
  gemm_->set_sm_count_target(pending ? std::max(device_sms_ - aside_gemm_sms_, 1) : 0);
}

void CudaOps::wait_aside(int64_t ticket) {
  if (!aside_ || ticket <= 0) return;
  SHARDTRAIN_CHECK(ticket < next_ticket_, "wait_aside: ticket {} not issued (next {})", ticket,
                   next_ticket_);
  // A newer ticket in the same slot waits for more: still after this ticket's work.
  SHARDTRAIN_CUDA_CHECK(cudaStreamWaitEvent(
      stream_, ticket_events_[static_cast<size_t>(ticket) % ticket_events_.size()], 0));
  waited_ticket_ = std::max(waited_ticket_, ticket);
  update_gemm_sm_target();
}

void CudaOps::launch_adamw_multi(const std::vector<AdamWSegment>& segments, const AdamWStep& step,
                                 cudaStream_t stream) {
  std::vector<cuda_kernels::AdamWRange> ranges;
  ranges.reserve(segments.size());
  for (const AdamWSegment& s : segments) {
    require_f32(s.param, "adamw_multi param");
    require_f32(s.grad, "adamw_multi grad");
    require_f32(s.exp_avg, "adamw_multi exp_avg");
    require_f32(s.exp_avg_sq, "adamw_multi exp_avg_sq");
    require_same_numel(s.param, s.grad, "adamw_multi grad");
    require_same_numel(s.param, s.exp_avg, "adamw_multi exp_avg");
    require_same_numel(s.param, s.exp_avg_sq, "adamw_multi exp_avg_sq");
    if (s.compute_param.defined()) {
      require_cuda(s.compute_param, "adamw_multi compute_param");
      require_same_numel(s.param, s.compute_param, "adamw_multi compute_param");
      SHARDTRAIN_CHECK(
          s.compute_param.dtype() == DType::kBF16 || s.compute_param.dtype() == DType::kF16,
          "adamw_multi compute_param is {}, want bf16 or f16", dtype_name(s.compute_param.dtype()));
    }
    ranges.push_back({s.param.f32(), s.grad.f32(), s.exp_avg.f32(), s.exp_avg_sq.f32(),
                      s.compute_param.defined() ? s.compute_param.data() : nullptr,
                      s.compute_param.defined() ? s.compute_param.dtype() : DType::kF32,
                      s.param.numel(), s.weight_decay, s.zero_grad});
  }
  adamw_multi_->launch(ranges.data(), static_cast<int>(ranges.size()), step.lr,
                       adamw_coefficients(step), stream, /*short_blocks=*/stream == aside_stream_);
}

void CudaOps::sum_squares(Tensor x, Tensor out_1) {
  require_f32(x, "sum_squares x");
  require_f32(out_1, "sum_squares out");
  SHARDTRAIN_CHECK(out_1.numel() >= 1, "sum_squares into an empty tensor");
  cuda_kernels::sum_squares(x.f32(), x.numel(), out_1.f32(), stream_);
}

void CudaOps::sum_squares_aside(Tensor x, Tensor out_1) {
  require_f32(x, "sum_squares x");
  require_f32(out_1, "sum_squares out");
  SHARDTRAIN_CHECK(out_1.numel() >= 1, "sum_squares into an empty tensor");
  if (!aside_) {
    cuda_kernels::sum_squares(x.f32(), x.numel(), out_1.f32(), stream_);
    return;
  }
  SHARDTRAIN_CUDA_CHECK(cudaEventRecord(fork_, stream_));
  SHARDTRAIN_CUDA_CHECK(cudaStreamWaitEvent(aside_stream_, fork_, 0));
  cuda_kernels::sum_squares_in_small_blocks(x.f32(), x.numel(), out_1.f32(), aside_stream_);
  aside_pending_ = true;
}

void CudaOps::join_aside() {
  if (!aside_pending_) return;
  SHARDTRAIN_CUDA_CHECK(cudaEventRecord(join_, aside_stream_));
  SHARDTRAIN_CUDA_CHECK(cudaStreamWaitEvent(stream_, join_, 0));
  aside_pending_ = false;
  waited_ticket_ = next_ticket_ - 1;  // every update so far is before what follows
  update_gemm_sm_target();
}

float CudaOps::read_scalar(Tensor x_1) {
  require_f32(x_1, "read_scalar x");
  SHARDTRAIN_CHECK(x_1.numel() >= 1, "read_scalar of an empty tensor");
  float value = 0;
  read_to_host(&value, x_1.data(), sizeof(float));
  return value;
}

}  // namespace shardtrain
