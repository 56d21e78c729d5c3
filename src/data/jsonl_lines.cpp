#include "data/jsonl_lines.h"

namespace shardtrain {

bool is_blank_line(std::string_view line) {
  return line.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

}  // namespace shardtrain
