#include "train/train_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/testing/test_support.h"

namespace shardtrain {
namespace {

using testing::error_of;

class TrainConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("shardtrain_train_config_test_" + std::to_string(getpid()) + ".toml"))
                .string();
    config_.register_config(schema_);
  }
  void TearDown() override { std::filesystem::remove(path_); }

  void load(const std::string& toml) {
    std::ofstream(path_) << toml;
    schema_.load_toml_file(path_);
  }

  std::string path_;
  TrainConfig config_;
  ConfigSchema schema_;
};

constexpr const char* kMinimal = R"(
[model]
path = "models/tiny"
[data]
path = "data/demo.bin"
)";

TEST_F(TrainConfigTest, DefaultsMatchTheDocumentedValues) {
  load(kMinimal);
  EXPECT_EQ(config_.model.init, ModelInit::kPretrained);
  EXPECT_EQ(config_.model.dtype, DType::kF32);
  EXPECT_EQ(config_.data.format, DataFormat::kAuto);
  EXPECT_EQ(config_.data.seq_len, 512);
  EXPECT_EQ(config_.data.pad_id, 0);
  EXPECT_EQ(config_.train.steps, 0) << "0 = from train.epochs, or 100 steps";
  EXPECT_EQ(config_.total_steps_for(1000, 1), 100);
  EXPECT_EQ(config_.train.epochs, 0.0);
  EXPECT_EQ(config_.train.eval_every, 0);
  EXPECT_EQ(config_.data.eval_path, "");
  EXPECT_EQ(config_.data.weights, "");
  EXPECT_EQ(config_.train.micro_batch, 4);
  EXPECT_EQ(config_.train.grad_accum, 1);
  EXPECT_EQ(config_.train.seed, 1234);
  EXPECT_EQ(config_.train.device, DeviceChoice::kAuto);
  EXPECT_EQ(config_.train.log_every, 1);
  EXPECT_EQ(config_.train.output_dir, "");
  EXPECT_DOUBLE_EQ(config_.train.max_grad_norm, 1.0);
  EXPECT_DOUBLE_EQ(config_.optim.lr, 3e-4);
  EXPECT_DOUBLE_EQ(config_.optim.min_lr, 0.0);
  EXPECT_EQ(config_.optim.warmup_steps, 0);
  EXPECT_EQ(config_.optim.schedule, LrScheduleKind::kCosine);
  EXPECT_DOUBLE_EQ(config_.optim.weight_decay, 0.0);
  EXPECT_DOUBLE_EQ(config_.optim.beta1, 0.9);
  EXPECT_DOUBLE_EQ(config_.optim.beta2, 0.95);
  EXPECT_DOUBLE_EQ(config_.optim.eps, 1e-8);
  EXPECT_FALSE(config_.optim.decay_norms_and_biases);
  EXPECT_NO_THROW(config_.validate());
}

TEST_F(TrainConfigTest, LoadsAFullJob) {
  load(R"(
[model]
path = "ckpt"
init = "random"
dtype = "bf16"
[data]
path = "d.jsonl"
format = "jsonl"
seq_len = 64
pad_id = 2
[train]
steps = 50
micro_batch = 8
grad_accum = 2
seed = 7
device = "cpu"
log_every = 10
output_dir = "out"
max_grad_norm = 0
[optim]
lr = 1e-3
min_lr = 1e-4
warmup_steps = 5
schedule = "linear"
weight_decay = 0.1
beta1 = 0.8
beta2 = 0.99
eps = 1e-6
decay_norms_and_biases = true
)");
  EXPECT_EQ(config_.model.init, ModelInit::kRandom);
  EXPECT_EQ(config_.model.dtype, DType::kBF16);
  EXPECT_EQ(config_.data.seq_len, 64);
  EXPECT_EQ(config_.data.pad_id, 2);
  EXPECT_EQ(config_.train.grad_accum, 2);
  EXPECT_EQ(config_.train.device, DeviceChoice::kCpu);
  EXPECT_DOUBLE_EQ(config_.train.max_grad_norm, 0.0);
  EXPECT_DOUBLE_EQ(config_.optim.min_lr, 1e-4);
  EXPECT_EQ(config_.optim.schedule, LrScheduleKind::kLinear);
  EXPECT_TRUE(config_.optim.decay_norms_and_biases);
  EXPECT_NO_THROW(config_.validate());
}

TEST_F(TrainConfigTest, OverridesWinOverTheFile) {
  load(std::string(kMinimal) + "[train]\nsteps = 10\n");
  schema_.apply_override("train.steps=3");
  schema_.apply_override("optim.lr=0.01");
  schema_.apply_override("data.path=other.bin");
  EXPECT_EQ(config_.train.steps, 3);
  EXPECT_DOUBLE_EQ(config_.optim.lr, 0.01);
  EXPECT_EQ(config_.data.path, "other.bin");
}

