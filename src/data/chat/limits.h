// RenderLimits: the bounds that keep a hostile chat template from exhausting memory or time.
// Exceeding one is an Error naming the limit, never a crash or an unbounded allocation.
//   max_output_bytes  the rendered text, and any one string or list value built on the way
//                     (a string of more bytes or a list of more items than this is refused
//                     before it is allocated)
//   max_steps         statements executed + loop iterations + calls, over one render
//   max_call_depth    nested macro calls (recursion)
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardtrain::chat {

struct RenderLimits {
  size_t max_output_bytes = size_t{16} << 20;
  uint64_t max_steps = 10'000'000;
  int max_call_depth = 100;
};

// Throws Error when a string of `bytes` would exceed limits.max_output_bytes.
void check_string_size(size_t bytes, const RenderLimits& limits);
// Throws Error when a list of `items` would exceed limits.max_output_bytes items.
void check_list_size(size_t items, const RenderLimits& limits);

}  // namespace shardtrain::chat
