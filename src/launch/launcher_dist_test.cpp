// `shardtrain launch` end to end: real agents and worker processes over loopback. Workers are
// /bin/sh scripts (a worker command containing '/' is run as an executable), so these tests
// exercise the launcher alone: worker environment, rank-prefixed output, failure, restart,
// cleanup, two-node rendezvous, PET_* variables and bad flags.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dist/tcp_store.h"
#include "launch/testing/launch_test_support.h"

namespace {

namespace fs = std::filesystem;
using shardtrain::testing::kBinary;

// A command's result and how long it ran.
struct Result : shardtrain::testing::CommandResult {
  double seconds = 0;
  bool has_line(const std::string& line) const {
    for (const auto& l : lines())
      if (l == line) return true;
    return false;
  }
};

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs `env_prefix shardtrain args` (killed after 25 s, so a hang fails instead of blocking),
// with the tests' store secret in PET_RDZV_TOKEN unless env_prefix sets it.
Result run(const std::string& args, const std::string& env_prefix = "") {
  const auto start = std::chrono::steady_clock::now();
  shardtrain::testing::CommandResult result = shardtrain::testing::run_command(
      shardtrain::testing::kTestStoreToken + " " + env_prefix + " timeout -s KILL 25 " + kBinary +
      " " + args + " </dev/null");
  return {std::move(result),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

// A loopback port that was free a moment ago.
int free_port() {
  shardtrain::TcpStoreServer probe("127.0.0.1", 0, "port-probe-secret-0123");
  return probe.port();
}

class LauncherTest : public shardtrain::testing::TempDirTest {
 protected:
  // Every pid listed (one per line) in `file`.
  std::vector<pid_t> pids_in(const std::string& file) {
    std::vector<pid_t> out;
    std::ifstream in(dir_ / file);
    for (pid_t pid; in >> pid;) out.push_back(pid);
    return out;
  }
  void expect_all_gone(const std::vector<pid_t>& pids) {
    for (pid_t pid : pids) EXPECT_NE(::kill(pid, 0), 0) << "process " << pid << " still exists";
  }
};

TEST_F(LauncherTest, FourWorkersGetTheTorchrunEnvironment) {
  const std::string script =
      "echo env $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $GROUP_WORLD_SIZE "
      "$ROLE_RANK $MASTER_ADDR $TORCHELASTIC_RESTART_COUNT $SHARDTRAIN_RESTART_COUNT "
      "$OMP_NUM_THREADS; echo port $MASTER_PORT; echo run $SHARDTRAIN_RUN_ID";
  const Result r = run("launch --standalone --nproc-per-node 4 -- /bin/sh -c " + quote(script));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::set<std::string> ports, run_ids;
  for (int rank = 0; rank < 4; ++rank) {
    const std::string p = "[rank " + std::to_string(rank) + "] ";
    EXPECT_TRUE(r.has_line(p + "env " + std::to_string(rank) + " " + std::to_string(rank) +
                           " 4 4 0 1 " + std::to_string(rank) + " 127.0.0.1 0 0 1"))
        << r.output;
    for (const auto& line : r.lines()) {
      if (line.rfind(p + "port ", 0) == 0) ports.insert(line.substr(p.size() + 5));
      if (line.rfind(p + "run ", 0) == 0) run_ids.insert(line.substr(p.size() + 4));
    }
  }
  ASSERT_EQ(ports.size(), 1u) << r.output;  // every worker sees the same store
  EXPECT_GT(std::stoi(*ports.begin()), 0);
  ASSERT_EQ(run_ids.size(), 1u) << r.output;
  EXPECT_FALSE(run_ids.begin()->empty());
}

// The store secret reaches the workers (and only through the environment); without one given,
// each one-node run generates its own, and its run id is random too (not torchrun's "none").
TEST_F(LauncherTest, WorkersGetTheRunSecretAndAnUnguessableRunId) {
  const std::string script = "echo secret $SHARDTRAIN_STORE_SECRET run $SHARDTRAIN_RUN_ID";
  const auto seen = [&](const std::string& env) {
    const Result r = run("launch --standalone -- /bin/sh -c " + quote(script), env);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    for (const auto& line : r.lines()) {
      if (line.rfind("[rank 0] secret ", 0) == 0) return line.substr(16);
    }
    ADD_FAILURE() << r.output;
    return std::string();
  };
  const std::string a = seen("PET_RDZV_TOKEN="), b = seen("PET_RDZV_TOKEN=");
  const std::regex generated(R"(^[0-9a-f]{64} run run-[0-9a-f]{16}$)");
  EXPECT_TRUE(std::regex_match(a, generated)) << a;
  EXPECT_TRUE(std::regex_match(b, generated)) << b;
  EXPECT_NE(a.substr(0, 64), b.substr(0, 64));
  EXPECT_NE(a.substr(65), b.substr(65));
  EXPECT_EQ(seen("PET_RDZV_TOKEN=given-secret-0123456789").substr(0, 27),
            "given-secret-0123456789 run");
  // The Kubernetes manifests fill SHARDTRAIN_STORE_SECRET from a Secret (launch/k8s/).
  EXPECT_EQ(seen("PET_RDZV_TOKEN= SHARDTRAIN_STORE_SECRET=k8s-secret-0123456789").substr(0, 24),
            "k8s-secret-0123456789 ru");
  const Result multi_k8s =
      run("launch --nnodes 2 --node-rank 1 --rdzv-endpoint 127.0.0.1:1 --rdzv-conf "
          "join_timeout=1 -- true",
          "PET_RDZV_TOKEN= SHARDTRAIN_STORE_SECRET=k8s-secret-0123456789");
  EXPECT_EQ(multi_k8s.output.find("--rdzv-conf token=SECRET"), std::string::npos)
      << "a secret from the pod's Secret is enough across nodes: " << multi_k8s.output;
  EXPECT_NE(multi_k8s.output.find("could not connect to the store at 127.0.0.1:1"),
            std::string::npos)
      << multi_k8s.output;

  const Result multi =
      run("launch --nnodes 2 --node-rank 0 --rdzv-endpoint 127.0.0.1:1 -- true", "PET_RDZV_TOKEN=");
  EXPECT_EQ(multi.exit_code, 2) << multi.output;
  EXPECT_NE(multi.output.find("--rdzv-conf token=SECRET"), std::string::npos) << multi.output;
  const Result weak = run("launch --standalone --rdzv-conf token=short -- true");
  EXPECT_EQ(weak.exit_code, 2) << weak.output;
  EXPECT_NE(weak.output.find("--rdzv-conf token: the store secret must be 16 to 1024"),
            std::string::npos)
      << weak.output;
  const Result missing_file =
      run("launch --standalone --rdzv-conf token_file=/nonexistent -- true");
  EXPECT_EQ(missing_file.exit_code, 2) << missing_file.output;
  EXPECT_NE(missing_file.output.find("token_file '/nonexistent': cannot read"), std::string::npos)
      << missing_file.output;
  // A secret file: its first line's text, trailing whitespace dropped; more than 4 KiB is refused.
  const std::string secret_file = write("secret.txt", "file-secret-0123456789\n");
  const Result from_file = run("launch --standalone --rdzv-conf token_file=" + secret_file +
                               " -- /bin/sh -c " + quote(script));
  EXPECT_EQ(from_file.exit_code, 0) << from_file.output;
  EXPECT_NE(from_file.output.find("[rank 0] secret file-secret-0123456789 run run-"),
            std::string::npos)
      << from_file.output;
  const std::string long_file = write("long-secret.txt", std::string(5000, 'a'));
  const Result too_long =
      run("launch --standalone --rdzv-conf token_file=" + long_file + " -- true");
  EXPECT_EQ(too_long.exit_code, 2) << too_long.output;
  EXPECT_NE(too_long.output.find("the file is larger than a store secret"), std::string::npos)
      << too_long.output;
  // A FIFO nobody writes is refused unopened (opening it would block the launcher forever).
  const std::string fifo = path("secret-fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const Result fifo_file = run("launch --standalone --rdzv-conf token_file=" + fifo + " -- true");
  EXPECT_EQ(fifo_file.exit_code, 2) << fifo_file.output;
  EXPECT_NE(fifo_file.output.find("token_file '" + fifo + "': cannot read the file: not a regular"),
            std::string::npos)
      << fifo_file.output;
}

TEST_F(LauncherTest, OutputLinesArePrefixedAndWhole) {
  // Partial writes with pauses between them must still come out as one prefixed line.
  const std::string script =
      "printf 'part-'; sleep 0.2; printf 'one\\n'; echo to-stderr >&2; printf 'no-newline'";
  const Result r = run("launch --standalone --nproc-per-node 2 -- /bin/sh -c " + quote(script));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string p = "[rank " + std::to_string(rank) + "] ";
    EXPECT_TRUE(r.has_line(p + "part-one")) << r.output;
    EXPECT_TRUE(r.has_line(p + "to-stderr")) << r.output;
    EXPECT_TRUE(r.has_line(p + "no-newline")) << r.output;
  }
}

TEST_F(LauncherTest, WorkerExitCodeFailsTheLaunchAndNamesTheRank) {
  const std::string script =
      "echo $$ >> " + (dir_ / "pids").string() +
      "; if [ $RANK = 2 ]; then sleep 0.3; exit 3; fi; sleep 30 & echo $! >> " +
      (dir_ / "pids").string() + "; wait";
  const Result r =
      run("launch --standalone --nproc-per-node 4 --stop-grace 2 -- /bin/sh -c " + quote(script));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("rank 2 exited with code 3; no restarts left (--max-restarts 0)"),
            std::string::npos)
      << r.output;
  EXPECT_LT(r.seconds, 10) << "the other workers were not stopped promptly";
  const auto pids = pids_in("pids");
  EXPECT_EQ(pids.size(), 7u);  // 4 shells + 3 background sleeps
  expect_all_gone(pids);
}

TEST_F(LauncherTest, TheEarliestErrorFileIsTheFailureReported) {
  // Rank 1 writes its error file first and exits last; rank 0, as a peer failing on the
  // connection rank 1 dropped would, writes its own after it and exits first. The root cause
  // reported is rank 1's, though rank 0's exit is seen first (torchrun's earliest failure).
  const std::string d = dir_.string();
  const std::string script =
      "if [ $RANK = 1 ]; then echo '{\"message\": {\"message\": \"ValueError: first\"}}' > "
      "$TORCHELASTIC_ERROR_FILE; touch " +
      d + "/r1wrote; until [ -e " + d +
      "/r0done ]; do sleep 0.01; done; sleep 0.05; exit 1; fi; until [ -e " + d +
      "/r1wrote ]; do sleep 0.01; done; sleep 0.05; echo '{\"message\": \"RuntimeError: "
      "peer closed\"}' > $TORCHELASTIC_ERROR_FILE; touch " +
      d + "/r0done; exit 1";
  const Result r =
      run("launch --standalone --nproc-per-node 2 --stop-grace 2 -- /bin/sh -c " + quote(script));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("launch failed: rank 1 exited with code 1: ValueError: first; no "
                          "restarts left"),
            std::string::npos)
      << r.output;
}

TEST_F(LauncherTest, SigkilledWorkerRestartsTheGroupOnce) {
  const std::string pids = (dir_ / "pids").string();
  const std::string script =
      "echo $$ >> " + pids +
      "; echo attempt $SHARDTRAIN_RESTART_COUNT $TORCHELASTIC_RESTART_COUNT;"
      " if [ \"$SHARDTRAIN_RESTART_COUNT\" = 1 ]; then exit 0; fi;"
      " if [ $RANK = 1 ]; then sleep 0.3; kill -9 $$; fi; sleep 30 & echo $! >> " +
      pids + "; wait";
  const Result r =
      run("launch --standalone --nproc-per-node 3 --max-restarts 1 -- /bin/sh -c " + quote(script));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1 was killed by signal 9 (SIGKILL); restarting the worker group "
                          "(restart 1 of 1)"),
            std::string::npos)
      << r.output;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string p = "[rank " + std::to_string(rank) + "] ";
    EXPECT_TRUE(r.has_line(p + "attempt 0 0")) << r.output;
    EXPECT_TRUE(r.has_line(p + "attempt 1 1")) << r.output;
  }
  EXPECT_LT(r.seconds, 10);
  expect_all_gone(pids_in("pids"));
}

