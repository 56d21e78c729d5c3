#include "dist/nccl_unique_id.h"

#if defined(SHARDTRAIN_WITH_NCCL)

#include <chrono>

#include "core/error.h"

namespace shardtrain {
namespace {

std::string hex_encode(const void* data, size_t bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text;
  for (size_t i = 0; i < bytes; ++i) {
    const unsigned char byte = static_cast<const unsigned char*>(data)[i];
    text += kDigits[byte >> 4];
    text += kDigits[byte & 15];
  }
  return text;
}

bool hex_decode(const std::string& text, void* data, size_t bytes) {
  if (text.size() != 2 * bytes) return false;
  const auto digit = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < bytes; ++i) {
    const int high = digit(text[2 * i]), low = digit(text[2 * i + 1]);
    if (high < 0 || low < 0) return false;
    static_cast<unsigned char*>(data)[i] = static_cast<unsigned char>(high * 16 + low);
  }
  return true;
}

}  // namespace

ncclUniqueId exchange_nccl_unique_id(Store& store, int rank, const std::string& prefix,
                                     const JoinRoll& roll, Store::Duration timeout) {
  const std::string id_key = prefix + "/nccl/unique_id";
  ncclUniqueId id;
  if (rank == 0) {
    const ncclResult_t status = ncclGetUniqueId(&id);
    if (status != ncclSuccess) {
      fail(
          "NCCL could not create its unique id on rank 0: {} ({}); HINT: check that a network "
          "interface is up (NCCL_SOCKET_IFNAME selects one)",
          ncclGetErrorString(status), ncclGetLastError(nullptr));
    }
    store.set(id_key, hex_encode(&id, sizeof(id)));
  } else {
    std::string text;
    try {
      text = store.get(id_key, timeout);
    } catch (const Error&) {
      const std::string missing = roll.describe_missing();
      if (missing.empty()) throw;
      fail("NCCL: rank {}: {} the group within {:g} s (store {}, prefix '{}'); HINT: {}", rank,
           missing, std::chrono::duration<double>(timeout).count(), store.endpoint(), prefix,
           kJoinHint);
    }
    if (!hex_decode(text, &id, sizeof(id))) {
      fail(
          "malformed NCCL unique id under '{}' in {}; HINT: another job may share this "
          "store: use a fresh MASTER_PORT or SHARDTRAIN_STORE_DIR",
          id_key, store.endpoint());
    }
  }
  return id;
}

}  // namespace shardtrain

#endif
