#include "dist/tcp_store_requests.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace shardtrain {

using namespace tcp_store_wire;

namespace {

// get/wait timeouts beyond this are clamped, so deadline arithmetic cannot overflow.
constexpr int64_t kMaxTimeoutMs = int64_t{30} * 24 * 3600 * 1000;

std::optional<std::string> bounded_str(Reader& in, size_t max_bytes) {
  std::optional<std::string> s = in.str();
  if (s && s->size() > max_bytes) return std::nullopt;
  return s;
}

// Reads the fields of `op` into `r`; false when the payload is short or a field is too long.
bool read_fields(Op op, Reader& in, StoreRequest& r) {
  const auto key = [&] {
    auto k = bounded_str(in, kMaxKeyBytes);
    if (k) r.key = std::move(*k);
    return k.has_value();
  };
  const auto value = [&](std::string& out) {
    auto v = bounded_str(in, kMaxValueBytes);
    if (v) out = std::move(*v);
    return v.has_value();
  };
  const auto number = [&](int64_t& out) {
    auto n = in.i64();
    if (n) out = *n;
    return n.has_value();
  };
  switch (op) {
    case Op::kSet:
      return key() && value(r.value);
    case Op::kGet:
      return key() && number(r.number);
    case Op::kTryGet:
    case Op::kRemove:
      return key();
    case Op::kAdd:
      return key() && number(r.number);
    case Op::kCompareSet:
      return key() && value(r.value) && value(r.desired);
    case Op::kWait: {
      int64_t count = 0;
      if (!number(r.number) || !number(count) || count < 0) return false;
      for (int64_t i = 0; i < count; ++i) {
        if (!key()) return false;
        r.keys.push_back(std::move(r.key));
      }
      return true;
    }
    case Op::kPing:
      return true;
    case Op::kHello: {
      if (!number(r.magic) || !number(r.version)) return false;
      auto secret = bounded_str(in, kMaxHelloBytes);
      if (!secret) return false;
      r.secret = std::move(*secret);
      return true;
    }
  }
  return false;
}

}  // namespace

std::variant<StoreRequest, std::string> parse_store_request(std::string_view payload) {
  Reader in(payload);
  const std::optional<uint8_t> op = in.u8();
  if (!op) return std::string("malformed request: empty");
  if (*op < static_cast<uint8_t>(Op::kSet) || *op > static_cast<uint8_t>(Op::kHello)) {
    return fmt::format("unknown store operation {}", *op);
  }
  StoreRequest request;
  request.op = static_cast<Op>(*op);
  if (!read_fields(request.op, in, request)) {
    return fmt::format(
        "malformed request (operation {}): a field is short or over its limit "
        "(keys {} bytes, values {} bytes)",
        *op, kMaxKeyBytes, kMaxValueBytes);
  }
  request.number = request.op == Op::kGet || request.op == Op::kWait
                       ? std::clamp<int64_t>(request.number, 0, kMaxTimeoutMs)
                       : request.number;
  return request;
}

std::string ok_response() { return std::string(1, static_cast<char>(Status::kOk)); }

std::string error_response(std::string_view detail) {
  Writer w;
  w.str(detail);
  return std::string(1, static_cast<char>(Status::kError)) + w.payload();
}

std::string timeout_response(std::string_view missing_key) {
  Writer w;
  w.str(missing_key);
  return std::string(1, static_cast<char>(Status::kTimeout)) + w.payload();
}

std::optional<std::string> StoreData::first_missing(const std::vector<std::string>& keys) const {
  for (const std::string& k : keys) {
    if (data_.find(k) == data_.end()) return k;
  }
  return std::nullopt;
}

std::string StoreData::put(const std::string& key, const std::string& value) {
  const auto it = data_.find(key);
  const size_t old_bytes = it == data_.end() ? 0 : key.size() + it->second.size();
  const size_t new_total = total_bytes_ - old_bytes + key.size() + value.size();
  if (new_total > max_total_bytes_) {
    return error_response(
        fmt::format("the store is full: key '{}' would bring it to {} bytes, over its limit of {}",
                    key, new_total, max_total_bytes_));
  }
  data_[key] = value;
  total_bytes_ = new_total;
  return "";
}

std::string StoreData::add(const StoreRequest& request, bool& changed) {
  int64_t current = 0;
  if (const auto it = data_.find(request.key); it != data_.end()) {
    const std::string& text = it->second;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), current);
    if (ec != std::errc() || end != text.data() + text.size()) {
      return error_response(
          fmt::format("add on key '{}' whose value is not an integer", request.key));
    }
  }
  int64_t result = 0;
  if (__builtin_add_overflow(current, request.number, &result)) {
    return error_response(fmt::format("add of {} to key '{}' (= {}) would overflow int64",
                                      request.number, request.key, current));
  }
  if (std::string refused = put(request.key, std::to_string(result)); !refused.empty()) {
    return refused;
  }
  changed = true;
  Writer w;
  w.i64(result);
  return ok_response() + w.payload();
}

std::optional<std::string> StoreData::run(const StoreRequest& request, bool& changed) {
  switch (request.op) {
    case Op::kSet: {
      if (std::string refused = put(request.key, request.value); !refused.empty()) return refused;
      changed = true;
      return ok_response();
    }
    case Op::kGet: {
      const auto it = data_.find(request.key);
      if (it == data_.end()) return std::nullopt;
      Writer w;
      w.str(it->second);
      return ok_response() + w.payload();
    }
    case Op::kTryGet: {
      const auto it = data_.find(request.key);
      Writer w;
      w.i64(it != data_.end() ? 1 : 0).str(it != data_.end() ? it->second : std::string());
      return ok_response() + w.payload();
    }
    case Op::kAdd:
      return add(request, changed);
    case Op::kCompareSet: {
      const auto it = data_.find(request.key);
      const bool matches = it == data_.end() ? request.value.empty() : it->second == request.value;
      if (matches) {
        if (std::string refused = put(request.key, request.desired); !refused.empty()) {
          return refused;
        }
        changed = true;
      }
      Writer w;
      w.str(data_.count(request.key) ? data_.at(request.key) : std::string());
      return ok_response() + w.payload();
    }
    case Op::kWait:
      if (first_missing(request.keys)) return std::nullopt;
      return ok_response();
    case Op::kRemove: {
      const auto it = data_.find(request.key);
      const bool existed = it != data_.end();
      if (existed) {
        total_bytes_ -= it->first.size() + it->second.size();
        data_.erase(it);
        changed = true;
      }
      Writer w;
      w.i64(existed ? 1 : 0);
      return ok_response() + w.payload();
    }
    case Op::kPing:
    case Op::kHello:
      return ok_response();
  }
  return error_response("unknown store operation");
}

}  // namespace shardtrain
