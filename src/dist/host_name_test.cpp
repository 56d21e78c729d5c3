// host_name, resolve_host and require_host_resolves: this machine's name resolves (every
// multi-node test relies on it); resolve_host tells an address other nodes can reach from
// loopback and link-local ones; a name that cannot resolve (RFC 2606 reserves .invalid) is a
// one-line Error naming it and what to do, not a crash inside Gloo.
#include "dist/host_name.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace shardtrain {
namespace {

TEST(HostName, ThisHostResolves) {
  const std::string name = host_name();
  ASSERT_FALSE(name.empty());
  EXPECT_NO_THROW(require_host_resolves(name)) << name;
  EXPECT_NO_THROW(require_host_resolves("localhost"));
}

TEST(HostName, AnUnresolvableNameIsAnErrorWithAHint) {
  try {
    require_host_resolves("no-such-node.invalid");
    FAIL() << "no-such-node.invalid resolved";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'no-such-node.invalid' does not resolve"), std::string::npos)
        << message;
    EXPECT_NE(message.find("HINT: add it to /etc/hosts"), std::string::npos) << message;
  }
}

TEST(HostName, ResolutionTellsRoutableFromLoopbackAndUnresolved) {
  // Numeric names resolve without DNS, so these hold on any machine.
  const HostResolution routable = resolve_host("10.11.12.13");
  EXPECT_TRUE(routable.resolved);
  EXPECT_EQ(routable.routable, "10.11.12.13");
  const HostResolution loopback = resolve_host("127.0.1.1");
  EXPECT_TRUE(loopback.resolved);
  EXPECT_EQ(loopback.routable, "");
  EXPECT_EQ(resolve_host("::1").routable, "");
  EXPECT_EQ(resolve_host("fe80::1").routable, "");  // link-local: not for other nodes
  const HostResolution none = resolve_host("no-such-node.invalid");
  EXPECT_FALSE(none.resolved);
  EXPECT_FALSE(none.error.empty());
  EXPECT_FALSE(resolve_host("").resolved);
}

}  // namespace
}  // namespace shardtrain
