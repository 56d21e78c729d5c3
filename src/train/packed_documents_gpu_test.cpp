// Packed documents (data.packing = documents) on the GPU, end to end from raw JSONL: text
// examples of 20 to 250 tokens, tokenized and packed by `prepare` into sequences of 320 tokens
// (several documents per sequence, many crossing the 64- and 128-token tiles of the CUDA
// attention kernels, a partial last 128-token tile).
//   - TrainingFollowsCpu: a tiny golden model (tests/golden/llama_gqa, its context raised to 512
//     so that 320-token sequences are allowed; rope does not depend on it) trained 30 steps with
//     the bf16 CUDA backend stays within bf16 tolerance (3e-2 relative, as
//     train/train_parity_gpu_test.cpp) of the fp32 CPU loss curve, and learns.
//   - PackedLossEqualsDocumentsAlone: a checkpoint trained on the CPU, evaluated on the packed
//     data and on the same examples one per sequence (data.packing = none): the packed loss is
//     the token-weighted mean of the documents' losses alone (the same targets; loss within
//     `tolerance`: 1e-5 on the fp32 CPU, 1e-2 in bf16 on the GPU), the GPU's packed loss is the
//     CPU's within 3e-2, and one causal stream of the same tokens (concatenate) gives a loss
//     farther than the tolerance, so the comparison can fail. The CPU case runs everywhere; the
//     GPU cases skip with a visible message where no GPU is present.
// src/model/packed_documents_test.cpp checks the same property at the model level (gradients
// too) on hand-built batches.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "data/packing_mode.h"
#include "data/testing/tiny_tokenizer.h"
#include "ops/backend.h"
#include "ops/device_buffer.h"
#include "train/evaluator.h"
#include "train/inference_model.h"
#include "train/train_config.h"
#include "train/trainer.h"
#include "train/training_data.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kSeqLen = 320;
constexpr int kDocuments = 48;

// Letters a-z (ids 0-25), the space (26) and <|endoftext|> (27): every id below the golden
// models' vocabulary of 96, one token per character.
std::string write_letters_tokenizer(const fs::path& dir) {
  nlohmann::json vocab = nlohmann::json::object();
  for (char c = 'a'; c <= 'z'; ++c) vocab[std::string(1, c)] = c - 'a';
  vocab[" "] = 26;
  nlohmann::json config = testing::bpe_tokenizer_json(vocab, nlohmann::json::array());
  config["added_tokens"] = nlohmann::json::array({testing::special_token_json(27, "<|endoftext|>")});
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << config.dump();
  std::ofstream(dir / "tokenizer_config.json")
      << nlohmann::json{{"eos_token", "<|endoftext|>"}, {"pad_token", nullptr}}.dump();
  return dir.string();
}

// Document i: a short word of its own repeated to 20-250 characters, so a model can learn to
// continue it from the document's own earlier tokens (and would be misled by another
// document's).
std::string document_text(int i) {
  const int length = 20 + (i * 53 + 17) % 231;
  std::string word;
  for (int k = 0; k < 3 + i % 5; ++k) word += static_cast<char>('a' + (i * 7 + k * (1 + i % 3)) % 26);
  std::string text;
  while (static_cast<int>(text.size()) < length) text += word + " ";
  text.resize(length);
  return text;
}

