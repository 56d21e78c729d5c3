#include "obs/http_request.h"

#include <gtest/gtest.h>

#include <string>

namespace shardtrain {
namespace {

using Kind = HttpRequestVerdict::Kind;

TEST(HttpRequest, AcceptsWhatPrometheusSends) {
  const HttpRequestVerdict v = parse_http_request(
      "GET /metrics HTTP/1.1\r\nHost: 10.0.0.1:9400\r\nUser-Agent: Prometheus/2.45.0\r\n"
      "Accept: text/plain;version=0.0.4;q=1\r\nX-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n");
  EXPECT_EQ(v.kind, Kind::kComplete);
  EXPECT_EQ(v.path, "/metrics");
  EXPECT_FALSE(v.head_only);
  EXPECT_EQ(parse_http_request("HEAD /metrics?x=1 HTTP/1.0\n\n").head_only, true);
  EXPECT_EQ(parse_http_request("GET http://h:1/metrics HTTP/1.1\r\n\r\n").kind, Kind::kComplete);
  EXPECT_EQ(parse_http_request("GET /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").kind,
            Kind::kComplete);
}

TEST(HttpRequest, WaitsForTheWholeHead) {
  EXPECT_EQ(parse_http_request("").kind, Kind::kIncomplete);
  EXPECT_EQ(parse_http_request("GET /metrics HTTP/1.1\r\nHost: x\r\n").kind, Kind::kIncomplete);
}

TEST(HttpRequest, RefusesWithTheRightStatus) {
  const auto status = [](const std::string& text) { return parse_http_request(text).status; };
  EXPECT_EQ(status("GET / HTTP/1.1\r\n\r\n"), 404);
  EXPECT_EQ(status("GET /metricsx HTTP/1.1\r\n\r\n"), 404);
  EXPECT_EQ(status("POST /metrics HTTP/1.1\r\n\r\n"), 405);
  // A body on the GET-only endpoint is refused from the head alone: none is ever read.
  EXPECT_EQ(status("GET /metrics HTTP/1.1\r\nContent-Length: 3000000000\r\n\r\n"), 413);
  EXPECT_EQ(status("GET /metrics HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n"), 413);
  EXPECT_EQ(status("GET /metrics HTTP/2.0\r\n\r\n"), 505);
  EXPECT_EQ(status("GET  /metrics HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(status("GET /metrics HTTP/1.1\r\nno colon\r\n\r\n"), 400);
  EXPECT_EQ(status("\x16\x03\x01 TLS hello"), 400);
}

TEST(HttpRequest, BoundsTheHeadAndTheHeaderCount) {
  std::string many = "GET /metrics HTTP/1.1\r\n";
  for (int i = 0; i < 65; ++i) many += "X-" + std::to_string(i) + ": y\r\n";
  EXPECT_EQ(parse_http_request(many + "\r\n").status, 431);
  // ~180k headers never arrive whole: the refusal comes once 8 KiB are in, without a blank line.
  std::string endless = "GET /metrics HTTP/1.1\r\n";
  while (endless.size() < kMaxRequestHeadBytes + 100) endless += "A: b\r\n";
  const HttpRequestVerdict v = parse_http_request(endless);
  EXPECT_EQ(v.kind, Kind::kRefused);
  EXPECT_EQ(v.status, 431);
  EXPECT_EQ(parse_http_request("GET /" + std::string(9000, 'a')).status, 431);
}

}  // namespace
}  // namespace shardtrain
