// train.precision, fp8.keep_bf16_layers and fp8.all_gather: parsed, validated, and refused where
// FP8 cannot run (the CPU backend; on CUDA below compute capability 8.9, which the FP8 GPU test
// covers) or where keep_bf16_layers leaves no block in FP8.
#include "train/precision_check.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/testing/test_support.h"
#include "ops/cpu/cpu_ops.h"

namespace shardtrain {
namespace {

using testing::error_of;

ModelConfig model_with_layers(int64_t layers) {
  ModelConfig model;
  model.num_hidden_layers = layers;
  return model;
}

TEST(PrecisionConfig, ParsesTheChoicesAndValidatesKeepBf16Layers) {
  TrainConfig config;
  ConfigSchema schema;
  config.register_config(schema);
  EXPECT_EQ(config.train.precision, TrainPrecision::kBf16);  // the default
  schema.apply_override("train.precision=fp8");
  schema.apply_override("fp8.keep_bf16_layers=2");
  EXPECT_EQ(config.train.precision, TrainPrecision::kFp8);
  EXPECT_EQ(config.fp8.keep_bf16_layers, 2);
  const std::string bad = error_of([&] { schema.apply_override("train.precision=fp16"); });
  EXPECT_NE(bad.find("train.precision"), std::string::npos) << bad;
  EXPECT_NE(bad.find("fp8"), std::string::npos) << bad;  // lists the choices
  config.model.path = "m";
  config.data.path = "d";
  config.fp8.keep_bf16_layers = -1;
  const std::string negative = error_of([&] { config.validate(); });
  EXPECT_NE(negative.find("fp8.keep_bf16_layers"), std::string::npos) << negative;
}

TEST(PrecisionConfig, Fp8AllGatherNeedsFp8) {
  TrainConfig config;
  ConfigSchema schema;
  config.register_config(schema);
  EXPECT_FALSE(config.fp8.all_gather);  // the default
  schema.apply_override("fp8.all_gather=true");
  EXPECT_TRUE(config.fp8.all_gather);
  config.model.path = "m";
  config.data.path = "d";
  const std::string message = error_of([&] { config.validate(); });
  EXPECT_NE(message.find("'fp8.all_gather'"), std::string::npos) << message;
  EXPECT_NE(message.find("set train.precision = \"fp8\""), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << "one line";
  config.train.precision = TrainPrecision::kFp8;
  config.validate();  // accepted with FP8
  const std::string bad = error_of([&] { schema.apply_override("fp8.all_gather=maybe"); });
  EXPECT_NE(bad.find("fp8.all_gather"), std::string::npos) << bad;
}

TEST(PrecisionCheck, Fp8IsRefusedOnTheCpuBackend) {
  TrainConfig config;
  CpuOps cpu;
  require_precision_supported(config, model_with_layers(4), cpu);  // bf16: nothing to check
  config.train.precision = TrainPrecision::kFp8;
  const std::string message =
      error_of([&] { require_precision_supported(config, model_with_layers(4), cpu); });
  EXPECT_NE(message.find("train.precision = \"fp8\""), std::string::npos) << message;
  EXPECT_NE(message.find("CPU backend"), std::string::npos) << message;
  EXPECT_NE(message.find("use train.precision = \"bf16\""), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << "one line";
}

TEST(PrecisionCheck, KeepBf16LayersMustLeaveAnFp8Block) {
  const std::string fp8_runs;  // the backend's answer where FP8 runs (CUDA, 8.9+)
  TrainConfig config;
  config.train.precision = TrainPrecision::kFp8;
  config.fp8.keep_bf16_layers = 1;
  require_precision_supported(config, model_with_layers(3), fp8_runs);  // block 1 runs FP8
  config.fp8.keep_bf16_layers = 2;
  const std::string message =
      error_of([&] { require_precision_supported(config, model_with_layers(4), fp8_runs); });
  EXPECT_NE(message.find("fp8.keep_bf16_layers = 2"), std::string::npos) << message;
  EXPECT_NE(message.find("all 4 blocks"), std::string::npos) << message;
}

}  // namespace
}  // namespace shardtrain
