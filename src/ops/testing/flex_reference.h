// Test support for comparing our masked attention (Ops::attention_forward / attention_backward
// under an AttentionMask) with PyTorch's FlexAttention: the reference files that
// tools/device/flex_attention_reference.py writes into the directory $SHARDTRAIN_TEST_FLEX_DIR
// names, one <case>.safetensors per case. Read by cuda_attention_flex_gpu_test (the CUDA kernels)
// and cpu_attention_flex_test (the fp32 CPU reference).
//
// File contract (the script's docstring has the whole list): tensors in OUR layout, q / dout
// (B,T,H,D), k / v (B,T,K,D) in BF16; document_start (B,T) I32, the position where each token's
// document begins (AttentionMask::document_start_BT); flex_out, flex_dq, flex_dk, flex_dv (BF16)
// and flex_lse (B,H,T, F32, natural log, our lse's unit); exact_* the same in F32 from dense
// float64 attention of the same inputs. Metadata: B, T, H, K, D, window (0: none), scale,
// reference (what produced flex_*), flex_forward_ms / flex_forward_backward_ms (GPU timings).
//
// Errors reported per tensor: max |got - want|, that over max |want| ("max rel"), and
// ||got - want|| / ||want|| (relative L2, the measure of the other attention tests).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "ops/attention_mask.h"
#include "ops/device_buffer.h"
#include "ops/ops.h"

namespace shardtrain::flex_testing {

constexpr const char* kFlexDirEnv = "SHARDTRAIN_TEST_FLEX_DIR";

// The *.safetensors files of $SHARDTRAIN_TEST_FLEX_DIR, sorted; when there are none, `why_none`
// says why and what to run (the tests skip with it).
struct FlexFiles {
  std::vector<std::string> paths;
  std::string why_none;
};

inline FlexFiles flex_reference_files() {
  namespace fs = std::filesystem;
  FlexFiles files;
  const char* dir = std::getenv(kFlexDirEnv);
  const std::string how =
      "; make them with `python3 tools/device/flex_attention_reference.py DIR` on the GPU machine "
      "and set SHARDTRAIN_TEST_FLEX_DIR=DIR";
  if (dir == nullptr || *dir == '\0') {
    files.why_none =
        std::string(kFlexDirEnv) + " is not set: no FlexAttention reference files" + how;
    return files;
  }
  std::error_code error;
  if (!fs::is_directory(dir, error)) {
    files.why_none = std::string(kFlexDirEnv) + "=" + dir + " is no directory" + how;
    return files;
  }
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    if (entry.path().extension() == ".safetensors") files.paths.push_back(entry.path().string());
  }
  std::sort(files.paths.begin(), files.paths.end());
  if (files.paths.empty()) {
    files.why_none = std::string(kFlexDirEnv) + "=" + dir + " holds no .safetensors file" + how;
  }
  return files;
}

// One reference file, open (its tensors are read from the mapping).
class FlexCase {
 public:
  explicit FlexCase(const std::string& path)
      : file_(SafetensorsFile::open(path)), name_(std::filesystem::path(path).stem().string()) {
    B = integer("B");
    T = integer("T");
    H = integer("H");
    K = integer("K");
    D = integer("D");
    window = integer("window");
    scale = std::stof(meta("scale"));
    reference = meta("reference");
  }

  const std::string& name() const { return name_; }
  Shape q_shape() const { return {B, T, H, D}; }
  Shape kv_shape() const { return {B, T, K, D}; }
  Shape lse_shape() const { return {B, H, T}; }
  bool has(const std::string& tensor) const { return file_.find(tensor) != nullptr; }
  // "" when absent.
  std::string meta(const std::string& key) const {
    const auto it = file_.metadata().find(key);
    return it == file_.metadata().end() ? "" : it->second;
  }

