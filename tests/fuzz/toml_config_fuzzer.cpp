// libFuzzer target: a training job's TOML config (ConfigSchema::load_toml_file with the
// TrainConfig schema, then validate()) on arbitrary bytes, and the printed config loading again.
#include <cstddef>
#include <cstdint>

#include "core/config.h"
#include "core/error.h"
#include "fuzz_input_file.h"
#include "train/train_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static shardtrain::fuzz::FuzzInputFile file;
  try {
    shardtrain::TrainConfig config;
    shardtrain::ConfigSchema schema;
    config.register_config(schema);
    schema.load_toml_file(file.write(data, size));
    config.validate();
    const std::string printed = schema.to_toml();
    shardtrain::TrainConfig reloaded;
    shardtrain::ConfigSchema reloaded_schema;
    reloaded.register_config(reloaded_schema);
    reloaded_schema.load_toml_file(
        file.write(reinterpret_cast<const uint8_t*>(printed.data()), printed.size()));
  } catch (const shardtrain::Error&) {
  }
  return 0;
}
