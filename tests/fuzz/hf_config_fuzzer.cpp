// libFuzzer target: read_hf_config (config.json) on arbitrary bytes. An accepted config must
// also survive what loading a model does first with it: its parameter layout (bounded sizes)
// and writing it back as config.json, which must read again.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "fuzz_input_file.h"
#include "model/hf_config.h"
#include "model/param_layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static shardtrain::fuzz::FuzzInputFile file;
  try {
    const shardtrain::ModelConfig config = shardtrain::read_hf_config(file.write(data, size));
    const shardtrain::ParamLayout layout = shardtrain::make_param_layout(config);
    volatile int64_t total = layout.total_numel();
    (void)total;
    const std::string again = shardtrain::write_hf_config_json(config);
    shardtrain::read_hf_config(
        file.write(reinterpret_cast<const uint8_t*>(again.data()), again.size()));
  } catch (const shardtrain::Error&) {
  }
  return 0;
}