  // The entry `tensor` of shape `shape`; throws Error naming the file when absent or mis-shaped.
  const SafetensorsEntry& entry(const std::string& tensor, const Shape& shape) const {
    const SafetensorsEntry* e = file_.find(tensor);
    if (e == nullptr || e->shape != shape) {
      throw Error(file_.path() + ": tensor '" + tensor + "' is " +
                  (e == nullptr ? std::string("missing") : e->shape.to_string()) + ", want " +
                  shape.to_string() +
                  "; HINT: rewrite the files with tools/device/flex_attention_reference.py");
    }
    return *e;
  }
  // Its values as fp32 (BF16 or F32 in the file).
  std::vector<float> values(const std::string& tensor, const Shape& shape) const {
    const SafetensorsEntry& e = entry(tensor, shape);
    std::vector<float> out(static_cast<size_t>(shape.numel()));
    convert_to_f32(e.data, e.dtype, out.data(), out.size());
    return out;
  }
  std::vector<int32_t> document_start() const {
    const SafetensorsEntry& e = entry("document_start", {B, T});
    if (e.dtype != DType::kI32) throw Error(file_.path() + ": document_start is not I32");
    std::vector<int32_t> out(static_cast<size_t>(B * T));
    std::memcpy(out.data(), e.data, out.size() * sizeof(int32_t));
    return out;
  }

  int64_t B = 0, T = 0, H = 0, K = 0, D = 0, window = 0;
  float scale = 0;
  std::string reference;

 private:
  int64_t integer(const std::string& key) const {
    const std::string value = meta(key);
    if (value.empty()) {
      throw Error(
          file_.path() + ": no '" + key +
          "' in its metadata; HINT: rewrite it with tools/device/flex_attention_reference.py");
    }
    return std::stoll(value);
  }

  SafetensorsFile file_;
  std::string name_;
};

// The five results of one forward + backward, as fp32.
struct AttentionOutputs {
  std::vector<float> out, lse, dq, dk, dv;
};

// A case's inputs on `ops`'s device in `dtype` (lse fp32), its mask, and NaN-poisoned outputs:
// forward() and backward() run Ops::attention_forward / attention_backward; the backward reads
// this run's own out and lse, as training does.
class AttentionRun {
 public:
  AttentionRun(Ops& ops, DType dtype, const FlexCase& c) : ops_(ops), dtype_(dtype), c_(c) {
    q_ = upload(c.values("q", c.q_shape()), c.q_shape());
    k_ = upload(c.values("k", c.kv_shape()), c.kv_shape());
    v_ = upload(c.values("v", c.kv_shape()), c.kv_shape());
    dout_ = upload(c.values("dout", c.q_shape()), c.q_shape());
    out_ = output(c.q_shape(), dtype);
    lse_ = output(c.lse_shape(), DType::kF32);
    dq_ = output(c.q_shape(), dtype);
    dk_ = output(c.kv_shape(), dtype);
    dv_ = output(c.kv_shape(), dtype);
    const std::vector<int32_t> starts = c.document_start();
    buffers_.emplace_back(ops_, starts.size() * sizeof(int32_t));
    mask_.document_start_BT = buffers_.back().view(DType::kI32, {c.B, c.T});
    ops_.copy_from_host(mask_.document_start_BT, starts.data());
    mask_.window = c.window;
  }

  void forward() { ops_.attention_forward(q_, k_, v_, c_.scale, out_, lse_, mask_); }
  void backward() {
    ops_.attention_backward(dout_, q_, k_, v_, out_, lse_, c_.scale, dq_, dk_, dv_, mask_);
  }
  // Poisons the outputs (NaN: an element a kernel leaves unwritten fails every comparison).
  void poison() {
    for (Tensor t : {out_, lse_, dq_, dk_, dv_}) {
      const std::vector<unsigned char> bytes(t.bytes(), 0xFF);
      ops_.copy_from_host(t, bytes.data());
    }
  }
  AttentionOutputs outputs() {
    return {download(out_), download(lse_), download(dq_), download(dk_), download(dv_)};
  }

