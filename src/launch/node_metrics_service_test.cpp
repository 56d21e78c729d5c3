// The node's /metrics against a real Prometheus (Debian `prometheus`, started here on
// loopback): a 2-rank CPU training under the launcher is scraped every 500 ms and the test asks
// Prometheus' HTTP API whether every family has both ranks, the counters move and survive a
// worker restart, and every PromQL expression of deploy/grafana/shardtrain.json runs and
// returns series (GPU panels excepted: no GPU here). Also: `promtool check metrics` on a
// scrape, a training without the launcher serving its own endpoint with NVML absent, and a
// port in use refused with exit 2.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/testing/test_support.h"
#include "dist/testing/etcd_store_test_server.h"
#include "launch/testing/launch_test_support.h"

namespace shardtrain::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Every shardtrain_* family the endpoint must show for each rank (histograms by _count).
const std::vector<std::string> kFamilies = {
    "shardtrain_step",
    "shardtrain_steps_planned",
    "shardtrain_epoch",
    "shardtrain_loss",
    "shardtrain_learning_rate",
    "shardtrain_grad_norm",
    "shardtrain_tokens_per_second",
    "shardtrain_mfu_ratio",
    "shardtrain_step_time_seconds",
    "shardtrain_data_wait_seconds",
    "shardtrain_exposed_communication_seconds",
    "shardtrain_checkpoint_stall_seconds",
    "shardtrain_last_checkpoint_step",
    "shardtrain_world_size",
    "shardtrain_rendezvous_generation",
    "shardtrain_device_memory_peak_bytes",
    "shardtrain_process_resident_memory_bytes",
    "shardtrain_tokens_total",
    "shardtrain_steps_total",
    "shardtrain_restarts_total",
    "shardtrain_step_duration_seconds_count",
};

bool have_prometheus() {
  return std::system(
             "command -v prometheus >/dev/null 2>&1 && "
             "command -v promtool >/dev/null 2>&1") == 0;
}

std::string scrape(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(2);
  const auto response = client.Get("/metrics");
  return response && response->status == 200 ? response->body : "";
}

// The value of `family`'s sample for `rank` in a scrape, or -1.
double scraped_value(const std::string& text, const std::string& family, int rank) {
  const std::regex line("^" + family + "\\{rank=\"" + std::to_string(rank) +
                        "\"[^}]*\\} ([^ \\n]+)$");
  std::smatch match;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (std::regex_match(l, match, line)) return std::stod(match[1]);
  }
  return -1;
}

// Prometheus on loopback, scraping `target_port` every 500 ms, with its data in `dir`.
class Prometheus {
 public:
  Prometheus(const std::string& dir, int target_port) : port_(free_loopback_port()) {
    const std::string config = dir + "/prometheus.yml";
    std::ofstream(config) << "global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\n"
                          << "scrape_configs:\n  - job_name: shardtrain\n"
                          << "    static_configs:\n      - targets: ['127.0.0.1:" << target_port
                          << "']\n";
    server_ = std::make_unique<BackgroundLauncher>(
        "prometheus --config.file=" + config + " --storage.tsdb.path=" + dir + "/tsdb" +
            " --web.listen-address=127.0.0.1:" + std::to_string(port_) + " --log.level=warn",
        dir + "/prometheus.log");
  }
  bool wait_ready(std::chrono::seconds limit) {
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      httplib::Client client("127.0.0.1", port_);
      if (const auto r = client.Get("/-/ready"); r && r->status == 200) return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }
  // The result of an instant query; status "error" becomes a test failure naming the query.
  nlohmann::json query(const std::string& promql) {
    httplib::Client client("127.0.0.1", port_);
    const auto r = client.Get("/api/v1/query", httplib::Params{{"query", promql}}, {});
    if (!r) {
      ADD_FAILURE() << "no answer from Prometheus for " << promql;
      return nlohmann::json::array();
    }
    const nlohmann::json body = nlohmann::json::parse(r->body, nullptr, false);
    if (body.is_discarded() || body.value("status", "") != "success") {
      ADD_FAILURE() << "query " << promql << " failed: " << r->body;
      return nlohmann::json::array();
    }
    return body["data"]["result"];
  }
  // rank label -> value of an instant query's vector result.
  std::map<std::string, double> by_rank(const std::string& promql) {
    std::map<std::string, double> out;
    for (const auto& series : query(promql)) {
      out[series["metric"].value("rank", "")] = std::stod(series["value"][1].get<std::string>());
    }
    return out;
  }
  bool wait_until(const std::string& promql, const std::function<bool(const nlohmann::json&)>& ok,
                  std::chrono::seconds limit) {
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      if (ok(query(promql))) return true;
      std::this_thread::sleep_for(250ms);
    }
    return false;
  }
  const std::string log() const { return server_->output(); }

 private:
  int port_;
  std::unique_ptr<BackgroundLauncher> server_;
};

