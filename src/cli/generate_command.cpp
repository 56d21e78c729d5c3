// `shardtrain generate --model DIR --prompt TEXT`: continue a prompt with a trained model, so a
// user can look at what they trained. Greedy by default (--temperature 0); with a temperature,
// top-p (nucleus) sampling from a seeded generator (model/token_sampler.h). No KV cache: each new
// token re-runs the prefix, which is fine for inspection-sized outputs.
// --chat: the prompt is a user message (after an optional --system message), rendered with the
// model dir's chat template (chat_template.jinja or tokenizer_config.json's chat_template: the
// template the model was trained with, which export writes there) and a generation prompt;
// generation stops at EOS or an end-of-turn token, and only the reply is printed. A dir
// without a chat template is an error naming it.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/choice_option.h"
#include "cli/commands.h"
#include "cli/finite_range.h"
#include "core/error.h"
#include "core/log.h"
#include "data/batch.h"
#include "data/hf_chat_template.h"
#include "data/tokenizer/tokenizer.h"
#include "data/tokenizer_files.h"
#include "io/hub/hub_resolver.h"
#include "model/token_sampler.h"
#include "train/inference_model.h"

namespace shardtrain::cli {
namespace {

struct GenerateArgs {
  std::string adapter;  // a PEFT LoRA adapter dir run on the base (--adapter)
  std::string model_dir, prompt, system;
  DeviceChoice device = DeviceChoice::kAuto;
  std::string revision = "main";  // of --model when it is a Hub id
  bool chat = false;
  int64_t max_new_tokens = 64;
  double temperature = 0.0, top_p = 0.9;
  int64_t seed = 0;
};

// The conversation [system?, user: prompt] rendered with the model's chat template, ready for
// the assistant's reply.
std::string chat_prompt(const GenerateArgs& args, const TokenizerFiles& files) {
  const std::optional<HfChatTemplate> chat_template = HfChatTemplate::load(files);
  if (!chat_template) {
    fail(
        "generate --chat: {} has no chat template (chat_template.jinja or tokenizer_config.json "
        "chat_template); HINT: export the model from a run on chat data, or drop --chat",
        args.model_dir);
  }
  ChatRenderInput input;
  if (!args.system.empty())
    input.messages.push_back({{"role", "system"}, {"content", args.system}});
  input.messages.push_back({{"role", "user"}, {"content", args.prompt}});
  input.add_generation_prompt = true;
  const std::string text = chat_template->render(input).text;
  log::info("chat prompt ({}): {}", chat_template->describe(), nlohmann::json(text).dump());
  return text;
}

// Token ids that end the reply: EOS, and with --chat the end-of-turn markers the tokenizer has.
std::vector<int32_t> stop_ids(const GenerateArgs& args, const TokenizerFiles& files,
                              const Tokenizer& tokenizer, const ModelConfig& config) {
  std::vector<int32_t> stops;
  std::optional<int32_t> eos;
  if (files.eos_token) eos = tokenizer.token_to_id(*files.eos_token);
  if (!eos && config.eos_token_id >= 0) eos = static_cast<int32_t>(config.eos_token_id);
  if (eos) stops.push_back(*eos);
  if (args.chat) {
    for (const char* marker : {"<|im_end|>", "<|eot_id|>", "<end_of_turn>", "</s>"}) {
      if (const auto id = tokenizer.token_to_id(marker)) stops.push_back(*id);
    }
  }
  return stops;
}

void run_generate(const GenerateArgs& given) {
  GenerateArgs args = given;
  args.model_dir =
      resolve_hub_path({given.model_dir, given.revision, HubFiles::kModel, "generate --model"});
  if (!args.system.empty() && !args.chat) fail("--system needs --chat");
  const TokenizerFiles files = locate_tokenizer(args.model_dir);
  const Tokenizer tokenizer = Tokenizer::load(files.tokenizer_json);
  InferenceModel loaded = load_inference_model(args.model_dir, args.device, args.adapter);
  DecoderModel& model = *loaded.model;
  const ModelConfig& config = model.config();

  // A chat template writes its own BOS.
  std::vector<int32_t> ids =
      args.chat ? tokenizer.encode(chat_prompt(args, files), /*add_special_tokens=*/false)
                : tokenizer.encode(args.prompt, /*add_special_tokens=*/true);
  if (ids.empty()) fail("--prompt is empty after tokenization; HINT: give some text");
  for (int32_t id : ids) {
    if (id >= config.vocab_size) {
      fail(
          "the tokenizer in {} produced id {} but the model's vocab_size is {}; HINT: the "
          "tokenizer does not belong to this model",
          args.model_dir, id, config.vocab_size);
    }
  }
  const int64_t max_len = std::min<int64_t>(config.max_position_embeddings,
                                            static_cast<int64_t>(ids.size()) + args.max_new_tokens);
  if (static_cast<int64_t>(ids.size()) >= max_len) {
    fail("the prompt has {} tokens, which leaves no room below max_position_embeddings = {}",
         ids.size(), config.max_position_embeddings);
  }
  const std::vector<int32_t> stops = stop_ids(args, files, tokenizer, config);

  model.reserve(1, max_len);
  TokenSampler sampler({.temperature = args.temperature,
                        .top_p = args.top_p,
                        .seed = static_cast<uint64_t>(args.seed)});
  std::vector<float> logits(config.vocab_size);
  const size_t prompt_length = ids.size();
  while (static_cast<int64_t>(ids.size()) < max_len) {
    Example example;
    example.input_ids = ids;
    example.labels.assign(ids.size(), -100);
    model.set_batch(make_batch({example}));
    model.forward_last_logits(*loaded.units, logits.data());
    const int32_t next = sampler.next(logits);
    if (std::find(stops.begin(), stops.end(), next) != stops.end()) break;
    ids.push_back(next);
  }
  const std::vector<int32_t> generated(ids.begin() + static_cast<ptrdiff_t>(prompt_length),
                                       ids.end());
  const std::string reply = tokenizer.decode(generated, true);
  std::printf("%s%s\n", args.chat ? "" : args.prompt.c_str(), reply.c_str());
}

}  // namespace

void add_generate_command(CLI::App& app, int& exit_code) {
  const auto [cmd, args] = add_command<GenerateArgs>(
      app, exit_code, "generate",
      "Continue a prompt with a Hugging Face checkpoint (greedy or top-p sampling)", run_generate);
  cmd->add_option("--model", args->model_dir,
                  "checkpoint dir with tokenizer.json, or a Hub id org/name")
      ->required();
  cmd->add_option("--revision", args->revision,
                  "Hub id only: branch, tag or commit (default main)");
  cmd->add_option("--adapter", args->adapter,
                  "a PEFT LoRA adapter dir (adapter_config.json + adapter_model.safetensors) "
                  "to run on the --model base");
  cmd->add_option("--prompt", args->prompt, "text to continue")->required();
  cmd->add_option("--max-new-tokens", args->max_new_tokens, "tokens to generate at most")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", args->temperature, "0 = greedy; > 0 samples")
      ->check(finite_range(0.0, 100.0));
  cmd->add_option("--top-p", args->top_p, "nucleus sampling mass (with --temperature > 0)")
      ->check(finite_range(0.0, 1.0));
  cmd->add_option("--seed", args->seed, "random seed for sampling");
  cmd->add_flag("--chat", args->chat,
                "the prompt is a user message, rendered with the model's chat template; prints "
                "the reply only");
  cmd->add_option("--system", args->system, "with --chat: a system message before the prompt");
  add_choice_option(cmd, "--device", args->device, device_choice_names(), "cpu, cuda or auto");
}

}  // namespace shardtrain::cli