TEST_F(LauncherTest, SigkilledWorkerWithoutRestartsFailsAndLeavesNoProcesses) {
  const std::string pids = (dir_ / "pids").string();
  const std::string script = "echo $$ >> " + pids +
                             "; if [ $RANK = 1 ]; then sleep 0.3; kill -9 $$; fi;"
                             " sleep 30 & echo $! >> " +
                             pids + "; wait";
  const Result r =
      run("launch --standalone --nproc-per-node 2 --max-restarts 0 -- /bin/sh -c " + quote(script));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(r.has_line(
      "shardtrain: launch failed: rank 1 was killed by signal 9 (SIGKILL); no restarts left "
      "(--max-restarts 0)"))
      << r.output;
  const auto listed = pids_in("pids");
  EXPECT_EQ(listed.size(), 3u);  // 2 shells + rank 0's background sleep
  expect_all_gone(listed);
}

TEST_F(LauncherTest, TwoNodesRendezvousOnLoopback) {
  const int port = free_port();
  // SHARDTRAIN_STORE: the agents' store; MASTER_PORT: a port free for a PyTorch rank 0's own
  // store (dist/worker_env.h), the same on both nodes.
  const std::string script =
      "echo id $RANK $WORLD_SIZE $GROUP_RANK $LOCAL_RANK $SHARDTRAIN_STORE; echo master "
      "$MASTER_ADDR:$MASTER_PORT";
  const auto agent = [&](int node) {
    return run("launch --nnodes 2 --node-rank " + std::to_string(node) +
               " --nproc-per-node 2 --rdzv-id two --rdzv-endpoint 127.0.0.1:" +
               std::to_string(port) + " -- /bin/sh -c " + quote(script));
  };
  // Node 1 starts first: its agent must wait for node 0's store to come up.
  auto node1 = std::async(std::launch::async, agent, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto node0 = std::async(std::launch::async, agent, 0);
  const Result r0 = node0.get();
  const Result r1 = node1.get();
  ASSERT_EQ(r0.exit_code, 0) << r0.output;
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  for (int rank = 0; rank < 4; ++rank) {
    const Result& r = rank < 2 ? r0 : r1;
    EXPECT_TRUE(r.has_line("[rank " + std::to_string(rank) + "] id " + std::to_string(rank) +
                           " 4 " + std::to_string(rank / 2) + " " + std::to_string(rank % 2) +
                           " 127.0.0.1:" + std::to_string(port)))
        << r.output;
  }
  const size_t at = r0.output.find("[rank 0] master 127.0.0.1:");
  ASSERT_NE(at, std::string::npos) << r0.output;
  const std::string master = r0.output.substr(at + 9, r0.output.find('\n', at) - at - 9);
  EXPECT_NE(master, "127.0.0.1:" + std::to_string(port)) << "not the agents' own store";
  EXPECT_TRUE(r1.has_line("[rank 3] " + master)) << "every rank is told rank 0's port\n"
                                                 << r1.output;
}

TEST_F(LauncherTest, FailureOnOneNodeRestartsBothNodes) {
  const int port = free_port();
  const std::string script =
      "echo attempt $SHARDTRAIN_RESTART_COUNT; if [ \"$SHARDTRAIN_RESTART_COUNT\" = 1 ]; then "
      "exit 0; fi; if [ $RANK = 3 ]; then sleep 0.3; exit 5; fi; exec sleep 30";
  const auto agent = [&](int node) {
    return run("launch --nnodes 2 --node-rank " + std::to_string(node) +
               " --nproc-per-node 2 --max-restarts 1 --rdzv-endpoint 127.0.0.1:" +
               std::to_string(port) + " -- /bin/sh -c " + quote(script));
  };
  auto node0 = std::async(std::launch::async, agent, 0);
  auto node1 = std::async(std::launch::async, agent, 1);
  const Result r0 = node0.get();
  const Result r1 = node1.get();
  EXPECT_EQ(r0.exit_code, 0) << r0.output;
  EXPECT_EQ(r1.exit_code, 0) << r1.output;
  EXPECT_TRUE(r0.has_line("[rank 0] attempt 1")) << r0.output;
  EXPECT_TRUE(r1.has_line("[rank 2] attempt 1")) << r1.output;
  EXPECT_NE(r0.output.find("rank 3 exited with code 5; restarting"), std::string::npos)
      << r0.output;
}

TEST_F(LauncherTest, PetVariablesAreReadAndFlagsWin) {
  const int port = free_port();
  const std::string env =
      "PET_NNODES=1 PET_NODE_RANK=0 PET_NPROC_PER_NODE=3 "
      "PET_MASTER_ADDR=127.0.0.1 PET_MASTER_PORT=" +
      std::to_string(port) + " PET_RDZV_ID=petjob PET_MAX_RESTARTS=0";
  const std::string script = "echo w $WORLD_SIZE $SHARDTRAIN_STORE $SHARDTRAIN_RUN_ID";
  const Result r = run("launch -- /bin/sh -c " + quote(script), env);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(r.has_line("[rank 2] w 3 127.0.0.1:" + std::to_string(port) + " petjob")) << r.output;

  const Result flagged = run("launch --nproc-per-node 2 -- /bin/sh -c " + quote(script), env);
  ASSERT_EQ(flagged.exit_code, 0) << flagged.output;
  EXPECT_TRUE(flagged.has_line("[rank 1] w 2 127.0.0.1:" + std::to_string(port) + " petjob"))
      << flagged.output;
  EXPECT_EQ(flagged.output.find("[rank 2]"), std::string::npos) << flagged.output;

  const Result bad = run("launch -- /bin/sh -c true", "PET_NPROC_PER_NODE=many");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("PET_NPROC_PER_NODE 'many'"), std::string::npos) << bad.output;

  const Result bad_conf = run("launch -- /bin/sh -c true", "PET_RDZV_CONF=is_host=1");
  EXPECT_EQ(bad_conf.exit_code, 2) << bad_conf.output;
  EXPECT_NE(bad_conf.output.find("PET_RDZV_CONF 'is_host=1': unknown key 'is_host'"),
            std::string::npos)
      << bad_conf.output;
  // A flag wins over PET_RDZV_CONF.
  const Result conf_flag = run("launch --standalone --rdzv-conf join_timeout=5 -- /bin/sh -c true",
                               "PET_RDZV_CONF=is_host=1");
  EXPECT_EQ(conf_flag.exit_code, 0) << conf_flag.output;
}

