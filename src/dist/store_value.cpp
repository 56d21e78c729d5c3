#include "dist/store_value.h"

#include <charconv>

#include "core/error.h"

namespace shardtrain {

int64_t parse_store_integer(const Store& store, const std::string& key, const std::string& value,
                            int64_t min_value, int64_t max_value) {
  int64_t parsed = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), parsed);
  if (ec != std::errc() || end != value.data() + value.size() || parsed < min_value ||
      parsed > max_value) {
    std::string shown = value.substr(0, 40);
    for (char& c : shown) {
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
    }
    fail(
        "store at {}: key '{}' holds '{}{}', not an integer in [{}, {}]; HINT: another program "
        "writes to this run's keys: use another --rdzv-id (and keep the store secret secret)",
        store.endpoint(), key, shown, value.size() > 40 ? "..." : "", min_value, max_value);
  }
  return parsed;
}

}  // namespace shardtrain
