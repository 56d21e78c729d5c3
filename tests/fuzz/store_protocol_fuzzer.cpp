// libFuzzer target: the TCP store's wire protocol on the server side. The input is cut into
// frames as the server cuts its byte stream (4-byte length, payload; a length past the end
// takes what is left), each parsed (parse_store_request) and run against one StoreData with a
// small size cap, exactly as the server loop does after the handshake. Nothing may crash or
// throw, and the cap must hold.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <variant>

#include "dist/tcp_store_requests.h"
#include "dist/tcp_store_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr size_t kCap = 4096;
  shardtrain::StoreData store(kCap);
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  while (rest.size() >= 4) {
    const size_t length =
        std::min<size_t>(shardtrain::tcp_store_wire::frame_length(rest), rest.size() - 4);
    const std::string_view payload = rest.substr(4, length);
    rest.remove_prefix(4 + length);
    auto parsed = shardtrain::parse_store_request(payload);
    if (const auto* request = std::get_if<shardtrain::StoreRequest>(&parsed)) {
      bool changed = false;
      store.run(*request, changed);
      if (request->op == shardtrain::tcp_store_wire::Op::kWait) store.first_missing(request->keys);
    }
    if (store.total_bytes() > kCap) std::abort();
  }
  return 0;
}
