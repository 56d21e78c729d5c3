// Reading values from a Store defensively: a value is data from the network, so a malformed
// one is a one-line Error naming the key and the store, never an exception from the standard
// library (std::stoll) or an abort.
#pragma once

#include <cstdint>
#include <string>

#include "dist/store.h"

namespace shardtrain {

// `value` (the value of `key` in `store`) as a decimal int64 in [min_value, max_value].
// Throws Error naming the key and the store's endpoint otherwise.
int64_t parse_store_integer(const Store& store, const std::string& key, const std::string& value,
                            int64_t min_value = INT64_MIN, int64_t max_value = INT64_MAX);

}  // namespace shardtrain
