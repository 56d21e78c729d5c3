// bind_address_for: the store binds the address its endpoint resolves to, never every
// interface when that address is known.
#include "dist/bind_address.h"

#include <gtest/gtest.h>

namespace shardtrain {
namespace {

TEST(BindAddress, NumericAddressesAndLocalhostBindThemselves) {
  EXPECT_EQ(bind_address_for("10.1.2.3"), "10.1.2.3");
  EXPECT_EQ(bind_address_for("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(bind_address_for("localhost"), "127.0.0.1");
  EXPECT_EQ(bind_address_for("::1"), "::1");
  EXPECT_EQ(bind_address_for("fd00::5"), "fd00::5");
}

TEST(BindAddress, LoopbackHosts) {
  EXPECT_TRUE(is_loopback_host("localhost"));
  EXPECT_TRUE(is_loopback_host("127.0.1.1"));
  EXPECT_TRUE(is_loopback_host("::1"));
  EXPECT_FALSE(is_loopback_host("10.0.0.1"));
  EXPECT_FALSE(is_loopback_host("node0"));
}

}  // namespace
}  // namespace shardtrain
