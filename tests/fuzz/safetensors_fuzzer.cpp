// libFuzzer target: SafetensorsFile::open on arbitrary bytes. A valid header must expose only
// bytes inside the file: every entry's data is read in full (ASan reports any byte outside the
// mapping). Anything else must be a shardtrain::Error.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "fuzz_input_file.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static shardtrain::fuzz::FuzzInputFile file;
  try {
    const shardtrain::SafetensorsFile tensors =
        shardtrain::SafetensorsFile::open(file.write(data, size));
    volatile uint8_t sum = 0;
    for (const shardtrain::SafetensorsEntry& entry : tensors.entries()) {
      const auto* bytes = static_cast<const uint8_t*>(entry.data);
      for (size_t i = 0; i < entry.bytes; ++i) sum = sum + bytes[i];
    }
  } catch (const shardtrain::Error&) {
  }
  return 0;
}
