// The NCCL unique id exchange through a FileStore, no GPU needed: the id as rank 0 published it,
// a value that is not one, and a rank 0 that never came (named, after the timeout given).
#include "dist/nccl_unique_id.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/testing/test_support.h"
#include "dist/file_store.h"

namespace shardtrain {
namespace {

#if defined(SHARDTRAIN_WITH_NCCL)

using namespace std::chrono_literals;

std::string error_of(Store& store, int rank, const JoinRoll& roll) {
  try {
    exchange_nccl_unique_id(store, rank, "group", roll, 300ms);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(NcclUniqueIdTest, ReadsWhatRankZeroPublished) {
  testing::TempDir dir("shardtrain_nccl_id_");
  FileStore store(dir.path());
  JoinRoll roll(store, "group/nccl", 2);
  std::string hex;
  for (size_t i = 0; i < sizeof(ncclUniqueId); ++i) hex += "a5";
  store.set("group/nccl/unique_id", hex);
  const ncclUniqueId id = exchange_nccl_unique_id(store, 1, "group", roll, 300ms);
  for (size_t i = 0; i < sizeof(id.internal); ++i) {
    ASSERT_EQ(static_cast<unsigned char>(id.internal[i]), 0xa5) << i;
  }
  store.set("group/nccl/unique_id", "not hex");
  EXPECT_NE(error_of(store, 1, roll).find("malformed NCCL unique id under 'group/nccl/unique_id'"),
            std::string::npos);
}

TEST(NcclUniqueIdTest, ARankZeroThatNeverCameIsNamed) {
  testing::TempDir dir("shardtrain_nccl_id_");
  FileStore store(dir.path());
  JoinRoll roll(store, "group/nccl", 3);
  roll.mark(1);
  roll.mark(2);
  const std::string error = error_of(store, 1, roll);
  EXPECT_NE(error.find("NCCL: rank 1: rank 0 did not join the group within 0.3 s"),
            std::string::npos)
      << error;
  // Rank 0 came but published nothing: the store's own timeout, which names the key.
  roll.mark(0);
  EXPECT_NE(error_of(store, 2, roll).find("group/nccl/unique_id"), std::string::npos);
}

#else

TEST(NcclUniqueIdTest, ReadsWhatRankZeroPublished) {
  GTEST_SKIP() << "built without NCCL: the unique id exchange is not compiled";
}

#endif

}  // namespace
}  // namespace shardtrain
