// The TCP store's wire format and the socket helpers its server and client share.
//
// Every message is a frame: a 4-byte little-endian payload length, then the payload. A request
// payload is one opcode byte followed by its fields; a response payload is one status byte
// followed by its fields. Fields are strings (u32 length + bytes) or integers (8 bytes, little
// endian, two's complement). Frames larger than kMaxFrameBytes are refused by both sides, and
// a frame's buffer grows only as its bytes arrive (never to the announced length up front), so
// a corrupt or hostile peer cannot make either allocate without bound.
//
// The first frame of every connection is the handshake, kHello: the protocol magic, the
// protocol version and the run's store secret (at most kMaxHelloBytes in all). The server
// answers ok, or an error and closes the connection; it runs no other request on a connection
// before a good handshake.
//
// Socket helpers here never raise SIGPIPE (MSG_NOSIGNAL) and retry on EINTR.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace shardtrain::tcp_store_wire {

inline constexpr uint32_t kMaxFrameBytes = 64u << 20;  // 64 MiB
inline constexpr uint32_t kMaxHelloBytes = 4096;       // the handshake frame
inline constexpr size_t kMaxKeyBytes = 4096;
inline constexpr size_t kMaxValueBytes = 32u << 20;          // 32 MiB
inline constexpr int64_t kProtocolMagic = 0x31545354444853;  // "SHDTST1" little endian
inline constexpr int64_t kProtocolVersion = 1;

enum class Op : uint8_t {
  kSet = 1,         // key, value                  -> ok
  kGet = 2,         // key, timeout_ms             -> ok value | timeout
  kTryGet = 3,      // key                         -> ok found(u8-as-int) value
  kAdd = 4,         // key, delta                  -> ok result | error
  kCompareSet = 5,  // key, expected, desired      -> ok value-after
  kWait = 6,        // timeout_ms, count, keys...  -> ok | timeout missing-key
  kRemove = 7,      // key                         -> ok existed(int)
  kPing = 8,        //                             -> ok
  kHello = 9,       // magic, version, secret      -> ok | error (then closed)
};

enum class Status : uint8_t { kOk = 0, kTimeout = 1, kError = 2 };

// Appends fields to a payload.
class Writer {
 public:
  Writer& u8(uint8_t v) {
    bytes_.push_back(static_cast<char>(v));
    return *this;
  }
  Writer& i64(int64_t v);
  Writer& str(std::string_view s);
  // The payload with its length prefix, ready to send.
  std::string frame() const;
  // The payload without its length prefix.
  const std::string& payload() const { return bytes_; }

 private:
  std::string bytes_;
};

// Reads fields from a payload; every read returns nullopt when the payload is too short,
// so a malformed request is detected instead of read past its end.
class Reader {
 public:
  explicit Reader(std::string_view payload) : rest_(payload) {}
  std::optional<uint8_t> u8();
  std::optional<int64_t> i64();
  std::optional<std::string> str();

 private:
  std::string_view rest_;
};

using Clock = std::chrono::steady_clock;

// Result of reading a frame.
enum class ReadResult { kOk, kClosed, kTooLarge, kTimeout, kError };

// Writes all of `bytes`; false if the peer is gone.
bool send_all(int fd, std::string_view bytes);
// Reads one frame's payload into `payload`, waiting at most until `deadline` (nullopt: forever).
// Frames above `max_bytes` give kTooLarge without reading their payload.
ReadResult read_frame(int fd, std::string& payload, std::optional<Clock::time_point> deadline,
                      uint32_t max_bytes = kMaxFrameBytes);
// The payload length a frame header announces (REQUIRES: header.size() >= 4).
uint32_t frame_length(std::string_view header);

// "host:port", with brackets around IPv6 literals.
std::string format_endpoint(const std::string& host, int port);

// Opens a TCP connection; returns the fd, or -1 with a description of the failure in `error`.
int connect_tcp(const std::string& host, int port, std::string& error);
// Binds and listens; returns the fd and the bound port (useful when `port` is 0). `host` is
// resolved and its first address bound: only that interface. An empty host or "0.0.0.0" / "::"
// binds every interface. Throws Error naming the endpoint on failure.
int listen_tcp(const std::string& host, int port, int& bound_port);

}  // namespace shardtrain::tcp_store_wire
