// Reading a whole (small) file into memory: JSON manifests, state files, and the small inputs a
// user or a download hands us (config.json, tokenizer files, adapter configs, index files).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace shardtrain {

// The file's bytes. Throws Error naming the path (and the reason) when it cannot be read.
std::string read_file(const std::string& path);

// True when `path` names something that exists but is not a regular file (after links): a
// directory, a device (/dev/zero), a FIFO or a socket, which a reader must not open or read to
// its end. False for a regular file and for a missing path (the read reports that).
bool is_special_file(const std::string& path);

// Throws Error "<subject>: not a regular file (a directory, device, FIFO or socket); HINT: <hint>"
// when is_special_file(path): the one refusal of every reader that would open such a path.
void refuse_special_file(const std::string& path, std::string_view subject, std::string_view hint);

// The bytes of an input that is small by nature (`what`: "config.json", "tokenizer.json", ...).
// Refused before a byte is read, with one line naming the path: anything but a regular file
// (a FIFO nobody writes would block the read forever, /dev/zero would never end, a directory
// has no bytes) and a file over `max_bytes` (far past any genuine one: the wrong file). Then as
// read_file.
std::string read_small_file(const std::string& path, std::uintmax_t max_bytes,
                            std::string_view what);

}  // namespace shardtrain
