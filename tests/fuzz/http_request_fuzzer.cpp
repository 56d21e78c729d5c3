// libFuzzer target: the /metrics endpoint's request parser (obs/http_request.h) on arbitrary
// bytes, fed whole and then in growing prefixes as a socket would deliver them. Checks the
// contract: a verdict for every input, a refusal always carrying a status and a reason, a
// complete request always for /metrics, and a head over the limit never left waiting.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "obs/http_request.h"

namespace {

void check(std::string_view received) {
  using Kind = shardtrain::HttpRequestVerdict::Kind;
  const shardtrain::HttpRequestVerdict verdict = shardtrain::parse_http_request(received);
  if (verdict.kind == Kind::kRefused && (verdict.status < 400 || verdict.reason.empty())) {
    std::abort();
  }
  if (verdict.kind == Kind::kComplete && verdict.path != "/metrics") std::abort();
  if (verdict.kind == Kind::kIncomplete && received.size() > shardtrain::kMaxRequestHeadBytes + 4) {
    std::abort();  // the connection would keep reading past its bound
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view received(reinterpret_cast<const char*>(data), size);
  check(received);
  for (size_t prefix = 1; prefix < size; prefix += 1 + prefix / 4)
    check(received.substr(0, prefix));
  return 0;
}
