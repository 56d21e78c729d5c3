#include "data/prepare.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string_view>
#include <system_error>
#include <thread>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/json_message.h"
#include "data/data_limits.h"
#include "data/formats.h"
#include "data/hf_chat_template.h"
#include "data/jsonl_lines.h"
#include "data/packing_mode.h"
#include "data/token_file.h"
#include "data/tokenizer/tokenizer.h"
#include "data/tokenizer/utf8.h"
#include "data/tokenizer_files.h"
#include "io/read_file.h"
#include "obs/phase_progress.h"

namespace shardtrain {
namespace {

using json = nlohmann::ordered_json;

constexpr size_t kLinesPerChunk = 256;
// More tokenizer threads than any machine has cores: a typo, not a request.
constexpr int64_t kMaxThreads = 1024;
constexpr size_t kSkippedSamples = 5;
// The hint after a bad line: when the line is an example of another format (chat data read as
// text, say), the fix is the format, not skipping (which would drop every line).
std::string bad_line_hint(std::string_view line, ExampleFormat format) {
  const json record = json_nesting_problem(line) ? json() : json::parse(line, nullptr, false);
  if (!record.is_discarded()) {
    if (const auto detected = detect_format(record); detected && *detected != format) {
      return fmt::format(
          "; the line is {} data: set data.example_format = \"{}\" (prepare: --format {})",
          example_format_name(*detected), example_format_name(*detected),
          example_format_name(*detected));
    }
  }
  return "; fix the line, or skip bad lines with --on-bad-line skip (data.on_bad_line)";
}

struct LineResult {
  enum class Kind { kBlank, kDocument, kBad };
  Kind kind = Kind::kBlank;
  TokenizedDocument document;
  std::string problem;  // for kBad
};

size_t first_invalid_byte(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const tokenizer::Utf8Unit unit = tokenizer::decode_utf8(text, pos);
    if (unit.code_point == tokenizer::kInvalidCodePoint) return pos;
    pos += unit.length;
  }
  return text.size();
}

// Parses a non-blank line into a JSON value; nullopt with `problem` set when it is bad.
std::optional<json> parse_line(std::string_view line, bool replace_invalid_utf8,
                               std::string& problem) {
  if (line.size() > kMaxJsonlLineBytes) {
    // The text is in memory already; its JSON tree would be several times larger.
    problem = jsonl_line_too_long();
    return std::nullopt;
  }
  std::string repaired;
  if (!tokenizer::is_valid_utf8(line)) {
    if (!replace_invalid_utf8) {
      problem = fmt::format(
          "invalid UTF-8 at byte {} of the line; fix the file's encoding or use "
          "--invalid-utf8 replace",
          first_invalid_byte(line) + 1);
      return std::nullopt;
    }
    repaired = tokenizer::utf8_lossy(line);
    line = repaired;
  }
  if (auto deep = json_nesting_problem(line)) {
    problem = *deep + "; flatten the nested arrays/objects";
    return std::nullopt;
  }
  try {
    return json::parse(line);
  } catch (const json::exception& error) {
    problem =
        fmt::format("not valid JSON ({}); each line must be one JSON object", json_message(error));
    return std::nullopt;
  }
}

std::string read_data_file(const std::string& path) {
  // A FIFO would hold the open, /dev/zero the read, forever.
  refuse_special_file(path, path, "check the data path");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open ({}); check the data path", path, std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail("{}: read failed ({})", path, std::strerror(errno));
  return text.str();
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    start = end + 1;
  }
  return lines;
}

ExampleFormat resolve_format(const PrepareOptions& options,
                             const std::vector<std::string_view>& lines) {
  if (options.format) return *options.format;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (is_blank_line(lines[i])) continue;
    std::string problem;
    const std::optional<json> record =
        parse_line(lines[i], options.invalid_utf8 == InvalidUtf8Policy::kReplace, problem);
    if (!record || !record->is_object()) continue;  // the main pass reports or skips it
    if (const auto format = detect_format(*record)) return *format;
    std::string keys;
    for (const auto& item : record->items()) keys += (keys.empty() ? "" : ", ") + item.key();
    fail(
        "{}:{}: cannot tell the data format from the keys ({}); lines need \"text\", "
        "\"prompt\"+\"completion\", \"instruction\"/\"input\"/\"output\" or \"messages\", or "
        "set the format explicitly (--format)",
        options.data_path, i + 1, keys);
  }
  fail("{}: no usable example: no line is a JSON object; each line needs one example",
       options.data_path);
}

