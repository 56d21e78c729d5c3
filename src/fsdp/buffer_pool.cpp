#include "fsdp/buffer_pool.h"

#include <algorithm>

#include "core/error.h"

namespace shardtrain {

int BufferPool::take(size_t bytes) {
  int slot = -1;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    if (in_use_[i] || buffers_[i].bytes() < bytes) continue;
    if (slot < 0 || buffers_[i].bytes() < buffers_[slot].bytes()) slot = static_cast<int>(i);
  }
  if (slot < 0) {
    buffers_.emplace_back(ops_, bytes);
    taken_bytes_.push_back(0);
    in_use_.push_back(false);
    slot = static_cast<int>(buffers_.size() - 1);
  }
  in_use_[slot] = true;
  taken_bytes_[slot] = bytes;
  in_use_bytes_ += bytes;
  peak_bytes_ = std::max(peak_bytes_, in_use_bytes_);
  return slot;
}

void BufferPool::free(int slot) {
  SHARDTRAIN_CHECK(slot >= 0 && static_cast<size_t>(slot) < buffers_.size() && in_use_[slot],
                   "pool slot {} freed twice", slot);
  in_use_[slot] = false;
  in_use_bytes_ -= taken_bytes_[slot];
}

}  // namespace shardtrain
