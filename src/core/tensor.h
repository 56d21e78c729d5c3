// Tensor: a non-owning, contiguous, row-major view of typed memory on one device.
//
// Tensors never own memory: owners are HostBuffer (core/host_buffer.h), the op backends'
// device allocations, and flat parameter units. Shapes have at most kMaxDims dimensions.
// Naming convention (STYLE.md): shape suffixes on variables, e.g. `x_NC`, `q_BTHD`.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.h"
#include "core/error.h"

namespace shardtrain {

enum class Device : uint8_t { kCpu, kCuda };

std::string_view device_name(Device device);

class Shape {
 public:
  static constexpr int kMaxDims = 6;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);

  int rank() const { return rank_; }
  int64_t operator[](int axis) const;
  int64_t numel() const;
  bool operator==(const Shape& other) const;
  bool operator!=(const Shape& other) const { return !(*this == other); }
  std::string to_string() const;  // "[2, 3]"

  void push_back(int64_t dim);

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int rank_ = 0;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(void* data, DType dtype, Shape shape, Device device = Device::kCpu)
      : data_(data), dtype_(dtype), shape_(shape), device_(device) {}

  void* data() const { return data_; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  Device device() const { return device_; }
  int64_t numel() const { return shape_.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  int64_t dim(int axis) const { return shape_[axis]; }
  bool defined() const { return data_ != nullptr; }

  // Typed access; REQUIRES: dtype matches T's size class (checked for f32/i32).
  float* f32() const;
  int32_t* i32() const;
  uint16_t* u16() const;  // bf16 / fp16 bits

  // Same memory, new shape; REQUIRES: same element count.
  Tensor reshaped(Shape shape) const;
  // Rows [begin, end) along axis 0.
  Tensor rows(int64_t begin, int64_t end) const;

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Shape shape_;
  Device device_ = Device::kCpu;
};

}  // namespace shardtrain
