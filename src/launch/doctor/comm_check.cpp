#include "launch/doctor/comm_check.h"

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "dist/comm_bandwidth.h"
#include "dist/gloo_comm.h"
#include "dist/nccl_comm.h"
#include "dist/store_secret.h"
#include "dist/tcp_store.h"
#include "launch/doctor/nccl_log.h"

namespace shardtrain::doctor {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// Points NCCL's INFO log at a fresh temporary directory for this process (before NCCL starts)
// and reads it back; the directory is removed on destruction.
class NcclLogCapture {
 public:
  explicit NcclLogCapture(bool enabled) {
    if (!enabled) return;
    std::string pattern = (fs::temp_directory_path() / "shardtrain-doctor-nccl-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) fail("doctor: cannot create a directory in /tmp");
    dir_ = pattern;
    ::setenv("NCCL_DEBUG", "INFO", 1);
    ::setenv("NCCL_DEBUG_SUBSYS", "INIT,NET,P2P", 1);
    ::setenv("NCCL_DEBUG_FILE", (dir_ / "nccl.%p.log").c_str(), 1);
  }
  ~NcclLogCapture() {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  NcclLogCapture(const NcclLogCapture&) = delete;
  NcclLogCapture& operator=(const NcclLogCapture&) = delete;

  std::string text() const {
    std::string all;
    std::error_code ec;
    if (dir_.empty()) return all;
    for (const auto& entry : fs::directory_iterator(dir_, ec)) {
      std::ifstream in(entry.path());
      std::stringstream buffer;
      buffer << in.rdbuf();
      all += buffer.str();
    }
    return all;
  }

 private:
  fs::path dir_;
};

struct RankWorld {
  std::unique_ptr<TcpStoreServer> own_server;  // one-rank worlds only; outlives store and comm
  DistWorld world;
};

RankWorld connect(const WorkerEnv& env, const CommTestOptions& options, Ops& ops,
                  const CudaComputeStream& compute) {
  RankWorld rank_world;
  if (env.world > 1) {
    rank_world.world = connect_world(
        env, ops, compute,
        options.device == "cuda" ? CommBackendChoice::kNccl : CommBackendChoice::kAuto);
    return rank_world;
  }
  const std::string secret = generate_store_secret();  // a private loopback store
  rank_world.own_server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, secret);
  rank_world.world.store =
      std::make_unique<TcpStoreClient>("127.0.0.1", rank_world.own_server->port(), 10s, secret);
  Store& store = *rank_world.world.store;
  rank_world.world.comm = options.device == "cuda"
                              ? make_nccl_comm(store, 0, 1, "doctor/world", NcclCommOptions{compute})
                              : make_gloo_comm(store, 0, 1, "doctor/world");
  return rank_world;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

void fill_transport(NodeCommRow& row, const CommTestOptions& options,
                    const NcclLogCapture& capture) {
  if (options.device != "cuda") {
    row.network = "gloo";
    row.paths = "TCP";
    return;
  }
  const NcclLogTransports seen = parse_nccl_log(capture.text());
  row.network = seen.network;
  row.paths = seen.describe_paths();
  if (const auto t = seen.inter_node()) row.inter_node = transport_name(*t);
}

}  // namespace

int run_comm_test_rank(const WorkerEnv& env, const CommTestOptions& options,
                       const std::vector<CheckResult>& node_checks,
                       const std::function<int(const NcclTestReport&)>& on_report) {
  NcclLogCapture capture(options.device == "cuda");
  CudaComputeStream compute;
  std::unique_ptr<Ops> ops = make_rank_ops(
      options.device == "cuda" ? DeviceChoice::kCuda : DeviceChoice::kCpu, env, &compute);
  RankWorld rank_world = connect(env, options, *ops, compute);
  Comm& comm = *rank_world.world.comm;
  Store& store = *rank_world.world.store;
  const DType dtype = ops->activation_dtype();
  const auto bytes = static_cast<int64_t>(options.message_mib * 1024 * 1024);
  const auto time = [&](Comm& group, Collective collective) {
    return time_collective(group, *ops, collective, bytes, dtype, options.warmup,
                           options.iterations);
  };
  const CollectiveTiming all_reduce = time(comm, Collective::kAllReduce);
  const CollectiveTiming all_gather = time(comm, Collective::kAllGather);

  const int nodes = env.world / env.local_world;
  const int node = env.rank / env.local_world;
  NodeCommRow row;
  row.node = node;
  row.host = host_name();
  row.ranks = env.local_world;
  row.intra_all_reduce_busbw = all_reduce.busbw_gbps;
  row.intra_all_gather_busbw = all_gather.busbw_gbps;
  if (nodes > 1) {
    std::unique_ptr<Comm> local = comm.split(node, env.rank);
    row.intra_all_reduce_busbw = time(*local, Collective::kAllReduce).busbw_gbps;
    row.intra_all_gather_busbw = time(*local, Collective::kAllGather).busbw_gbps;
  }
  if (nodes == 2 && node == 0) {
    row.link_busbw = all_reduce.busbw_gbps;
    row.link_peer = 1;
  }
  for (int first = 0; nodes > 2 && first < nodes; ++first) {
    const int second = (first + 1) % nodes;
    const bool in_pair = node == first || node == second;
    std::unique_ptr<Comm> pair = comm.split(in_pair ? 0 : 1 + node, env.rank);
    const double busbw = time(*pair, Collective::kAllReduce).busbw_gbps;
    if (node == first) {
      row.link_busbw = busbw;
      row.link_peer = second;
    }
  }

  comm.barrier();
  ops->synchronize();
  row.clock_after_barrier_s =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();

  const std::string prefix = "shardtrain/restart" + std::to_string(env.restart_count) + "/doctor/";
  if (env.local_rank == 0) {
    fill_transport(row, options, capture);
    for (const CheckResult& check : node_checks) {
      if (check.status != CheckStatus::kFail) continue;
      ++row.failed_checks;
      row.failures.push_back(check.name + ": " + check.detail);
    }
    store.set(prefix + "node/" + std::to_string(node), row_to_json(row).dump());
  }
  if (env.rank != 0) {
    const std::string verdict = store.get(prefix + "verdict", std::chrono::minutes(10));
    return std::atoi(verdict.c_str());
  }
  NcclTestReport report;
  report.backend = comm.backend_name();
  report.world = env.world;
  report.nodes = nodes;
  report.message_bytes = static_cast<double>(all_reduce.bytes);
  report.all_reduce_busbw = all_reduce.busbw_gbps;
  report.all_gather_busbw = all_gather.busbw_gbps;
  report.all_reduce_algbw = all_reduce.algbw_gbps;
  for (int n = 0; n < nodes; ++n) {
    const std::string text =
        store.get(prefix + "node/" + std::to_string(n), std::chrono::minutes(5));
    const nlohmann::json json = nlohmann::json::parse(text, nullptr, false);
    if (json.is_discarded()) fail("doctor: node {}'s NCCL test record is not JSON", n);
    report.rows.push_back(row_from_json(json));
  }
  const int code = on_report(report);
  store.set(prefix + "verdict", std::to_string(code));
  return code;
}

}  // namespace shardtrain::doctor