// The PromQL of every panel target of the shipped dashboard, with Grafana's variables replaced
// by what Grafana would send ($__rate_interval at a 500 ms scrape, every run, node and rank).
std::vector<std::string> dashboard_expressions() {
  std::ifstream in(std::string(SHARDTRAIN_SOURCE_DIR) + "/deploy/grafana/shardtrain.json");
  const nlohmann::json dashboard = nlohmann::json::parse(in);
  std::vector<std::string> out;
  for (const auto& panel : dashboard.at("panels")) {
    if (!panel.contains("targets")) continue;
    for (const auto& target : panel["targets"]) {
      std::string expr = target.at("expr").get<std::string>();
      // Grafana's $__rate_interval is at least four scrape intervals; 30 s keeps two samples in
      // the window even when a loaded machine makes scrapes time out.
      expr = std::regex_replace(expr, std::regex("\\$__rate_interval"), "30s");
      expr = std::regex_replace(expr, std::regex("\\$__interval"), "1s");
      expr = std::regex_replace(expr, std::regex("\\$(run_id|node|Hostname)"), ".*");
      out.push_back(expr);
    }
  }
  return out;
}

std::string train_args(const std::string& dir) {
  const std::string src = SHARDTRAIN_SOURCE_DIR;
  return "train --config " + src + "/examples/demo.toml --model.path=" + src +
         "/examples/demo-model --data.path=" + src + "/examples/demo-data.jsonl" +
         " --data.cache_dir=" + dir + "/cache --train.output_dir=" + dir + "/model" +
         " --train.micro_batch=2 --train.log_every=1000 --metrics.peak_tflops=0.05";
}

// The pid of the worker with RANK=`rank` among the children of `launcher`, or -1.
pid_t worker_pid(pid_t launcher, int rank) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& task :
       fs::directory_iterator("/proc/" + std::to_string(launcher) + "/task", ec)) {
    std::ifstream children(task.path() / "children");
    for (pid_t child; children >> child;) {
      const std::string env = read_text("/proc/" + std::to_string(child) + "/environ");
      if (env.find(std::string("\0RANK=", 6) + std::to_string(rank) + '\0') != std::string::npos) {
        return child;
      }
    }
  }
  return -1;
}

