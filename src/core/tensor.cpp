#include "core/tensor.h"

#include <fmt/format.h>

namespace shardtrain {

std::string_view device_name(Device device) { return device == Device::kCpu ? "cpu" : "cuda"; }

Shape::Shape(std::initializer_list<int64_t> dims) {
  SHARDTRAIN_CHECK(dims.size() <= static_cast<size_t>(kMaxDims), "too many dims");
  for (int64_t d : dims) push_back(d);
}

void Shape::push_back(int64_t dim) {
  SHARDTRAIN_CHECK(rank_ < kMaxDims, "too many dims");
  SHARDTRAIN_CHECK(dim >= 0, "negative dim {}", dim);
  dims_[rank_++] = dim;
}

int64_t Shape::operator[](int axis) const {
  if (axis < 0) axis += rank_;
  SHARDTRAIN_CHECK(axis >= 0 && axis < rank_, "axis {} out of range for rank {}", axis, rank_);
  return dims_[axis];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

bool Shape::operator==(const Shape& other) const {
  if (rank_ != other.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] != other.dims_[i]) return false;
  return true;
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
  return s + "]";
}

float* Tensor::f32() const {
  SHARDTRAIN_CHECK(dtype_ == DType::kF32, "tensor is {}", dtype_name(dtype_));
  return static_cast<float*>(data_);
}

int32_t* Tensor::i32() const {
  SHARDTRAIN_CHECK(dtype_ == DType::kI32, "tensor is {}", dtype_name(dtype_));
  return static_cast<int32_t*>(data_);
}

uint16_t* Tensor::u16() const {
  SHARDTRAIN_CHECK(dtype_size(dtype_) == 2, "tensor is {}", dtype_name(dtype_));
  return static_cast<uint16_t*>(data_);
}

Tensor Tensor::reshaped(Shape shape) const {
  SHARDTRAIN_CHECK(shape.numel() == numel(), "reshape {} -> {}", shape_.to_string(),
                   shape.to_string());
  return Tensor(data_, dtype_, shape, device_);
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  SHARDTRAIN_CHECK(shape_.rank() >= 1 && 0 <= begin && begin <= end && end <= shape_[0],
                   "rows [{}, {}) of {}", begin, end, shape_.to_string());
  Shape shape;
  shape.push_back(end - begin);
  for (int i = 1; i < shape_.rank(); ++i) shape.push_back(shape_[i]);
  const size_t row_bytes = shape_[0] == 0 ? 0 : bytes() / static_cast<size_t>(shape_[0]);
  return Tensor(static_cast<char*>(data_) + begin * row_bytes, dtype_, shape, device_);
}

}  // namespace shardtrain
