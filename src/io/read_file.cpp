#include "io/read_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace shardtrain {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    fail("cannot read {} ({}); HINT: check that the file exists and is readable", path,
         std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail("reading {} failed ({}); HINT: check the disk", path, std::strerror(errno));
  return text.str();
}

bool is_special_file(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);  // follows links: /dev/zero's is a device
  return !ec && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status);
}

void refuse_special_file(const std::string& path, std::string_view subject, std::string_view hint) {
  if (is_special_file(path)) {
    fail("{}: not a regular file (a directory, device, FIFO or socket); HINT: {}", subject, hint);
  }
}

std::string read_small_file(const std::string& path, std::uintmax_t max_bytes,
                            std::string_view what) {
  refuse_special_file(path, path, fmt::format("{} must be a file", what));
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > max_bytes) {
    fail("{}: {} bytes, over the {} MiB a {} may have; HINT: is this the right file?", path, size,
         max_bytes >> 20, what);
  }
  return read_file(path);
}

}  // namespace shardtrain