 private:
  Tensor upload(const std::vector<float>& values, const Shape& shape) {
    Tensor t = output(shape, dtype_);
    if (dtype_ == DType::kF32) {
      ops_.copy_from_host(t, values.data());
    } else {
      std::vector<uint16_t> bits(values.size());
      convert_from_f32(values.data(), dtype_, bits.data(), values.size());
      ops_.copy_from_host(t, bits.data());
    }
    return t;
  }
  Tensor output(const Shape& shape, DType dtype) {
    buffers_.emplace_back(ops_, static_cast<size_t>(shape.numel()) * dtype_size(dtype));
    return buffers_.back().view(dtype, shape);
  }
  std::vector<float> download(Tensor t) {
    std::vector<float> values(static_cast<size_t>(t.numel()));
    if (t.dtype() == DType::kF32) {
      ops_.copy_to_host(values.data(), t);
    } else {
      std::vector<uint16_t> bits(values.size());
      ops_.copy_to_host(bits.data(), t);
      convert_to_f32(bits.data(), t.dtype(), values.data(), values.size());
    }
    return values;
  }

  Ops& ops_;
  DType dtype_;
  const FlexCase& c_;
  std::vector<DeviceBuffer> buffers_;
  Tensor q_, k_, v_, dout_, out_, lse_, dq_, dk_, dv_;
  AttentionMask mask_;
};

struct Difference {
  double max_abs = 0;  // max |got - want|
  double max_rel = 0;  // max_abs / max |want|
  double rel_l2 = 0;   // ||got - want|| / ||want||; infinity when got has a non-finite value
};

inline Difference difference(const std::vector<float>& got, const std::vector<float>& want) {
  Difference d;
  double diff2 = 0, norm2 = 0, want_max = 0;
  bool finite = got.size() == want.size();
  for (size_t i = 0; finite && i < got.size(); ++i) {
    if (!std::isfinite(got[i])) {
      finite = false;
      break;
    }
    const double e = double{got[i]} - want[i];
    d.max_abs = std::max(d.max_abs, std::abs(e));
    want_max = std::max(want_max, std::abs(double{want[i]}));
    diff2 += e * e;
    norm2 += double{want[i]} * want[i];
  }
  if (!finite) return {INFINITY, INFINITY, INFINITY};
  d.max_rel = want_max > 0 ? d.max_abs / want_max : d.max_abs;
  d.rel_l2 = norm2 > 0 ? std::sqrt(diff2 / norm2) : std::sqrt(diff2);
  return d;
}

// Relative-L2 bounds for the comparison with one reference's tensors.
struct Tolerances {
  double values;  // out, dq, dk, dv
  double lse;
};

// Compares `got` with the file's `prefix`_{out,lse,dq,dk,dv} ("flex" or "exact"): one line per
// tensor ("<case> <label> vs <prefix> <tensor>: max abs .. max rel .. rel l2 .."), and an
// EXPECT per tensor within `tolerances`. Returns the largest relative L2 of the values.
inline double expect_close(const FlexCase& c, const AttentionOutputs& got, const std::string& label,
                           const std::string& prefix, Tolerances tolerances) {
  const struct {
    const char* name;
    const std::vector<float>& values;
    Shape shape;
    double tolerance;
  } tensors[] = {{"out", got.out, c.q_shape(), tolerances.values},
                 {"lse", got.lse, c.lse_shape(), tolerances.lse},
                 {"dq", got.dq, c.q_shape(), tolerances.values},
                 {"dk", got.dk, c.kv_shape(), tolerances.values},
                 {"dv", got.dv, c.kv_shape(), tolerances.values}};
  double worst = 0;
  for (const auto& t : tensors) {
    const Difference d = difference(t.values, c.values(prefix + "_" + t.name, t.shape));
    std::printf("%s %s vs %s %s: max abs %.3g, max rel %.3g, rel l2 %.3g\n", c.name().c_str(),
                label.c_str(), prefix.c_str(), t.name, d.max_abs, d.max_rel, d.rel_l2);
    EXPECT_LE(d.rel_l2, t.tolerance) << c.name() << " " << label << " vs " << prefix << " "
                                     << t.name << " (max abs " << d.max_abs << ")";
    if (std::string(t.name) != "lse") worst = std::max(worst, d.rel_l2);
  }
  std::fflush(stdout);
  return worst;
}

}  // namespace shardtrain::flex_testing
