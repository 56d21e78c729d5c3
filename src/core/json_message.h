// json_message: the user-facing part of an nlohmann::json exception's text.
//
// nlohmann's messages start with "[json.exception.parse_error.101] parse error at line 1,
// column 5: ..."; a message for a user names the file and then only the part after the bracket.
// Any other exception's what() is returned unchanged.
#pragma once

#include <exception>
#include <string>

namespace shardtrain {

std::string json_message(const std::exception& error);

}  // namespace shardtrain
