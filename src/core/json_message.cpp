#include "core/json_message.h"

namespace shardtrain {

std::string json_message(const std::exception& error) {
  std::string message = error.what();
  if (message.rfind("[json.exception.", 0) == 0) {
    const size_t end = message.find("] ");
    if (end != std::string::npos) message = message.substr(end + 2);
  }
  return message;
}

}  // namespace shardtrain