// The golden model with max_position_embeddings raised to 512 (weights as they are).
std::string copy_golden_model(const std::string& name, const fs::path& dir) {
  const fs::path source = fs::path(SHARDTRAIN_SOURCE_DIR) / "tests/golden" / name;
  fs::create_directories(dir);
  std::ifstream in(source / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config["max_position_embeddings"] = 512;
  std::ofstream(dir / "config.json") << config.dump(2);
  fs::copy_file(source / "model.safetensors", dir / "model.safetensors");
  return dir.string();
}

// A temporary directory with the model, tokenizer and data of the job (removed at the end).
class PackedJob {
 public:
  explicit PackedJob(const std::string& model)
      : dir_(fs::temp_directory_path() /
             ("shardtrain_packed_gpu_" + model + "_" + std::to_string(getpid()))) {
    fs::remove_all(dir_);
    config_.model.path = copy_golden_model(model, dir_ / "model");
    config_.data.tokenizer = write_letters_tokenizer(dir_ / "tokenizer");
    config_.data.path = (dir_ / "data.jsonl").string();
    std::ofstream data(config_.data.path);
    for (int i = 0; i < kDocuments; ++i) data << nlohmann::json{{"text", document_text(i)}}.dump() << "\n";
    config_.data.cache_dir = (dir_ / "cache").string();
    config_.data.seq_len = kSeqLen;
    config_.data.packing = PackingMode::kDocuments;
    config_.train.steps = 30;
    config_.train.micro_batch = 2;
    config_.optim.lr = 3e-3;
    config_.optim.warmup_steps = 3;
  }
  ~PackedJob() { fs::remove_all(dir_); }

  TrainConfig config() const { return config_; }
  fs::path path(const std::string& name) const { return dir_ / name; }

  // Trains config on `device`; saves the model to `output_dir` when given.
  TrainOutcome train(DeviceChoice device, const std::string& output_dir = "") const {
    TrainConfig config = config_;
    config.train.device = device;
    config.train.output_dir = output_dir;
    TrainRunOptions options;
    options.quiet = true;
    auto ops = make_ops(device);
    return run_training(config, *ops, options);
  }

 private:
  fs::path dir_;
  TrainConfig config_;
};

TEST(PackedDocumentsGpu, TrainingFollowsCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU: packed-document GPU training parity skipped";
  for (const std::string model : {"llama_gqa", "qwen2_tied_bias"}) {
    SCOPED_TRACE(model);
    const PackedJob job(model);
    const TrainOutcome reference = job.train(DeviceChoice::kCpu);
    const TrainOutcome outcome = job.train(DeviceChoice::kCuda);
    ASSERT_EQ(outcome.losses.size(), reference.losses.size());
    double worst = 0;
    for (size_t i = 0; i < reference.losses.size(); ++i) {
      const double relative =
          std::abs(outcome.losses[i] - reference.losses[i]) / reference.losses[i];
      worst = std::max(worst, relative);
      EXPECT_LE(relative, 3e-2) << "step " << i + 1 << ": gpu " << outcome.losses[i] << " cpu "
                                << reference.losses[i];
    }
    std::printf("%s packed documents: loss %.4f -> %.4f (cpu %.4f -> %.4f), largest relative "
                "difference %.3g\n",
                model.c_str(), outcome.losses.front(), outcome.losses.back(),
                reference.losses.front(), reference.losses.back(), worst);
    EXPECT_LT(outcome.losses.back(), 0.8 * outcome.losses.front());  // it learned
  }
}

// The mean loss and target count of the job's data read with `packing`, on `model`.
struct MeanLoss {
  double loss = 0;
  int64_t targets = 0;
  size_t sequences = 0;
};

MeanLoss evaluate(InferenceModel& model, const TrainConfig& config, PackingMode packing) {
  DataConfig data = config.data;
  data.packing = packing;
  const std::unique_ptr<SequenceDataset> dataset = open_training_data(data, config.model.path, 0);
  DeviceBuffer loss_buffer(*model.ops, sizeof(float));
  const EvalTotals totals =
      evaluate_share(*model.model, *model.units, *model.ops, *dataset, {dataset->size(), 4},
                     loss_buffer.view(DType::kF32, {1}));
  return {totals.loss_sum / static_cast<double>(totals.targets), totals.targets, dataset->size()};
}

struct EvalCase {
  DeviceChoice device;
  double tolerance;  // packed vs alone, relative
  const char* name;
};

class PackedDocumentsEval : public ::testing::TestWithParam<EvalCase> {};

TEST_P(PackedDocumentsEval, PackedLossEqualsDocumentsAlone) {
  const EvalCase& c = GetParam();
  if (c.device == DeviceChoice::kCuda && !cuda_available()) {
    GTEST_SKIP() << "no GPU: packed-document GPU evaluation parity skipped";
  }
  const PackedJob job("llama_gqa");
  // Trained (deterministically, on the CPU) until it continues a document from its own tokens:
  // a model that reads across documents then shows it in the loss.
  const std::string trained = job.path("trained").string();
  job.train(DeviceChoice::kCpu, trained);

  InferenceModel cpu = load_inference_model(trained, DeviceChoice::kCpu);
  cpu.model->reserve(4, kSeqLen);
  const MeanLoss cpu_packed = evaluate(cpu, job.config(), PackingMode::kDocuments);
  InferenceModel model = load_inference_model(trained, c.device);
  model.model->reserve(4, kSeqLen);
  const MeanLoss packed = evaluate(model, job.config(), PackingMode::kDocuments);
  const MeanLoss alone = evaluate(model, job.config(), PackingMode::kNone);
  const MeanLoss stream = evaluate(model, job.config(), PackingMode::kConcatenate);

  ASSERT_EQ(alone.sequences, static_cast<size_t>(kDocuments));
  ASSERT_LE(packed.sequences * 2, alone.sequences) << "several documents per sequence";
  ASSERT_EQ(packed.targets, alone.targets) << "each document's first token is no target";
  ASSERT_EQ(stream.targets, packed.targets);
  const double error = std::abs(packed.loss - alone.loss) / alone.loss;
  const double leak = std::abs(stream.loss - alone.loss) / alone.loss;
  const double device_error = std::abs(packed.loss - cpu_packed.loss) / cpu_packed.loss;
  std::printf("%s: packed %.6f (%zu sequences), documents alone %.6f (%zu): relative %.2e; "
              "one causal stream %.6f: %.2e; packed vs cpu %.2e\n",
              c.name, packed.loss, packed.sequences, alone.loss, alone.sequences, error,
              stream.loss, leak, device_error);
  EXPECT_LT(error, c.tolerance);
  EXPECT_LT(device_error, 3e-2);
  EXPECT_GT(leak, 3 * c.tolerance) << "the same tokens as one stream must differ";
}

INSTANTIATE_TEST_SUITE_P(Devices, PackedDocumentsEval,
                         ::testing::Values(EvalCase{DeviceChoice::kCpu, 1e-5, "cpu"},
                                           EvalCase{DeviceChoice::kCuda, 1e-2, "cuda"}),
                         [](const ::testing::TestParamInfo<EvalCase>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace shardtrain
