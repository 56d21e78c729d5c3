// prepare: a JSONL dataset -> a packed token file (data/token_file.h) ready for training.
//
//   lines --(parse, render: data/formats.h)--> documents --(tokenize, on all cores)-->
//   ids + loss masks --(pack: data/packing.h)--> seq_len sequences --> token file (atomic write)
//
// Tokenization runs on `threads` std::threads that claim chunks of lines; results are kept per
// line and assembled in input order, so the output depends only on the input, the tokenizer
// files and the settings, never on the thread count.
//
// Per-line problems (not JSON, not an object, missing fields, wrong types, empty text, unknown
// chat roles, invalid UTF-8 under invalid_utf8 = fail) make a "bad line": with on_bad_line =
// fail, prepare_dataset throws Error "FILE:LINE: what is wrong; what to do" for the first bad
// line in file order; with skip, bad lines are counted and left out. Blank lines are ignored.
// invalid_utf8 = replace turns each invalid byte sequence into U+FFFD before parsing.
// Whole-dataset problems also throw Error naming the file: unreadable or empty file, a format
// that cannot be detected from the first JSON object's keys, no usable example, a tokenizer the
// chat template does not fit, an unknown EOS token.
//
// EOS (the separator packing appends) is options.eos_token if set, else tokenizer_config.json's
// eos_token, else the first of <|endoftext|>, <|end_of_text|>, </s> the vocabulary has. Padding
// uses tokenizer_config.json's pad_token when the vocabulary has it, else EOS (masked out either
// way).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/choice_names.h"
#include "data/chat_template.h"
#include "data/formats.h"
#include "data/packing.h"
#include "data/packing_mode.h"

namespace shardtrain {

// data.on_bad_line, prepare --on-bad-line: a malformed line fails the run, or is skipped and
// counted.
enum class BadLinePolicy { kFail, kSkip };
const ChoiceNames<BadLinePolicy>& bad_line_policy_names();  // fail, skip
// data.invalid_utf8, prepare --invalid-utf8: invalid UTF-8 fails, or each invalid byte
// sequence becomes U+FFFD.
enum class InvalidUtf8Policy { kFail, kReplace };
const ChoiceNames<InvalidUtf8Policy>& invalid_utf8_policy_names();  // fail, replace

struct PrepareOptions {
  std::string tokenizer_path;  // tokenizer.json, or a directory containing it
  std::string data_path;       // JSONL input
  std::string out_path;        // token file to write (prepare_dataset only)
  int64_t seq_len = 512;       // must equal the training data.seq_len
  ExampleFormatChoice format;  // nullopt = auto: by the first line's keys
  // auto: the model's own chat template when the tokenizer has one, else the built-in family
  // template; model: the model's own (an Error without one); chatml | llama2 | llama3: built-in.
  ChatTemplateChoice chat_template = ChatTemplateChoice::kAuto;
  OverlongPolicy overlong = OverlongPolicy::kSplit;
  // documents | concatenate: best-fit packing (the token file records the documents either
  // way); none: one document per sequence, and a longer one is an Error under overlong split.
  PackingMode packing = PackingMode::kDocuments;
  BadLinePolicy on_bad_line = BadLinePolicy::kFail;
  InvalidUtf8Policy invalid_utf8 = InvalidUtf8Policy::kFail;
  bool train_on_prompt = false;
  bool train_on_eos = true;  // model's template: also train each assistant turn's end marker
  uint64_t seed = 0;
  std::string eos_token;  // "" = from tokenizer_config.json
  int64_t threads = 0;    // 0 = all cores; does not change the output
};

// Throws Error naming the option for seq_len outside [2, data_limits::kMaxSeqLen] / threads < 0
// or > 1024 (choices are enums: parsed where the flag or key was read).
// Under packing none with overlong split, a document longer than seq_len is an Error naming
// FILE:LINE (split pieces would be sequences of one document each, not what none promises).
void validate_prepare_options(const PrepareOptions& options);

struct PrepareReport {
  std::string data_path;
  std::string out_path;
  std::string format;         // resolved format name
  std::string chat_template;  // which template rendered the chats; "" unless format is chat
  std::string packing_mode;   // documents | concatenate | none
  int64_t seq_len = 0;
  int32_t eos_id = 0;
  int32_t pad_id = 0;
  uint64_t lines = 0;  // lines read, blank ones included
  uint64_t blank_lines = 0;
  uint64_t examples = 0;  // lines that became documents
  uint64_t skipped_lines = 0;
  std::vector<std::string> skipped_samples;  // "FILE:LINE: reason" of the first few skips
  PackingStats packing;
};

// Prepares options.data_path into options.out_path and returns what happened. A long
// tokenization logs its progress with an ETA (obs/phase_progress.h).
PrepareReport prepare_dataset(const PrepareOptions& options);

// The report as a few human-readable lines (ending in '\n').
std::string format_report(const PrepareReport& report);

}  // namespace shardtrain
