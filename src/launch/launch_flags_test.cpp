// The launcher's count flags (resolve_launch_config): out-of-range or malformed values end in one
// line naming the flag (or its PET_* variable) and the accepted range; in particular more workers
// per node than the rendezvous accepts, which before failed later as "another program uses this
// run id" when the agent read its own rendezvous state back.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>

#include "core/error.h"
#include "launch/launch_config.h"

namespace shardtrain::launch {
namespace {

LaunchFlags standalone_true() {
  LaunchFlags flags;
  flags.standalone = true;
  flags.no_python = true;
  flags.command = {"/bin/true"};
  return flags;
}

std::string error_of(const LaunchFlags& flags,
                     const std::map<std::string, std::string>& vars = {}) {
  const EnvLookup env = [&](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
  try {
    resolve_launch_config(flags, env);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(LaunchFlags, WorkersPerNodeWithinWhatTheRendezvousAccepts) {
  LaunchFlags flags = standalone_true();
  flags.nproc_per_node = "65536";
  EXPECT_EQ(error_of(flags), "");
  flags.nproc_per_node = "65537";
  EXPECT_EQ(error_of(flags),
            "--nproc-per-node '65537': expected a process count or auto (an integer in [1, "
            "65536])");
  for (const char* bad : {"0", "-2", "many", "1e3", "99999999999999999999"}) {
    flags.nproc_per_node = bad;
    const std::string message = error_of(flags);
    EXPECT_NE(message.find(std::string("--nproc-per-node '") + bad + "'"), std::string::npos)
        << bad << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  flags.nproc_per_node.reset();
  EXPECT_NE(error_of(flags, {{"PET_NPROC_PER_NODE", "100000"}}).find("PET_NPROC_PER_NODE"),
            std::string::npos);
}

TEST(LaunchFlags, NodeAndRestartCountsNameTheFlag) {
  LaunchFlags flags = standalone_true();
  flags.max_restarts = "-1";
  EXPECT_EQ(error_of(flags),
            "--max-restarts '-1': expected a restart count (an integer in [0, 1000000])");
  flags.max_restarts.reset();
  flags.standalone = false;
  for (const char* bad : {"0", "3:2", "1:", "x"}) {
    flags.nnodes = bad;
    EXPECT_NE(error_of(flags).find(std::string("--nnodes '") + bad + "'"), std::string::npos)
        << bad;
  }
}

}  // namespace
}  // namespace shardtrain::launch
