// DeviceBuffer: an owning allocation made through an Ops backend; released on destruction.
// Movable, not copyable. On CPU this is host memory; on CUDA, device memory.
#pragma once

#include <cstddef>
#include <utility>

#include "ops/ops.h"

namespace shardtrain {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Ops& ops, size_t bytes)
      : ops_(&ops), data_(bytes ? ops.allocate(bytes) : nullptr), bytes_(bytes) {
    if (data_ != nullptr) ops_->note_buffer(bytes_, true);
  }
  ~DeviceBuffer() { free(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ops_(other.ops_),
        data_(std::exchange(other.data_, nullptr)),
        bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      free();
      ops_ = other.ops_;
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return ops_->device(); }
  // REQUIRES: shape.numel() * dtype_size(dtype) <= bytes().
  Tensor view(DType dtype, Shape shape) const {
    SHARDTRAIN_CHECK(static_cast<size_t>(shape.numel()) * dtype_size(dtype) <= bytes_,
                     "view {} exceeds buffer of {} bytes", shape.to_string(), bytes_);
    return Tensor(data_, dtype, shape, ops_->device());
  }

 private:
  void free() {
    if (data_ == nullptr) return;
    ops_->release(data_);
    ops_->note_buffer(bytes_, false);
  }

  Ops* ops_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// A bump allocator over one DeviceBuffer, for per-step activations: `take` hands out aligned
// slices; `reset` makes all of them free again at once. Never frees individual slices.
class Arena {
 public:
  static constexpr size_t kAlignment = 256;
  Arena() = default;
  Arena(Ops& ops, size_t capacity_bytes) : buffer_(ops, capacity_bytes) {}

  // REQUIRES: enough capacity left (checked; the caller sizes the arena from the config).
  Tensor take(DType dtype, Shape shape) {
    const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
    const size_t begin = (used_ + kAlignment - 1) / kAlignment * kAlignment;
    SHARDTRAIN_CHECK(begin + bytes <= buffer_.bytes(), "arena of {} bytes exhausted (need {})",
                     buffer_.bytes(), begin + bytes);
    used_ = begin + bytes;
    peak_ = used_ > peak_ ? used_ : peak_;
    return Tensor(static_cast<char*>(buffer_.data()) + begin, dtype, shape, buffer_.device());
  }
  size_t mark() const { return used_; }
  void release_to(size_t mark) { used_ = mark; }
  void reset() { used_ = 0; }
  size_t peak() const { return peak_; }
  size_t capacity() const { return buffer_.bytes(); }

 private:
  DeviceBuffer buffer_;
  size_t used_ = 0;
  size_t peak_ = 0;
};

}  // namespace shardtrain