int32_t required_token_id(const Tokenizer& tokenizer, const std::string& token,
                          const std::string& tokenizer_path, const char* role) {
  const auto id = tokenizer.token_to_id(token);
  if (!id) {
    fail(
        "tokenizer {}: the {} token \"{}\" is not in the vocabulary; set the EOS token "
        "(--eos-token)",
        tokenizer_path, role, token);
  }
  return *id;
}

int32_t resolve_eos(const PrepareOptions& options, const TokenizerFiles& files,
                    const Tokenizer& tokenizer) {
  if (!options.eos_token.empty()) {
    return required_token_id(tokenizer, options.eos_token, files.tokenizer_json, "EOS");
  }
  if (files.eos_token) {
    return required_token_id(tokenizer, *files.eos_token, files.tokenizer_json, "EOS");
  }
  for (const char* candidate : {"<|endoftext|>", "<|end_of_text|>", "</s>"}) {
    if (const auto id = tokenizer.token_to_id(candidate)) return *id;
  }
  fail(
      "tokenizer {}: cannot tell the EOS token (no eos_token in tokenizer_config.json and none of "
      "<|endoftext|>, <|end_of_text|>, </s> in the vocabulary); set it with --eos-token",
      files.tokenizer_json);
}

// Checks once, before the parallel pass, that the template's special tokens exist.
void check_chat_template_fits(const RenderSettings& settings, const Tokenizer& tokenizer,
                              const std::string& tokenizer_path) {
  const RenderedDocument probe = render_chat(settings.chat_template, settings.chat_tokens,
                                             {{"user", "a"}, {"assistant", "b"}}, false);
  try {
    tokenize_document(tokenizer, probe);
  } catch (const Error& error) {
    fail("tokenizer {} with chat template {}: {}", tokenizer_path,
         chat_template_name(settings.chat_template), error.what());
  }
}

