// libFuzzer target: TokenFile on arbitrary bytes (the header and size checks). An accepted file
// must expose exactly its tokens and mask: both are read in full.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "data/token_file.h"
#include "fuzz_input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static shardtrain::fuzz::FuzzInputFile file;
  try {
    const shardtrain::TokenFile tokens(file.write(data, size));
    volatile uint64_t sum = 0;
    for (const uint32_t id : tokens.tokens()) sum = sum + id;
    for (const uint8_t m : tokens.loss_mask()) sum = sum + m;
  } catch (const shardtrain::Error&) {
  }
  return 0;
}
