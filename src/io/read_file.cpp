#include "io/read_file.h"

#include <cerrno>
#include <cstring>
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

}  // namespace shardtrain
