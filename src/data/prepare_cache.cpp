#include "data/prepare_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "data/packing_mode.h"
#include "data/token_file.h"
#include "data/tokenizer_files.h"
#include "io/atomic_file.h"
#include "io/file_lock.h"
#include "io/file_lock.h"
#include "io/read_file.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

// v2: token files record their documents (version 3), so v1 files are prepared again.
constexpr const char* kCacheLayoutVersion = "shardtrain-prepare-cache-v2";

class Fnv1a {
 public:
  void add(std::string_view bytes) {
    for (const char c : bytes) {
      hash_ ^= static_cast<unsigned char>(c);
      hash_ *= 0x100000001b3ull;
    }
    // A field separator that cannot be confused with content of another length.
    const uint64_t length = bytes.size();
    for (int shift = 0; shift < 64; shift += 8) {
      hash_ ^= (length >> shift) & 0xff;
      hash_ *= 0x100000001b3ull;
    }
  }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ull;
};

bool is_valid_token_file(const std::string& path) {
  std::error_code ignored;
  if (!fs::is_regular_file(path, ignored)) return false;
  try {
    TokenFile file(path);
    return true;
  } catch (const Error& error) {
    log::warn("data cache: ignoring {} ({}); preparing it again", path, error.what());
    return false;
  }
}

// documents and concatenate write the same file (they differ only in how it is read), so they
// share a cache entry; none packs differently.
std::string packing_layout(PackingMode packing) {
  return packing == PackingMode::kNone ? "one-per-sequence" : "best-fit";
}

}  // namespace

std::string prepare_cache_key(const PrepareOptions& options) {
  validate_prepare_options(options);
  std::error_code error;
  const fs::path data = fs::absolute(options.data_path, error);
  const uintmax_t size = fs::file_size(data, error);
  if (error) {
    fail("{}: cannot read the dataset ({}); check the data path", options.data_path,
         error.message());
  }
  const auto mtime = fs::last_write_time(data, error).time_since_epoch();
  const TokenizerFiles files = locate_tokenizer(options.tokenizer_path);

  Fnv1a hash;
  hash.add(kCacheLayoutVersion);
  hash.add(data.string());
  hash.add(std::to_string(size));
  hash.add(std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(mtime).count()));
  hash.add(read_file(files.tokenizer_json));
  hash.add(files.config_json.empty() ? "" : read_file(files.config_json));
  hash.add(files.chat_template);  // also covers chat_template.jinja
  for (const std::string& setting :
       {std::to_string(options.seq_len), choice_name(example_format_choice_names(), options.format),
        choice_name(chat_template_choice_names(), options.chat_template),
        choice_name(overlong_policy_names(), options.overlong),
        choice_name(bad_line_policy_names(), options.on_bad_line),
        choice_name(invalid_utf8_policy_names(), options.invalid_utf8),
        std::string(options.train_on_prompt ? "1" : "0"),
        std::string(options.train_on_eos ? "eos1" : "eos0"), std::to_string(options.seed),
        options.eos_token, packing_layout(options.packing)}) {
    hash.add(setting);
  }
  return fmt::format("{:016x}", hash.value());
}

std::string prepare_cached(const PrepareOptions& options, const std::string& cache_dir) {
  const std::string key = prepare_cache_key(options);
  std::error_code error;
  fs::create_directories(cache_dir, error);
  if (error) {
    fail("data cache {}: cannot create the directory ({}); set another cache directory", cache_dir,
         error.message());
  }
  const std::string path = (fs::path(cache_dir) / (key + ".bin")).string();
  if (is_valid_token_file(path)) {
    log::info("data: reusing {} (prepared from {})", path, options.data_path);
    return path;
  }
  const FileLock lock((fs::path(cache_dir) / (key + ".lock")).string(),
                      "check that the data cache directory (data.cache_dir) is writable");
  if (is_valid_token_file(path)) {  // another process prepared it while we waited
    log::info("data: reusing {} (prepared from {})", path, options.data_path);
    return path;
  }
  PrepareOptions cached = options;
  cached.out_path = path;
  const std::string report = format_report(prepare_dataset(cached));
  AtomicFileWriter report_file((fs::path(cache_dir) / (key + ".report.txt")).string());
  report_file.write(report.data(), report.size());
  report_file.commit();
  log::info("data: {}", report);
  return path;
}

}  // namespace shardtrain
