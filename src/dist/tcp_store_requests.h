// The TCP store's requests and the key-value map they act on, without sockets: what the
// server (dist/tcp_store_server.cpp) runs for each frame, and what the store-protocol fuzzer
// (tests/fuzz/) feeds arbitrary bytes.
//
// parse_store_request turns a request payload (tcp_store_wire.h) into a StoreRequest, or an
// error text for a malformed one (short fields, unknown opcode, a key over kMaxKeyBytes, a value
// over kMaxValueBytes). StoreData::run executes one; a get or wait whose keys are not all there
// yet is not answered (nullopt): the server keeps it pending and calls run again when the data
// changes, or answers timeout_response at its deadline. Every answer is a response payload.
//
// Limits that keep a client from exhausting the server: the map's keys and values together stay
// within max_total_bytes (a set or compare_set beyond it is refused), and an add whose result
// would leave the int64 range is refused (nothing is changed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "dist/tcp_store_wire.h"

namespace shardtrain {

struct StoreRequest {
  tcp_store_wire::Op op = tcp_store_wire::Op::kPing;
  std::string key;                // set, get, try_get, add, compare_set, remove
  std::string value;              // set: the value; compare_set: the expected value
  std::string desired;            // compare_set
  int64_t number = 0;             // add: delta; get/wait: timeout in ms (clamped to [0, 30 d])
  std::vector<std::string> keys;  // wait
  // kHello
  int64_t magic = 0, version = 0;
  std::string secret;
};

// A StoreRequest, or the text of what is wrong with the payload.
std::variant<StoreRequest, std::string> parse_store_request(std::string_view payload);

// Response payloads.
std::string ok_response();
std::string error_response(std::string_view detail);
std::string timeout_response(std::string_view missing_key);

class StoreData {
 public:
  explicit StoreData(size_t max_total_bytes) : max_total_bytes_(max_total_bytes) {}

  // The response to `request`, or nullopt for a get/wait still waiting for a key. A kHello or
  // kPing is answered ok (the server handles the handshake itself). Sets `changed` when the
  // map changed (pending requests may now be answerable).
  std::optional<std::string> run(const StoreRequest& request, bool& changed);
  // The first of `keys` that is absent, or nullopt when all exist.
  std::optional<std::string> first_missing(const std::vector<std::string>& keys) const;
  size_t total_bytes() const { return total_bytes_; }

 private:
  std::string put(const std::string& key, const std::string& value);  // "" or an error payload
  std::string add(const StoreRequest& request, bool& changed);

  std::map<std::string, std::string> data_;
  size_t total_bytes_ = 0;  // sum of key and value sizes
  size_t max_total_bytes_;
};

}  // namespace shardtrain
