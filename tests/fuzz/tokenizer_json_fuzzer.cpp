// libFuzzer target: loading a tokenizer.json from arbitrary text, then, when it loads, encoding
// and decoding a fixed text with it. Both may throw only shardtrain::Error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "data/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const shardtrain::Tokenizer tokenizer =
        shardtrain::Tokenizer::from_json_text(text, "fuzz/tokenizer.json");
    const auto ids = tokenizer.encode("Hello world! \xE2\x96\x81caf\xC3\xA9 12345 <s>\xff", true);
    tokenizer.decode(ids, false);
  } catch (const shardtrain::Error&) {
  }
  return 0;
}