TEST_F(TrainConfigTest, PrintedConfigLoadsBack) {
  load(std::string(kMinimal) + "[optim]\nlr = 0.002\nschedule = \"constant\"\n");
  const std::string text = schema_.to_toml();
  TrainConfig again;
  ConfigSchema schema;
  again.register_config(schema);
  std::ofstream(path_) << text;
  schema.load_toml_file(path_);
  EXPECT_EQ(again.model.path, "models/tiny");
  EXPECT_EQ(again.optim.lr, 0.002);
  EXPECT_EQ(again.optim.schedule, LrScheduleKind::kConstant);
  EXPECT_EQ(schema.to_toml(), text);
}

TEST_F(TrainConfigTest, ChoiceKeysRejectOtherValues) {
  EXPECT_NE(error_of([&] {
              schema_.apply_override("model.dtype=fp16");
            }).find("must be one of \"bf16\", \"fp32\""),
            std::string::npos);
  EXPECT_NE(error_of([&] { schema_.apply_override("train.device=tpu"); }).find("train.device"),
            std::string::npos);
  EXPECT_NE(error_of([&] { schema_.apply_override("data.format=csv"); }).find("\"jsonl\""),
            std::string::npos);
}

// Every choice key is an enum parsed when the value is applied: each name maps to its value,
// a value outside the choices is one line naming the key and every valid value, and the enum
// is left as it was.
TEST_F(TrainConfigTest, ChoiceKeysAreParsedOnceIntoEnums) {
  schema_.apply_override("fsdp.strategy=HYBRID_SHARD");
  schema_.apply_override("fsdp.compute_copy=on_demand");
  schema_.apply_override("train.activation_checkpointing=selective");
  schema_.apply_override("model.init=random");
  schema_.apply_override("model.dtype=bf16");
  schema_.apply_override("optim.schedule=linear");
  schema_.apply_override("data.format=examples");
  schema_.apply_override("data.packing=concatenate");
  schema_.apply_override("data.example_format=alpaca");
  schema_.apply_override("data.chat_template=llama3");
  schema_.apply_override("data.overlong=truncate");
  schema_.apply_override("data.on_bad_line=skip");
  schema_.apply_override("data.invalid_utf8=replace");
  schema_.apply_override("train.device=cpu");
  schema_.apply_override("dist.backend=gloo");
  EXPECT_EQ(config_.data.format, DataFormat::kExamples);
  EXPECT_EQ(config_.data.packing, PackingMode::kConcatenate);
  EXPECT_EQ(config_.data.example_format, ExampleFormat::kAlpaca);
  EXPECT_EQ(config_.data.chat_template, ChatTemplateChoice::kLlama3);
  EXPECT_EQ(config_.data.overlong, OverlongPolicy::kTruncate);
  EXPECT_EQ(config_.data.on_bad_line, BadLinePolicy::kSkip);
  EXPECT_EQ(config_.data.invalid_utf8, InvalidUtf8Policy::kReplace);
  EXPECT_EQ(config_.train.device, DeviceChoice::kCpu);
  EXPECT_EQ(config_.dist.backend, CommBackendChoice::kGloo);
  schema_.apply_override("data.packing=auto");  // "auto" is a value too (nullopt)
  schema_.apply_override("data.example_format=auto");
  EXPECT_EQ(config_.data.packing, std::nullopt);
  EXPECT_EQ(config_.data.example_format, std::nullopt);
  EXPECT_EQ(config_.fsdp.strategy, FsdpStrategy::kHybridShard);
  EXPECT_EQ(config_.fsdp.compute_copy, ComputeCopyChoice::kOnDemand);
  EXPECT_EQ(config_.train.activation_checkpointing, ActivationCheckpointing::kSelective);
  EXPECT_EQ(config_.model.init, ModelInit::kRandom);
  EXPECT_EQ(config_.model.dtype, DType::kBF16);
  EXPECT_EQ(config_.optim.schedule, LrScheduleKind::kLinear);
  // The printed config names each value as typed.
  const std::string toml = schema_.to_toml();
  for (const char* line : {"strategy = \"HYBRID_SHARD\"", "compute_copy = \"on_demand\"",
                           "activation_checkpointing = \"selective\"", "init = \"random\"",
                           "dtype = \"bf16\"", "schedule = \"linear\""}) {
    EXPECT_NE(toml.find(line), std::string::npos) << line << "\n" << toml;
  }
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"fsdp.strategy=ZERO3",
       "'fsdp.strategy' must be one of \"FULL_SHARD\", \"SHARD_GRAD_OP\", \"HYBRID_SHARD\", "
       "\"NO_SHARD\""},
      {"fsdp.compute_copy=never",
       "'fsdp.compute_copy' must be one of \"auto\", \"keep\", "
       "\"on_demand\""},
      {"train.activation_checkpointing=partial",
       "'train.activation_checkpointing' must be one of \"none\", \"full\", \"selective\""},
      {"model.init=zeros", "'model.init' must be one of \"pretrained\", \"random\""},
      {"model.dtype=fp16", "'model.dtype' must be one of \"bf16\", \"fp32\""},
      {"optim.schedule=step",
       "'optim.schedule' must be one of \"cosine\", \"linear\", "
       "\"constant\""},
      {"data.packing=document",
       "'data.packing' must be one of \"auto\", \"documents\", \"concatenate\", \"none\""},
      {"data.chat_template=vicuna",
       "'data.chat_template' must be one of \"auto\", \"model\", \"chatml\", \"llama2\", "
       "\"llama3\""},
      {"data.overlong=chop", "'data.overlong' must be one of \"split\", \"truncate\", \"drop\""},
      {"dist.backend=mpi", "'dist.backend' must be one of \"auto\", \"nccl\", \"gloo\""},
  };
  for (const auto& [assignment, fragment] : bad) {
    const std::string message = error_of([&] { schema_.apply_override(assignment); });
    EXPECT_NE(message.find(fragment), std::string::npos) << assignment << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  EXPECT_EQ(config_.fsdp.strategy, FsdpStrategy::kHybridShard);  // unchanged by the failures
  EXPECT_EQ(config_.optim.schedule, LrScheduleKind::kLinear);
  // The same from a file.
  const std::string message =
      error_of([&] { load(std::string(kMinimal) + "[fsdp]\nstrategy = \"ZERO3\"\n"); });
  EXPECT_NE(message.find("fsdp.strategy"), std::string::npos) << message;
  EXPECT_NE(message.find("\"NO_SHARD\""), std::string::npos) << message;
}

