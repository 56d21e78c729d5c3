#include "core/error.h"

#include <cstdio>
#include <cstdlib>

namespace shardtrain {

void check_failed(const char* file, int line, const char* condition, const std::string& detail) {
  std::fprintf(stderr, "shardtrain: internal error at %s:%d: check failed: %s %s\n", file, line,
               condition, detail.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace shardtrain