TEST(NodeMetricsService, PrometheusScrapesBothRanksCountersSurviveARestartDashboardQueriesRun) {
  if (!have_prometheus()) GTEST_SKIP() << "prometheus/promtool not installed (scripts/setup.sh)";
  TempDir dir("node_metrics_service");
  const int metrics_port = free_loopback_port();
  Prometheus prometheus(dir.path(), metrics_port);
  ASSERT_TRUE(prometheus.wait_ready(20s)) << prometheus.log();
  BackgroundLauncher training(
      std::string(SHARDTRAIN_BINARY) + " launch --standalone --nproc-per-node 2 --max-restarts 1" +
          " --metrics-port " + std::to_string(metrics_port) +
          " --metrics-address 127.0.0.1 --metrics-gpu-interval 0.5 -- " + train_args(dir.path()) +
          " --steps 100000 --checkpoint-dir " + dir.path() + "/ckpt --checkpoint-every 4",
      dir.path() + "/train.log");

  // Both ranks seen past a checkpoint, with at least two scrapes for rate().
  ASSERT_TRUE(prometheus.wait_until(
      "min(shardtrain_step) >= 6 and count(shardtrain_step) == 2",
      [](const nlohmann::json& r) { return r.size() == 1; }, 60s))
      << training.output();

  for (const std::string& family : kFamilies) {
    const auto ranks = prometheus.by_rank(family);
    EXPECT_EQ(ranks.size(), 2u) << family;
    EXPECT_TRUE(ranks.count("0") && ranks.count("1")) << family;
  }
  const auto world = prometheus.by_rank("shardtrain_world_size");
  EXPECT_EQ(world.at("0"), 2);
  // rate() needs two samples of a rank inside its window that differ; on a loaded machine
  // scrapes can time out (400 ms) and a checkpoint write can hold training across two scrapes
  // (a rate of 0 for both ranks was seen), so wait for them rather than assume them.
  const std::string rate_query = "rate(shardtrain_tokens_total[30s])";
  ASSERT_TRUE(prometheus.wait_until(
      rate_query,
      [](const nlohmann::json& r) {
        if (r.size() != 2) return false;
        for (const auto& series : r) {
          if (!(std::stod(series["value"][1].get<std::string>()) > 0)) return false;
        }
        return true;
      },
      30s))
      << training.output();
  const auto rates = prometheus.by_rank(rate_query);
  ASSERT_EQ(rates.size(), 2u);
  for (const auto& [rank, rate] : rates) EXPECT_GT(rate, 0) << "rank " << rank;
  const auto loss = prometheus.by_rank("shardtrain_loss");
  EXPECT_GT(loss.at("0"), 0);
  EXPECT_LT(loss.at("0"), 10);  // cross-entropy over 260 byte-level symbols starts near 5.6
  EXPECT_EQ(loss.at("0"), loss.at("1"));  // the global mean, identical on every rank
  const auto checkpointed = prometheus.by_rank("shardtrain_last_checkpoint_step");
  EXPECT_GE(checkpointed.at("0"), 4);

  // The steps counter increases on both ranks (within 20 s: a loaded machine trains slowly and
  // misses scrapes).
  const auto before = prometheus.by_rank("shardtrain_steps_total");
  ASSERT_EQ(before.size(), 2u);
  const auto deadline_moved = Clock::now() + 20s;
  std::map<std::string, double> after;
  do {
    std::this_thread::sleep_for(500ms);
    after = prometheus.by_rank("shardtrain_steps_total");
  } while (Clock::now() < deadline_moved &&
           !(after.size() == 2 && after["0"] > before.at("0") && after["1"] > before.at("1")));
  for (const char* rank : {"0", "1"}) EXPECT_GT(after[rank], before.at(rank)) << rank;

  // promtool's linter finds nothing to say about a scrape.
  const std::string text = scrape(metrics_port);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.find("DCGM_"), std::string::npos) << "no GPU, no NVML: no GPU families";
  std::ofstream(dir.path() + "/scrape.txt") << text;
  const CommandResult lint = run_command("promtool check metrics < " + dir.path() + "/scrape.txt");
  EXPECT_EQ(lint.exit_code, 0) << lint.output;
  EXPECT_EQ(lint.output, "");

  // Every expression of the dashboard runs; all but the GPU panels return series.
  const std::vector<std::string> expressions = dashboard_expressions();
  EXPECT_GE(expressions.size(), 14u);
  for (const std::string& expr : expressions) {
    if (expr.find("DCGM_") != std::string::npos) {
      prometheus.query(expr);  // must parse and run; no GPU here, so no series
      continue;
    }
    EXPECT_TRUE(prometheus.wait_until(
        expr, [](const nlohmann::json& r) { return !r.empty(); }, 15s))
        << expr;
  }

  // A worker dies; the launcher restarts the group; rank 1's counters do not fall.
  const pid_t rank1 = worker_pid(training.pid(), 1);
  ASSERT_GT(rank1, 0);
  const double steps_before_kill = scraped_value(scrape(metrics_port), "shardtrain_steps_total", 1);
  ASSERT_GT(steps_before_kill, 0);
  ASSERT_EQ(::kill(rank1, SIGKILL), 0);
  bool restarted = false;
  const auto deadline = Clock::now() + 60s;
  while (Clock::now() < deadline && !restarted) {
    const std::string now = scrape(metrics_port);
    const double steps = scraped_value(now, "shardtrain_steps_total", 1);
    if (steps >= 0) EXPECT_GE(steps, steps_before_kill);
    restarted = scraped_value(now, "shardtrain_restarts_total", 1) == 1 &&
                steps > steps_before_kill + 1 && worker_pid(training.pid(), 1) != rank1;
    std::this_thread::sleep_for(200ms);
  }
  ASSERT_TRUE(restarted) << training.output();
  ASSERT_TRUE(prometheus.wait_until(
      "shardtrain_restarts_total",
      [](const nlohmann::json& r) { return r.size() == 2 && r[0]["value"][1] == "1"; }, 30s));
  for (const auto& [rank, resets] : prometheus.by_rank("resets(shardtrain_steps_total[2m])")) {
    EXPECT_EQ(resets, 0) << "rank " << rank;
  }
  for (const auto& [rank, resets] : prometheus.by_rank("resets(shardtrain_tokens_total[2m])")) {
    EXPECT_EQ(resets, 0) << "rank " << rank;
  }
  EXPECT_NE(training.output().find("metrics: http://127.0.0.1:" + std::to_string(metrics_port) +
                                   "/metrics"),
            std::string::npos);
  ::kill(training.pid(), SIGTERM);
  EXPECT_EQ(training.wait(60s), 128 + SIGTERM) << training.output();
}

