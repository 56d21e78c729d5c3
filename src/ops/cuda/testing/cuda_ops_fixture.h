// Test support for the CUDA op tests (ops/cuda/*_gpu_test.cpp): CudaOpsTest runs an op on
// CudaOps and on the CpuOps fp32 reference with the same bf16-rounded inputs (the CPU as f32,
// the GPU as bf16 unless a test says otherwise). GPU outputs are poisoned with NaN bytes before
// each run so an unwritten element fails the comparison; accumulating outputs start from the
// same random values on both. Errors are ||gpu - cpu|| / ||cpu||: bf16 outputs within 1e-2
// (typically ~3e-3), fp32 ops within 1e-5. Without a GPU every test is skipped with a visible
// message. ScopedKernelOverrides forces an attention kernel (ops/kernel_overrides.h) for one
// scope.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_dispatch.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/device_buffer.h"
#include "ops/kernel_overrides.h"
#include "ops/testing/test_device_limits.h"

namespace shardtrain::cuda_testing {

constexpr double kBf16Tolerance = 1e-2;
constexpr double kF32Tolerance = 1e-5;

// Milliseconds of device time between two events around `enqueue` (work it puts on `stream`),
// waiting for it to finish: the timing tests' one stopwatch.
inline float elapsed_device_ms(cudaStream_t stream, const std::function<void()>& enqueue) {
  cudaEvent_t start = nullptr, stop = nullptr;
  SHARDTRAIN_CUDA_CHECK(cudaEventCreate(&start));
  SHARDTRAIN_CUDA_CHECK(cudaEventCreate(&stop));
  SHARDTRAIN_CUDA_CHECK(cudaEventRecord(start, stream));
  enqueue();
  SHARDTRAIN_CUDA_CHECK(cudaEventRecord(stop, stream));
  SHARDTRAIN_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  SHARDTRAIN_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms;
}

// One logical tensor on both backends.
struct Pair {
  Tensor cpu, gpu;
};

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU: CUDA kernel tests skipped";
    gpu_ = make_cuda_ops();
    cpu_ = make_cpu_ops();
  }

  // Mean wall time of `body` over `repeats` runs after one warm-up (plans, module load), with
  // the device synchronised around them. For the DISABLED_ timing tests.
  double time_ms(const std::function<void()>& body, int repeats) {
    body();
    gpu_->synchronize();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < repeats; ++i) body();
    gpu_->synchronize();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
               .count() /
           repeats;
  }

  // bf16-rounded uniform values in [low, high); a fresh seed per call.
  std::vector<float> random(int64_t n, float low = -1, float high = 1) {
    std::mt19937 rng(next_seed_++ * 7919u + 17u);
    std::uniform_real_distribution<float> dist(low, high);
    std::vector<float> values(static_cast<size_t>(n));
    for (float& v : values) v = bf16_to_f32(f32_to_bf16(dist(rng)));
    return values;
  }

  Tensor cpu_tensor(const void* data, DType dtype, Shape shape) {
    buffers_.emplace_back(*cpu_, static_cast<size_t>(shape.numel()) * dtype_size(dtype));
    Tensor t = buffers_.back().view(dtype, shape);
    if (data != nullptr) cpu_->copy_from_host(t, data);
    return t;
  }
  Tensor gpu_tensor(const std::vector<float>& values, DType dtype, Shape shape) {
    buffers_.emplace_back(*gpu_, static_cast<size_t>(shape.numel()) * dtype_size(dtype));
    Tensor t = buffers_.back().view(dtype, shape);
    upload(t, values);
    return t;
  }
  void upload(Tensor gpu, const std::vector<float>& values) {
    if (gpu.dtype() == DType::kF32) {
      gpu_->copy_from_host(gpu, values.data());
    } else {
      std::vector<uint16_t> bits(values.size());
      convert_from_f32(values.data(), gpu.dtype(), bits.data(), values.size());
      gpu_->copy_from_host(gpu, bits.data());
    }
  }
  void poison(Tensor gpu) {
    std::vector<unsigned char> bytes(gpu.bytes(), 0xFF);  // NaN in f32, bf16 and f16
    gpu_->copy_from_host(gpu, bytes.data());
  }

  // Same values on both backends; the GPU copy in `gpu_dtype`.
  Pair input(const std::vector<float>& values, Shape shape, DType gpu_dtype = DType::kBF16) {
    return {cpu_tensor(values.data(), DType::kF32, shape), gpu_tensor(values, gpu_dtype, shape)};
  }
  Pair random_input(Shape shape, DType gpu_dtype = DType::kBF16, float low = -1, float high = 1) {
    return input(random(shape.numel(), low, high), shape, gpu_dtype);
  }
  // Output written (not accumulated): CPU zeros, GPU poisoned.
  Pair output(Shape shape, DType gpu_dtype = DType::kBF16) {
    Pair p{cpu_tensor(nullptr, DType::kF32, shape),
           gpu_tensor(std::vector<float>(static_cast<size_t>(shape.numel())), gpu_dtype, shape)};
    poison(p.gpu);
    return p;
  }
  Pair ints(const std::vector<int32_t>& values, Shape shape) {
    Pair p{cpu_tensor(values.data(), DType::kI32, shape), Tensor()};
    buffers_.emplace_back(*gpu_, values.size() * sizeof(int32_t));
    p.gpu = buffers_.back().view(DType::kI32, shape);
    gpu_->copy_from_host(p.gpu, values.data());
    return p;
  }

  std::vector<float> download(Tensor gpu) {
    std::vector<float> values(static_cast<size_t>(gpu.numel()));
    if (gpu.dtype() == DType::kF32) {
      gpu_->copy_to_host(values.data(), gpu);
    } else {
      std::vector<uint16_t> bits(values.size());
      gpu_->copy_to_host(bits.data(), gpu);
      convert_to_f32(bits.data(), gpu.dtype(), values.data(), values.size());
    }
    return values;
  }
  static std::vector<float> host_values(Tensor cpu) {
    return std::vector<float>(cpu.f32(), cpu.f32() + cpu.numel());
  }

  // ||gpu - cpu|| / ||cpu||; infinity if any GPU element is not finite (e.g. unwritten).
  double error(const Pair& p) {
    const std::vector<float> got = download(p.gpu);
    const std::vector<float> want = host_values(p.cpu);
    double diff = 0, norm = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (!std::isfinite(got[i])) return INFINITY;
      diff += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
      norm += double{want[i]} * want[i];
    }
    return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
  }

  std::unique_ptr<Ops> gpu_, cpu_;
  // For the reference pieces outside the Ops interface (scale, one-range adamw).
  CudaOps& gpu_ref() { return static_cast<CudaOps&>(*gpu_); }
  CpuOps& cpu_ref() { return static_cast<CpuOps&>(*cpu_); }
  std::deque<DeviceBuffer> buffers_;
  unsigned next_seed_ = 1;
};

