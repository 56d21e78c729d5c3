#include "obs/process_memory.h"

#include <unistd.h>

#include <fstream>

namespace shardtrain {

uint64_t process_resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size_pages = 0, resident_pages = 0;
  if (!(statm >> size_pages >> resident_pages)) return 0;
  return resident_pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace shardtrain
