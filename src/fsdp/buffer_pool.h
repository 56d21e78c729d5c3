// BufferPool: reusable device buffers for FSDP's transient tensors (gathered units, full
// gradients), so that a step allocates nothing once the pool has settled and the peak is known.
//
// take(bytes) hands out the smallest free buffer that fits, or allocates one of exactly that
// size: the root and the (equal) blocks settle into separate buffers after the first step. The
// bytes requested (not the buffer sizes) are what in_use / peak count, so the peak is the plan's
// formula (fsdp/shard_plan.h) whatever buffer served a request.
#pragma once

#include <cstddef>
#include <vector>

#include "core/tensor.h"
#include "ops/device_buffer.h"
#include "ops/ops.h"

namespace shardtrain {

class BufferPool {
 public:
  // `ops` must outlive the pool.
  explicit BufferPool(Ops& ops) : ops_(ops) {}
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A slot of at least `bytes` bytes, held until free(slot).
  int take(size_t bytes);
  // REQUIRES: `slot` was taken and not freed since.
  void free(int slot);
  // The first numel elements of `slot` as a 1-D tensor of `dtype`.
  Tensor view(int slot, DType dtype, int64_t numel) const {
    return buffers_[slot].view(dtype, {numel});
  }
  size_t peak_bytes() const { return peak_bytes_; }

 private:
  Ops& ops_;
  std::vector<DeviceBuffer> buffers_;
  std::vector<size_t> taken_bytes_;  // [slot] bytes requested by its holder
  std::vector<bool> in_use_;         // [slot]
  size_t in_use_bytes_ = 0, peak_bytes_ = 0;
};

}  // namespace shardtrain