TEST_F(LauncherTest, BadFlagsExit2WithOneLineNamingTheFlag) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--nnodes 0", "--nnodes '0'"},
      {"--nnodes 3:2", "--nnodes '3:2': MIN 3 is greater than MAX 2"},
      {"--nnodes two", "--nnodes 'two'"},
      {"--nproc-per-node x", "--nproc-per-node 'x'"},
      {"--nproc-per-node 0", "--nproc-per-node '0'"},
      {"--nnodes 2 --node-rank 2 --rdzv-endpoint 127.0.0.1:1",
       "--node-rank 2 must be less than --nnodes 2"},
      {"--node-rank -1", "--node-rank '-1'"},
      {"--nnodes 2 --rdzv-endpoint 127.0.0.1:notaport", "--rdzv-endpoint '127.0.0.1:notaport'"},
      {"--nnodes 2 --rdzv-endpoint 127.0.0.1:70000", "--rdzv-endpoint '127.0.0.1:70000'"},
      {"--nnodes 2 --rdzv-endpoint :29400", "--rdzv-endpoint ':29400'"},
      {"--max-restarts -3", "--max-restarts '-3'"},
      {"--stop-grace soon", "--stop-grace 'soon'"},
      {"--rdzv-backend zookeeper", "--rdzv-backend 'zookeeper'"},
      {"--nnodes 2 --rdzv-backend etcd", "--rdzv-backend etcd needs --rdzv-endpoint"},
      {"--standalone --nnodes 2", "--standalone runs a single node; it conflicts with --nnodes 2"},
      {"--nnodes 4:2", "--nnodes '4:2': MIN 4 is greater than MAX 2"},
      {"--nnodes 1:x", "--nnodes '1:x'"},
      {"--rdzv-conf last_call_timeout", "--rdzv-conf 'last_call_timeout': expected key=value"},
      {"--rdzv-conf =5", "--rdzv-conf '=5': expected key=value"},
      {"--rdzv-conf last_call_timeout=soon", "--rdzv-conf last_call_timeout 'soon'"},
      {"--rdzv-conf join_timeout=-1", "--rdzv-conf join_timeout '-1'"},
      {"--rdzv-conf keep_alive_max_attempt=0", "--rdzv-conf keep_alive_max_attempt '0'"},
      {"--rdzv-conf keep_alive_interval=0", "--rdzv-conf keep_alive_interval '0'"},
      {"--rdzv-conf join_timeout=5,lastcall=5",
       "--rdzv-conf 'join_timeout=5,lastcall=5': unknown key 'lastcall'; supported: "
       "join_timeout, last_call_timeout"},
  };
  for (const auto& [flags, expected] : cases) {
    const Result r = run("launch " + flags + " -- /bin/sh -c true");
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.output;
    ASSERT_EQ(r.lines().size(), 1u) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find(expected), std::string::npos) << flags << "\n" << r.output;
  }
  const Result nothing = run("launch --standalone");
  EXPECT_EQ(nothing.exit_code, 2) << nothing.output;
  EXPECT_NE(nothing.output.find("nothing to launch"), std::string::npos) << nothing.output;
}