TEST(NodeMetricsService, TrainingWithoutTheLauncherServesItselfAndRunsWithoutNvml) {
  TempDir dir("node_metrics_single");
  const int port = free_loopback_port();
  BackgroundLauncher training(std::string(SHARDTRAIN_BINARY) + " " + train_args(dir.path()) +
                                  " --steps 100000 --train.device=cpu --metrics-port " +
                                  std::to_string(port) + " --metrics.address=127.0.0.1" +
                                  " --metrics.nvml_library=/nonexistent/libnvidia-ml.so.1",
                              dir.path() + "/train.log");
  std::string text;
  const auto deadline = Clock::now() + 40s;
  while (Clock::now() < deadline) {
    text = scrape(port);
    if (scraped_value(text, "shardtrain_steps_total", 0) >= 2) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_GE(scraped_value(text, "shardtrain_steps_total", 0), 2) << training.output();
  EXPECT_NE(text.find("run_id=\"none\""), std::string::npos) << text;
  EXPECT_EQ(text.find("rank=\"1\""), std::string::npos);
  EXPECT_EQ(text.find("DCGM_"), std::string::npos);
  EXPECT_GT(scraped_value(text, "shardtrain_process_resident_memory_bytes", 0), 1e6);
  EXPECT_GT(scraped_value(text, "shardtrain_device_memory_peak_bytes", 0), 1e6);
  ::kill(training.pid(), SIGTERM);
  training.wait(10s);
  const std::string log = training.output();
  EXPECT_NE(log.find("metrics: NVML not available (cannot load /nonexistent/libnvidia-ml.so.1"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("metrics: http://127.0.0.1:" + std::to_string(port) + "/metrics"),
            std::string::npos);
}

TEST(NodeMetricsService, PortInUseEndsWithOneLineNamingItAndExitCode2) {
  TempDir dir("node_metrics_port");
  const LoopbackListener listener;
  ASSERT_GT(listener.port(), 0);
  const std::string port = std::to_string(listener.port());
  for (const std::string launcher : {"", " --nproc-per-node 2"}) {
    const CommandResult r = run_command(std::string(SHARDTRAIN_BINARY) + " " +
                                        train_args(dir.path()) + " --steps 20 --metrics-port " +
                                        port + " --metrics.address=127.0.0.1" + launcher);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    const std::string said = "port = " + port + ": cannot listen on 127.0.0.1:" + port + " (";
    int lines_saying_it = 0;
    for (const std::string& line : r.lines())
      lines_saying_it += line.find(said) != std::string::npos;
    EXPECT_EQ(lines_saying_it, 1) << r.output;
    EXPECT_NE(r.output.find("in use"), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace shardtrain::testing