#define EXPECT_BF16_CLOSE(pair) EXPECT_LE(error(pair), kBf16Tolerance) << #pair
#define EXPECT_F32_CLOSE(pair) EXPECT_LE(error(pair), kF32Tolerance) << #pair

struct AttentionCase {
  int64_t batch, seq, heads, kv_heads, head_dim;
};

inline void PrintTo(const AttentionCase& c, std::ostream* os) {
  *os << "B=" << c.batch << " T=" << c.seq << " H=" << c.heads << " K=" << c.kv_heads
      << " D=" << c.head_dim;
}

// The attention kernel named `kernel`: "default" (the table's choice: the warp-specialised
// wgmma kernels on an H200), "wgmma" (the cp.async wgmma kernels), "8" or "4" (the mma.sync
// kernels with that many warps a block, in both directions).
inline KernelOverrides attention_kernel(const std::string& kernel) {
  KernelOverrides overrides;
  if (kernel == "wgmma") {
    overrides.attention = KernelOverrides::Attention::kWgmma;
  } else if (kernel != "default") {
    overrides.attention = KernelOverrides::Attention::kMma;
    overrides.attention_forward_warps = overrides.attention_backward_warps = std::stoi(kernel);
  }
  return overrides;
}

// Whether the attention tests run the Hopper backward's dQ writer (SHARDTRAIN_ATTENTION_DQ_WRITER,
// ops/ops_switches.h) beside the default kernels: yes unless SHARDTRAIN_TEST_SKIP_DQ_WRITER=1,
// which tools/device/kernel_session.sh sets to tell a writer failure from one of the kernels
// every run uses, and to go on measuring those when only the writer failed.
inline bool dq_writer_tested() {
  const char* skip = std::getenv("SHARDTRAIN_TEST_SKIP_DQ_WRITER");
  return skip == nullptr || std::string(skip) != "1";
}

// The backward kernels the attention tests compare: attention_kernel's names, and "writer"
// (the default with its dQ writer) where dq_writer_tested().
inline std::vector<std::string> backward_kernels_tested() {
  std::vector<std::string> kernels{"default", "wgmma", "8", "4"};
  if (dq_writer_tested()) kernels.insert(kernels.begin() + 1, "writer");
  return kernels;
}

// Sets `overrides` on the dispatcher for its lifetime, then restores the table's choice.
class ScopedKernelOverrides {
 public:
  explicit ScopedKernelOverrides(const KernelOverrides& overrides) {
    cuda_kernels::set_kernel_overrides(overrides);
  }
  ~ScopedKernelOverrides() { cuda_kernels::set_kernel_overrides({}); }
  ScopedKernelOverrides(const ScopedKernelOverrides&) = delete;
  ScopedKernelOverrides& operator=(const ScopedKernelOverrides&) = delete;
};

}  // namespace shardtrain::cuda_testing
