#include "dist/host_staged_comm.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/host_buffer.h"
#include "dist/all_to_all_counts.h"

namespace shardtrain {
namespace {

// A host buffer reused across collectives; grows (never shrinks) to the largest request.
class Staging {
 public:
  void* reserve(size_t bytes) {
    if (buffer_.bytes() < bytes) buffer_ = HostBuffer(bytes);
    return buffer_.data();
  }
  float* reserve_floats(int64_t count) {
    return static_cast<float*>(reserve(static_cast<size_t>(count) * sizeof(float)));
  }

 private:
  HostBuffer buffer_;
};

Tensor host_f32(float* data, int64_t count) {
  return Tensor(data, DType::kF32, {count}, Device::kCpu);
}

class HostStagedComm final : public Comm {
 public:
  HostStagedComm(std::unique_ptr<Comm> host_comm, Ops& ops)
      : host_(std::move(host_comm)), ops_(ops) {
    SHARDTRAIN_CHECK(host_ != nullptr, "host-staged Comm needs a host Comm to wrap");
  }

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string backend_name() const override { return host_->backend_name() + " (host-staged)"; }
  void set_context(std::string context) override { host_->set_context(std::move(context)); }

  void all_gather(Tensor out, Tensor in) override {
    check_operands(out, in, "all_gather");
    SHARDTRAIN_CHECK(out.numel() == in.numel() * size(), "all_gather sizes {} vs {} x {}",
                     out.numel(), in.numel(), size());
    const int64_t n = in.numel();
    if (n == 0) return;
    float* gathered = primary_.reserve_floats(out.numel());
    const Tensor gathered_host = host_f32(gathered, out.numel());
    // `in` is read before `out` is written, so `in` may alias out's own slice.
    to_host(in, gathered + rank() * n);
    host_->all_gather(gathered_host, gathered_host.rows(rank() * n, (rank() + 1) * n));
    to_device(gathered, out);
  }

  void reduce_scatter(Tensor out, Tensor in, ReduceOp op) override {
    check_operands(out, in, "reduce_scatter");
    SHARDTRAIN_CHECK(in.numel() == out.numel() * size(), "reduce_scatter sizes {} vs {} x {}",
                     in.numel(), out.numel(), size());
    if (out.numel() == 0) return;
    float* full = primary_.reserve_floats(in.numel());
    float* reduced = secondary_.reserve_floats(out.numel());
    to_host(in, full);
    host_->reduce_scatter(host_f32(reduced, out.numel()), host_f32(full, in.numel()), op);
    to_device(reduced, out);
  }

  void all_reduce(Tensor inout, ReduceOp op) override {
    check_operand(inout, "all_reduce");
    if (inout.numel() == 0) return;
    float* values = primary_.reserve_floats(inout.numel());
    to_host(inout, values);
    host_->all_reduce(host_f32(values, inout.numel()), op);
    to_device(values, inout);
  }

  void broadcast(Tensor inout, int root) override {
    check_operand(inout, "broadcast");
    SHARDTRAIN_CHECK(root >= 0 && root < size(), "broadcast root {} of {}", root, size());
    if (inout.numel() == 0) return;
    float* values = primary_.reserve_floats(inout.numel());
    if (rank() == root) to_host(inout, values);  // the others' values are overwritten
    host_->broadcast(host_f32(values, inout.numel()), root);
    to_device(values, inout);
  }

  void barrier() override { host_->barrier(); }

  void all_to_all_v(Tensor out, const std::vector<int64_t>& recv_counts, Tensor in,
                    const std::vector<int64_t>& send_counts) override {
    check_all_to_all_counts(size(), out, recv_counts, in, send_counts);
    // A rank may send or receive nothing while its peers exchange rows: it still joins.
    if (in.numel() > 0) check_operand(in, "all_to_all_v");
    if (out.numel() > 0) check_operand(out, "all_to_all_v");
    float* sent = primary_.reserve_floats(std::max<int64_t>(in.numel(), 1));
    float* received = secondary_.reserve_floats(std::max<int64_t>(out.numel(), 1));
    if (in.numel() > 0) to_host(in, sent);
    host_->all_to_all_v(host_f32(received, out.numel()), recv_counts, host_f32(sent, in.numel()),
                        send_counts);
    if (out.numel() > 0) to_device(received, out);
  }

  std::unique_ptr<Comm> split(int color, int key) override {
    return std::make_unique<HostStagedComm>(host_->split(color, key), ops_);
  }

 private:
  void check_operand(const Tensor& t, const char* collective) const {
    SHARDTRAIN_CHECK(t.device() == ops_.device(),
                     "host-staged {}: tensor on {}, but the compute backend is on {}", collective,
                     device_name(t.device()), device_name(ops_.device()));
    SHARDTRAIN_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16,
                     "host-staged {}: dtype {} (f32 or bf16 only)", collective,
                     dtype_name(t.dtype()));
  }
  void check_operands(const Tensor& out, const Tensor& in, const char* collective) const {
    check_operand(out, collective);
    check_operand(in, collective);
    SHARDTRAIN_CHECK(out.dtype() == in.dtype(), "host-staged {}: out {} but in {}", collective,
                     dtype_name(out.dtype()), dtype_name(in.dtype()));
  }

  // host_values[0, src.numel()) = src widened to fp32. Synchronises (Ops::copy_to_host), so
  // the device work that produced `src` is done.
  void to_host(const Tensor& src, float* host_values) {
    if (src.dtype() == DType::kF32) {
      ops_.copy_to_host(host_values, src);
      return;
    }
    void* raw = wire_.reserve(src.bytes());
    ops_.copy_to_host(raw, src);
    convert_to_f32(raw, src.dtype(), host_values, static_cast<size_t>(src.numel()));
  }

  // dst = host_values[0, dst.numel()) in dst's dtype (bf16: rounded to nearest even). The
  // backend may still be copying when this returns; it has staged the host bytes already
  // (ops/cuda: pageable-memory copies), so the buffers are free for the next collective.
  void to_device(const float* host_values, const Tensor& dst) {
    if (dst.dtype() == DType::kF32) {
      ops_.copy_from_host(dst, host_values);
      return;
    }
    void* raw = wire_.reserve(dst.bytes());
    convert_from_f32(host_values, dst.dtype(), raw, static_cast<size_t>(dst.numel()));
    ops_.copy_from_host(dst, raw);
  }

  std::unique_ptr<Comm> host_;
  Ops& ops_;
  Staging primary_;    // fp32: the gathered output, the reduce-scatter input, all-reduce values
  Staging secondary_;  // fp32: the reduce-scatter output
  Staging wire_;       // the device's bytes of a bf16 tensor, before / after widening
};

}  // namespace

std::unique_ptr<Comm> make_host_staged_comm(std::unique_ptr<Comm> host_comm, Ops& ops) {
  return std::make_unique<HostStagedComm>(std::move(host_comm), ops);
}

}  // namespace shardtrain
