#include "core/host_buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace shardtrain {

HostBuffer::HostBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  data_ = std::aligned_alloc(kAlignment, rounded);
  if (data_ == nullptr) throw std::bad_alloc();
  std::memset(data_, 0, rounded);
}

HostBuffer::~HostBuffer() { std::free(data_); }

HostBuffer::HostBuffer(HostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

Tensor HostBuffer::view(DType dtype, Shape shape) const {
  SHARDTRAIN_CHECK(static_cast<size_t>(shape.numel()) * dtype_size(dtype) <= bytes_,
                   "view {} exceeds buffer of {} bytes", shape.to_string(), bytes_);
  return Tensor(data_, dtype, shape, Device::kCpu);
}

HostTensor::HostTensor(DType dtype, Shape shape)
    : buffer(static_cast<size_t>(shape.numel()) * dtype_size(dtype)),
      tensor(buffer.view(dtype, shape)) {}

}  // namespace shardtrain