struct InvalidCase {
  const char* override_assignment;
  const char* expected_fragment;
};

TEST_F(TrainConfigTest, ValidateNamesTheKey) {
  const InvalidCase cases[] = {
      {"train.steps=-1", "'train.steps' must be >= 0 (0 = from train.epochs), got -1"},
      {"train.epochs=-0.5", "'train.epochs' must be >= 0"},
      {"train.eval_every=-1", "'train.eval_every' must be >= 0"},
      {"train.eval_every=10", "'train.eval_every' (10) needs 'data.eval_path'"},
      {"train.micro_batch=-1", "'train.micro_batch' must be > 0"},
      {"train.grad_accum=0", "'train.grad_accum' must be > 0"},
      {"data.seq_len=1", "'data.seq_len' must be in [2, 1048576], got 1"},
      {"data.seq_len=1000000000000", "'data.seq_len' must be in [2, 1048576], got 1000000000000"},
      {"train.micro_batch=100000", "'train.micro_batch' (100000) x 'data.seq_len' (512) exceed"},
      {"train.grad_accum=200000",
       "'train.grad_accum' (200000) x 'train.micro_batch' (4) x 'data.seq_len' (512) exceed "
       "67108864 tokens per optimizer step"},
      {"train.global_batch=99999999999", "'train.global_batch' (99999999999) x 'data.seq_len'"},
      {"optim.lr=0", "'optim.lr' must be > 0"},
      {"optim.lr=-0.1", "'optim.lr' must be > 0"},
      {"optim.beta1=1", "'optim.beta1' must be in [0, 1)"},
      {"optim.beta2=-0.5", "'optim.beta2' must be in [0, 1)"},
      {"optim.min_lr=0.1", "'optim.min_lr' (0.1) must be <= 'optim.lr' (0.0003)"},
      {"data.pad_id=-1", "'data.pad_id' must be >= 0"},
      {"train.max_grad_norm=-1", "'train.max_grad_norm' must be >= 0"},
      {"train.checkpoint_max_lag_steps=-1", "'train.checkpoint_max_lag_steps' must be >= 0"},
      {"train.keep_checkpoints=0", "'train.keep_checkpoints' must be >= 1"},
      {"train.checkpoint_every=-5", "'train.checkpoint_every' must be >= 0"},
      {"model.path=", "'model.path' is not set"},
      {"data.path=", "'data.path' is not set"},
      {"train.output_dir=./m/", "'train.output_dir' (./m/) is the input model dir 'model.path'"},
  };
  for (const InvalidCase& c : cases) {
    TrainConfig config;
    ConfigSchema schema;
    config.register_config(schema);
    config.model.path = "m";
    config.data.path = "d.bin";
    schema.apply_override(c.override_assignment);
    const std::string message = error_of([&] { config.validate(); });
    EXPECT_NE(message.find(c.expected_fragment), std::string::npos)
        << c.override_assignment << " -> " << message;
  }
}

