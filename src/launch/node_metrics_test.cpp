// NodeMetrics end to end inside one process: rank files written as the trainer writes them,
// read back through the real HTTP endpoint, counters continued across a worker restart, and a
// port in use refused with an error naming it, a gauge a rank does not measure left out.
#include "launch/node_metrics.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist/testing/etcd_store_test_server.h"
#include "io/atomic_file.h"

namespace shardtrain::launch {
namespace {

RankSnapshot snapshot(int local_rank, const std::string& instance, double steps, double tokens) {
  RankSnapshot s;
  s.instance = instance;
  s.rank = 10 + local_rank;
  s.local_rank = local_rank;
  s.world_size = 4;
  s.step = static_cast<int64_t>(steps);
  s.loss = 1.5;
  s.steps_total = steps;
  s.tokens_total = tokens;
  s.step_seconds_histogram = HistogramValue::with_bounds(step_seconds_bounds());
  for (int i = 0; i < static_cast<int>(steps); ++i) s.step_seconds_histogram.observe(0.2);
  return s;
}

void write_rank(const NodeMetrics& m, const RankSnapshot& s) {
  write_file_atomically(m.dir() + "/local-" + std::to_string(s.local_rank) + ".json",
                        snapshot_to_json(s).dump());
}

std::string scrape(int port) {
  httplib::Client client("127.0.0.1", port);
  const auto response = client.Get("/metrics");
  if (!response || response->status != 200) return "";
  EXPECT_EQ(response->get_header_value("Content-Type"), kExpositionContentType);
  return response->body;
}

MetricsOptions loopback_options() {
  MetricsOptions options;
  options.port = 0;
  options.address = "127.0.0.1";
  options.gpu = false;
  return options;
}

TEST(NodeMetrics, ServesEveryLocalRankAndKeepsCountersAcrossARestart) {
  NodeIdentity identity;
  identity.run_id = "job7";
  identity.pod = "trainer-0";
  identity.pod_namespace = "ml";
  std::string dir;
  {
    NodeMetrics metrics(loopback_options(), identity);
    dir = metrics.dir();
    EXPECT_TRUE(std::filesystem::is_directory(dir)) << dir;
    metrics.start_generation(2, 0, 1, 2);
    write_rank(metrics, snapshot(0, "a", 8, 800));
    write_rank(metrics, snapshot(1, "b", 7, 700));
    std::string text = scrape(metrics.port());
    EXPECT_NE(text.find("shardtrain_steps_total{rank=\"10\",local_rank=\"0\",node=\"2\","
                        "run_id=\"job7\",pod=\"trainer-0\",namespace=\"ml\"} 8\n"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("shardtrain_steps_total{rank=\"11\",local_rank=\"1\""), std::string::npos);
    EXPECT_NE(text.find("shardtrain_rendezvous_generation{rank=\"11\""), std::string::npos);

    // Local rank 1 restarts (generation 2, one restart) and has done 2 steps of its own.
    metrics.start_generation(2, 1, 2, 2);
    write_rank(metrics, snapshot(1, "c", 2, 200));
    text = scrape(metrics.port());
    EXPECT_NE(text.find("shardtrain_steps_total{rank=\"11\",local_rank=\"1\",node=\"2\","
                        "run_id=\"job7\",pod=\"trainer-0\",namespace=\"ml\"} 9\n"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("shardtrain_tokens_total{rank=\"11\",local_rank=\"1\",node=\"2\","
                        "run_id=\"job7\",pod=\"trainer-0\",namespace=\"ml\"} 900\n"),
              std::string::npos);
    EXPECT_NE(text.find("shardtrain_step_duration_seconds_count{rank=\"11\",local_rank=\"1\","
                        "node=\"2\",run_id=\"job7\",pod=\"trainer-0\",namespace=\"ml\"} 9\n"),
              std::string::npos);
    EXPECT_NE(text.find("shardtrain_restarts_total{rank=\"11\",local_rank=\"1\",node=\"2\","
                        "run_id=\"job7\",pod=\"trainer-0\",namespace=\"ml\"} 1\n"),
              std::string::npos);
    EXPECT_EQ(text.find("DCGM_"), std::string::npos);  // metrics.gpu = false
  }
  EXPECT_FALSE(std::filesystem::exists(dir));  // the agent's own directory is gone
}

TEST(NodeMetrics, ARankThatHasNotPublishedIsLeftOut) {
  NodeMetrics metrics(loopback_options(), NodeIdentity{});
  metrics.start_generation(0, 0, 0, 2);
  write_rank(metrics, snapshot(0, "a", 1, 10));
  const std::string text = scrape(metrics.port());
  EXPECT_NE(text.find("local_rank=\"0\""), std::string::npos);
  EXPECT_EQ(text.find("local_rank=\"1\""), std::string::npos);
}

// A GPU rank's host wait (StepReport::host_wait_s) is a gauge; a CPU rank, which measures
// none, shows no sample of it rather than a made-up zero.
TEST(NodeMetrics, HostWaitIsShownOnlyWhereItIsMeasured) {
  NodeMetrics metrics(loopback_options(), NodeIdentity{});
  metrics.start_generation(0, 0, 0, 2);
  RankSnapshot gpu_rank = snapshot(0, "a", 3, 30);
  gpu_rank.host_wait_seconds = 0.25;
  write_rank(metrics, gpu_rank);
  write_rank(metrics, snapshot(1, "b", 3, 30));
  const std::string text = scrape(metrics.port());
  const std::regex sample(
      "shardtrain_host_wait_seconds\\{[^}]*local_rank=\"(\\d)\"[^}]*\\} (\\S+)\n");
  std::vector<std::string> shown;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), sample);
       it != std::sregex_iterator(); ++it) {
    shown.push_back((*it)[1].str() + "=" + (*it)[2].str());
  }
  EXPECT_EQ(shown, std::vector<std::string>{"0=0.25"}) << text;
}

TEST(NodeMetrics, PortInUseIsAnErrorNamingIt) {
  const testing::LoopbackListener listener;
  ASSERT_GT(listener.port(), 0);
  const int port = listener.port();
  MetricsOptions options = loopback_options();
  options.port = port;
  try {
    NodeMetrics metrics(options, NodeIdentity{});
    FAIL() << "bound a port in use";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("--metrics-port = " + std::to_string(port)), std::string::npos)
        << message;
    EXPECT_NE(message.find("in use"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace shardtrain::launch