std::vector<LineResult> process_lines(const std::vector<std::string_view>& lines,
                                      const Tokenizer& tokenizer, const RenderSettings& settings,
                                      bool replace_invalid_utf8, size_t thread_count,
                                      PhaseProgress& progress) {
  std::vector<LineResult> results(lines.size());
  std::atomic<size_t> next_chunk{0};
  std::exception_ptr unexpected;
  std::mutex unexpected_mutex;
  const auto work = [&] {
    try {
      while (true) {
        const size_t begin = next_chunk.fetch_add(1) * kLinesPerChunk;
        if (begin >= lines.size()) return;
        const size_t end = std::min(lines.size(), begin + kLinesPerChunk);
        for (size_t i = begin; i < end; ++i) {
          LineResult& result = results[i];
          if (is_blank_line(lines[i])) continue;
          result.kind = LineResult::Kind::kBad;
          const std::optional<json> record =
              parse_line(lines[i], replace_invalid_utf8, result.problem);
          if (!record) continue;
          try {
            result.document = tokenize_document(tokenizer, render_record(*record, settings));
          } catch (const Error& error) {
            result.problem = error.what();
            continue;
          }
          result.kind = LineResult::Kind::kDocument;
        }
        progress.advance(end - begin);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(unexpected_mutex);
      if (!unexpected) unexpected = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  try {
    for (size_t t = 1; t < thread_count; ++t) threads.emplace_back(work);
  } catch (const std::system_error&) {
    // The system gave fewer threads than asked (a process or memory limit): the ones started
    // share the chunks, and the output does not depend on how many there are.
  }
  work();
  for (std::thread& thread : threads) thread.join();
  if (unexpected) std::rethrow_exception(unexpected);
  return results;
}

}  // namespace

void validate_prepare_options(const PrepareOptions& options) {
  if (options.seq_len < 2 || options.seq_len > data_limits::kMaxSeqLen) {
    fail("seq_len is {}; it must be in [2, {}]", options.seq_len, data_limits::kMaxSeqLen);
  }
  if (options.threads < 0 || options.threads > kMaxThreads) {
    fail("threads is {}; use 0 (all cores) or up to {}", options.threads, kMaxThreads);
  }
}

namespace {

// The model's own chat template when the options ask for it (auto: when the tokenizer has one);
// otherwise fills `settings` with the built-in one. Records the choice in `report`.
std::optional<HfChatTemplate> choose_chat_template(const PrepareOptions& options,
                                                   const TokenizerFiles& files,
                                                   const Tokenizer& tokenizer,
                                                   RenderSettings& settings,
                                                   PrepareReport& report) {
  if (settings.format != ExampleFormat::kChat) return std::nullopt;
  std::optional<HfChatTemplate> model_template;
  const std::optional<ChatTemplate> builtin = builtin_template_of(options.chat_template);
  if (!builtin) {
    model_template = HfChatTemplate::load(files);
    if (!model_template && options.chat_template == ChatTemplateChoice::kModel) {
      fail(
          "tokenizer {}: no chat_template in tokenizer_config.json (or chat_template.jinja); "
          "choose a built-in template with --chat-template chatml|llama2|llama3",
          files.tokenizer_json);
    }
  }
  if (model_template) {
    report.chat_template = "the model's own, from " + model_template->describe();
    return model_template;
  }
  settings.chat_template = builtin ? *builtin : detect_chat_template(files, [&](const char* token) {
    return tokenizer.token_to_id(token).has_value();
  });
  settings.chat_tokens = chat_tokens(settings.chat_template, files);
  report.chat_template =
      std::string("built-in ") + chat_template_name(settings.chat_template) +
      (files.chat_template.empty() ? " (the tokenizer has no chat_template)" : "");
  check_chat_template_fits(settings, tokenizer, files.tokenizer_json);
  return std::nullopt;
}

// The documents of the good lines, in file order, and their 1-based line numbers; counts blank
// and skipped lines in `report`. Fails at the first bad line unless on_bad_line is skip, and
// when no document is left.
std::vector<TokenizedDocument> collect_documents(std::vector<LineResult>& results,
                                                 const std::vector<std::string_view>& lines,
                                                 const PrepareOptions& options,
                                                 ExampleFormat format, PrepareReport& report,
                                                 std::vector<size_t>& document_lines) {
  std::vector<TokenizedDocument> documents;
  documents.reserve(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    LineResult& result = results[i];
    if (result.kind == LineResult::Kind::kBlank) {
      ++report.blank_lines;
    } else if (result.kind == LineResult::Kind::kBad) {
      const std::string where = fmt::format("{}:{}", options.data_path, i + 1);
      if (options.on_bad_line == BadLinePolicy::kFail) {
        fail("{}: {}{}", where, result.problem, bad_line_hint(lines[i], format));
      }
      ++report.skipped_lines;
      if (report.skipped_samples.size() < kSkippedSamples) {
        report.skipped_samples.push_back(where + ": " + result.problem);
      }
    } else {
      ++report.examples;
      documents.push_back(std::move(result.document));
      document_lines.push_back(i + 1);
    }
  }
  if (documents.empty()) {
    fail("{}: no usable example ({} lines: {} blank, {} skipped as bad); fix the data",
         options.data_path, report.lines, report.blank_lines, report.skipped_lines);
  }
  return documents;
}

// packing none keeps one document per sequence, so under overlong split (which would cut a
// document over several sequences) a longer document is the user's to resolve.
void require_documents_fit(const std::vector<TokenizedDocument>& documents,
                           const std::vector<size_t>& document_lines, const PrepareOptions& options,
                           int32_t eos_id) {
  if (options.packing != PackingMode::kNone || options.overlong != OverlongPolicy::kSplit) {
    return;
  }
  for (size_t d = 0; d < documents.size(); ++d) {
    const size_t length = packed_length(documents[d], eos_id);
    if (length <= static_cast<size_t>(options.seq_len)) continue;
    fail(
        "{}:{}: the example is {} tokens (with its separator), longer than seq_len {}, and "
        "packing none puts one example per sequence; raise seq_len (--seq-len, data.seq_len), "
        "cut or drop such examples (--overlong truncate|drop, data.overlong) or pack them "
        "(--packing documents, data.packing)",
        options.data_path, document_lines[d], length, options.seq_len);
  }
}

// Packs the documents into seq_len sequences and writes the token file (which records seq_len
// and where every document begins).
void pack_and_write(const std::vector<TokenizedDocument>& documents, const PrepareOptions& options,
                    PrepareReport& report) {
  PackingOptions packing;
  packing.seq_len = options.seq_len;
  packing.eos_id = report.eos_id;
  packing.pad_id = report.pad_id;
  packing.overlong = options.overlong;
  packing.seed = options.seed;
  packing.one_per_sequence = options.packing == PackingMode::kNone;
  const PackedTokens packed = pack_documents(documents, packing);
  report.packing = packed.stats;
  if (packed.stats.sequences == 0) {
    fail(
        "{}: no usable example: all {} examples are longer than seq_len {} and were dropped; use "
        "--overlong split or truncate, or a larger --seq-len",
        options.data_path, report.examples, options.seq_len);
  }
  if (packed.stats.trained_tokens == 0) {
    fail("{}: no usable example: no token carries the loss; check the format and train_on_prompt",
         options.data_path);
  }
  write_token_file(options.out_path, packed.tokens, packed.mask,
                   static_cast<uint64_t>(options.seq_len), packed.document_starts);
}

}  // namespace

PrepareReport prepare_dataset(const PrepareOptions& options) {
  validate_prepare_options(options);
  const TokenizerFiles files = locate_tokenizer(options.tokenizer_path);
  const Tokenizer tokenizer = Tokenizer::load(files.tokenizer_json);

  PrepareReport report;
  report.data_path = options.data_path;
  report.out_path = options.out_path;
  report.seq_len = options.seq_len;
  report.packing_mode = packing_mode_name(options.packing);
  report.eos_id = resolve_eos(options, files, tokenizer);
  report.pad_id = report.eos_id;
  if (files.pad_token)
    report.pad_id = tokenizer.token_to_id(*files.pad_token).value_or(report.eos_id);

  const std::string text = read_data_file(options.data_path);
  if (is_blank_line(text)) {
    fail("{}: no usable example: the file is empty; it needs one JSON example per line",
         options.data_path);
  }
  const std::vector<std::string_view> lines = split_lines(text);
  report.lines = lines.size();

  RenderSettings settings;
  settings.format = resolve_format(options, lines);
  settings.train_on_prompt = options.train_on_prompt;
  settings.train_on_eos = options.train_on_eos;
  report.format = example_format_name(settings.format);
  const std::optional<HfChatTemplate> model_template =
      choose_chat_template(options, files, tokenizer, settings, report);
  if (model_template) settings.hf_template = &*model_template;

  const size_t thread_count = options.threads > 0
                                  ? static_cast<size_t>(options.threads)
                                  : std::max<size_t>(1, std::thread::hardware_concurrency());
  PhaseProgress progress("prepare " + options.data_path, lines.size(), "lines");
  std::vector<LineResult> results =
      process_lines(lines, tokenizer, settings, options.invalid_utf8 == InvalidUtf8Policy::kReplace,
                    thread_count, progress);
  std::vector<size_t> document_lines;
  const std::vector<TokenizedDocument> documents =
      collect_documents(results, lines, options, settings.format, report, document_lines);
  require_documents_fit(documents, document_lines, options, report.eos_id);
  pack_and_write(documents, options, report);
  return report;
}

std::string format_report(const PrepareReport& report) {
  const PackingStats& stats = report.packing;
  const uint64_t total = stats.sequences * static_cast<uint64_t>(report.seq_len);
  std::string out = fmt::format(
      "prepared {} -> {}\n"
      "  format {}{}, seq_len {}, packing {}, eos id {}, pad id {}\n"
      "  lines {} (blank {}), examples {}, skipped lines {}\n"
      "  tokens {} (trained {}), sequences {}, split {}, truncated {}, dropped {}, "
      "padding {} ({:.2f}%)\n",
      report.data_path, report.out_path, report.format,
      report.chat_template.empty() ? "" : " (template " + report.chat_template + ")",
      report.seq_len, report.packing_mode, report.eos_id, report.pad_id, report.lines,
      report.blank_lines, report.examples, report.skipped_lines, total, stats.trained_tokens,
      stats.sequences, stats.split_documents, stats.truncated_documents, stats.dropped_documents,
      stats.padding_tokens, total == 0 ? 0.0 : 100.0 * stats.padding_tokens / total);
  for (const std::string& sample : report.skipped_samples) out += "  skipped " + sample + "\n";
  return out;
}

}  // namespace shardtrain
