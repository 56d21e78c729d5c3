// host_name and require_host_resolves: this machine's name resolves (every multi-node test relies
// on it); a name that cannot resolve (RFC 2606 reserves .invalid) is a one-line Error naming it
// and what to do, not a crash inside Gloo.
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

}  // namespace
}  // namespace shardtrain
