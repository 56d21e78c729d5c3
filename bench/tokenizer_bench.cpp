// Tokenizer throughput on English prose, one thread (MB/s per core). A benchmark, not a test.
//
// Usage: tokenizer_bench TOKENIZER_JSON TEXT_FILE...
// Encodes the concatenated files (add_special_tokens = false) once with a fresh tokenizer (cold
// word cache) and then 3 more times (warm cache), and prints MB/s for both plus tokens/byte.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "data/tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_JSON TEXT_FILE...\n", argv[0]);
    return 2;
  }
  try {
    std::string text;
    for (int i = 2; i < argc; ++i) {
      std::ifstream in(argv[i], std::ios::binary);
      if (!in) shardtrain::fail("cannot read {}", argv[i]);
      std::stringstream content;
      content << in.rdbuf();
      text += content.str();
    }
    const auto tokenizer = shardtrain::Tokenizer::load(argv[1]);
    auto seconds_for = [&](int repeats, size_t* tokens) {
      const auto start = std::chrono::steady_clock::now();
      for (int r = 0; r < repeats; ++r) *tokens = tokenizer.encode(text, false).size();
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    size_t tokens = 0;
    const double cold = seconds_for(1, &tokens);
    const double warm = seconds_for(3, &tokens) / 3;
    const double megabytes = static_cast<double>(text.size()) / 1e6;
    std::printf("%s: %.2f MB, %zu tokens (%.3f tokens/byte); cold %.1f MB/s, warm %.1f MB/s\n",
                argv[1], megabytes, tokens, static_cast<double>(tokens) / text.size(),
                megabytes / cold, megabytes / warm);
  } catch (const shardtrain::Error& e) {
    std::fprintf(stderr, "tokenizer_bench: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