TEST_F(LauncherTest, MissingStoreTimesOutWithClearMessage) {
  const int port = free_port();
  const Result r =
      run("launch --nnodes 2 --node-rank 1 --rdzv-conf join_timeout=1 "
          "--rdzv-endpoint 127.0.0.1:" +
          std::to_string(port) + " -- /bin/sh -c true");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("is the launcher on node 0 running and reachable"), std::string::npos)
      << r.output;
  EXPECT_LT(r.seconds, 6);
}

TEST_F(LauncherTest, DuplicateNodeRankIsRefused) {
  const int port = free_port();
  const std::string flags =
      "launch --nnodes 3 --rdzv-conf join_timeout=4 --rdzv-endpoint 127.0.0.1:" +
      std::to_string(port) + " --node-rank ";
  // Nodes 0 and 1 join and wait for node 2, which never comes; a second node 1 is refused.
  auto node0 = std::async(std::launch::async, [&] { return run(flags + "0 -- /bin/sh -c true"); });
  // Generous gaps: on a loaded machine a launcher takes a while to start and join.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto node1 = std::async(std::launch::async, [&] { return run(flags + "1 -- /bin/sh -c true"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const Result duplicate = run(flags + "1 -- /bin/sh -c true");
  EXPECT_EQ(duplicate.exit_code, 2) << duplicate.output;
  EXPECT_NE(duplicate.output.find("node rank 1 has already joined"), std::string::npos)
      << duplicate.output;
  const Result r0 = node0.get();
  EXPECT_EQ(r0.exit_code, 2) << r0.output;
  EXPECT_NE(r0.output.find("only 2 of 3 nodes joined within 4 s (missing node rank 2)"),
            std::string::npos)
      << r0.output;
  EXPECT_EQ(node1.get().exit_code, 2);
}

TEST_F(LauncherTest, TrainShortcutRunsOneWorkerPerProcess) {
  const Result r = run("train --nproc-per-node 2 --print-config");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  size_t rank0 = 0, rank1 = 0;
  for (const auto& line : r.lines()) {
    rank0 += line.rfind("[rank 0] ", 0) == 0;
    rank1 += line.rfind("[rank 1] ", 0) == 0;
  }
  EXPECT_GT(rank0, 3u) << r.output;
  // Two workers ran; shardtrain workers show local rank 0 only by default (as torchrun's
  // --local-ranks-filter 0).
  EXPECT_NE(r.output.find("starting ranks 0..1 of 2"), std::string::npos) << r.output;
  EXPECT_EQ(rank1, 0u) << r.output;
}

}  // namespace
