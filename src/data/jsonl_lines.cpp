#include "data/jsonl_lines.h"

namespace shardtrain {

bool is_blank_line(std::string_view line) {
  return line.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

std::string json_error_message(const std::exception& error) {
  std::string message = error.what();
  if (message.rfind("[json.exception.", 0) == 0) {
    const size_t end = message.find("] ");
    if (end != std::string::npos) message = message.substr(end + 2);
  }
  return message;
}

}  // namespace shardtrain
