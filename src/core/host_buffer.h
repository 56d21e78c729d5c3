// HostBuffer: an owning, 64-byte aligned host allocation. Movable, not copyable.
#pragma once

#include <cstddef>

#include "core/tensor.h"

namespace shardtrain {

class HostBuffer {
 public:
  static constexpr size_t kAlignment = 64;

  HostBuffer() = default;
  explicit HostBuffer(size_t bytes);  // zero-filled
  ~HostBuffer();
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  // A view of the whole buffer; REQUIRES: shape.numel() * dtype_size(dtype) <= bytes().
  Tensor view(DType dtype, Shape shape) const;

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Allocates a zero-filled host tensor together with its owner.
struct HostTensor {
  HostBuffer buffer;
  Tensor tensor;
  HostTensor() = default;
  HostTensor(DType dtype, Shape shape);
};

}  // namespace shardtrain