TEST_F(TrainConfigTest, StepsAndEpochsAreExclusive) {
  load(kMinimal);
  schema_.apply_override("train.steps=50");
  schema_.apply_override("train.epochs=2");
  const std::string message = error_of([&] { config_.validate(); });
  EXPECT_NE(message.find("'train.steps' (50) and 'train.epochs' (2) are both set"),
            std::string::npos)
      << message;
}

TEST_F(TrainConfigTest, EpochsGiveStepsOverTheGlobalBatch) {
  load(kMinimal);
  schema_.apply_override("train.epochs=2");
  schema_.apply_override("train.micro_batch=2");
  schema_.apply_override("train.grad_accum=3");
  EXPECT_NO_THROW(config_.validate());
  // 2 x 100 sequences / (2 x 3 x 2 ranks = 12 per step) = 16.7 -> 17 steps.
  EXPECT_EQ(config_.total_steps_for(100, 2), 17);
  EXPECT_EQ(config_.global_batch_for(2), 12);
  schema_.apply_override("train.epochs=0.5");
  EXPECT_EQ(config_.total_steps_for(100, 1), 9) << "50 sequences / 6 per step, rounded up";
  schema_.apply_override("train.epochs=0.0001");
  EXPECT_EQ(config_.total_steps_for(100, 1), 1) << "at least one step";
  // More steps than an int64 holds ran one step before: now one line naming the key.
  schema_.apply_override("train.epochs=9223372036854775807");
  const std::string message = error_of([&] { config_.total_steps_for(100, 1); });
  EXPECT_NE(message.find("config key 'train.epochs' (9.223372036854776e+18) over 100 sequences"),
            std::string::npos)
      << message;
  schema_.apply_override("train.epochs=0");
  schema_.apply_override("train.steps=7");
  EXPECT_EQ(config_.total_steps_for(100, 1), 7);
}

TEST_F(TrainConfigTest, WarmupLongerThanTheRunIsValid) {
  load(kMinimal);
  schema_.apply_override("optim.warmup_steps=101");
  EXPECT_NO_THROW(config_.validate()) << "clamped with a warning (train/run_length.h)";
}

TEST_F(TrainConfigTest, OutputDirMustNotBeTheCheckpointDir) {
  load(kMinimal);
  schema_.apply_override("train.checkpoint_dir=out/ckpt");
  schema_.apply_override("train.output_dir=out/../out/ckpt");
  EXPECT_NE(error_of([&] { config_.validate(); }).find("is 'train.checkpoint_dir'"),
            std::string::npos);
  schema_.apply_override("train.output_dir=out/hf");
  EXPECT_NO_THROW(config_.validate());
}

TEST_F(TrainConfigTest, WarmupEqualToStepsIsValid) {
  load(kMinimal);
  schema_.apply_override("optim.warmup_steps=100");
  EXPECT_NO_THROW(config_.validate());
}

TEST_F(TrainConfigTest, TypoInFileIsCaught) {
  const std::string message =
      error_of([&] { load(std::string(kMinimal) + "[optim]\nwarmup_step = 3\n"); });
  EXPECT_NE(message.find("did you mean 'optim.warmup_steps'?"), std::string::npos) << message;
}

TEST(GlobalBatch, DerivesGradAccumOrRefusesTheWorldSize) {
  TrainConfig config;
  config.train.micro_batch = 2;
  config.train.grad_accum = 3;
  EXPECT_EQ(config.grad_accum_for(4), 3);  // no global_batch: grad_accum as given
  config.train.grad_accum = 1;
  config.train.global_batch = 16;
  EXPECT_EQ(config.grad_accum_for(1), 8);
  EXPECT_EQ(config.grad_accum_for(4), 2);
  try {
    config.grad_accum_for(3);
    FAIL() << "16 sequences cannot be split over 3 ranks of 2";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.global_batch"), std::string::npos) << e.what();
  }
  config.train.grad_accum = 4;
  EXPECT_THROW(config.grad_accum_for(4), Error);  // conflicts: 16 / (2 x 4) = 2
  EXPECT_EQ(config.grad_accum_for(2), 4);         // agrees
}

TEST(DemoConfig, ExampleTomlLoadsAndValidates) {
  TrainConfig config;
  ConfigSchema schema;
  config.register_config(schema);
  schema.load_toml_file(std::string(SHARDTRAIN_SOURCE_DIR) + "/examples/demo.toml");
  EXPECT_EQ(config.model.init, ModelInit::kRandom);
  EXPECT_NO_THROW(config.validate());
}

}  // namespace
}  // namespace shardtrain
