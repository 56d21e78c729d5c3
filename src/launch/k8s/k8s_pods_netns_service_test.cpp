// The rendered PyTorchJob run the way the cluster runs it, without Kubernetes: every pod is a
// network namespace of its own (veth pairs on a bridge in a "switch" namespace, addresses in
// 10.213.0.0/24, nothing in the host's namespace), with its own host name (a UTS namespace, as
// a pod is named) and the Services' DNS names in /etc/hosts (`ip netns exec` binds
// /etc/netns/<ns>/hosts there). The etcd pod runs Debian's etcd; each worker pod runs its
// container's command with the environment the training operator (v1.7, elastic policy) and
// the kubelet give it, and nothing else. The demo trains to the end across the 2 pods; then
// the same job again with one pod's processes SIGKILLed mid-run and its container started
// again, as restartPolicy OnFailure does: the run ends with the uninterrupted run's final loss
// and bit-identical weights. Then the host naming of JobSet and Kubeflow Trainer (TrainJob):
// there a pod's short host name (<job>-node-0-1) resolves only in its own /etc/hosts, other pods
// know it as <host>.<subdomain> through cluster DNS; each pod gets exactly that view, and the
// rendered JobSet (etcd rendezvous) and TrainJob (static, PET_MASTER_ADDR = node 0's
// host.subdomain) must still train, so node 0 must advertise an address the others resolve.
// Skips visibly without root, iproute2, unshare or etcd.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <optional>

#include "dist/testing/etcd_store_test_server.h"
#include "launch/k8s/manifests.h"
#include "launch/testing/launch_test_support.h"

namespace shardtrain::launch::k8s {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::BackgroundLauncher;
using testing::run_command;

std::string quoted(const std::string& word) {
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

bool ok(const std::string& command) { return run_command(command).exit_code == 0; }

// Network namespaces the test creates (and only those), removed with their /etc/netns files
// when it ends, even on failure.
class PodNetwork {
 public:
  explicit PodNetwork(std::string prefix) : prefix_(std::move(prefix)) {}
  ~PodNetwork() {
    for (const std::string& ns : namespaces_) {
      for (const std::string& pid :
           testing::CommandResult(run_command("ip netns pids " + ns)).lines()) {
        if (!pid.empty()) ::kill(std::stoi(pid), SIGKILL);
      }
      run_command("ip netns del " + ns);
      std::error_code ignored;
      fs::remove_all("/etc/netns/" + ns, ignored);
    }
  }
  PodNetwork(const PodNetwork&) = delete;
  PodNetwork& operator=(const PodNetwork&) = delete;

  // The bridge; false (and the test skips) when namespaces cannot be made here.
  bool start() {
    if (!add_namespace(switch_ns())) return false;
    return ok("ip -n " + switch_ns() + " link add br0 type bridge") &&
           ok("ip -n " + switch_ns() + " link set br0 up");
  }

  // A pod namespace with eth0 at `address`/24 on the bridge and `hosts` as its /etc/hosts.
  bool add_pod(const std::string& pod, const std::string& address, const std::string& hosts) {
    const std::string ns = pod_ns(pod);
    if (fs::exists("/etc/netns/" + ns) || !add_namespace(ns)) return false;
    const std::string port = "p" + std::to_string(namespaces_.size()) + prefix_;
    fs::create_directories("/etc/netns/" + ns);
    std::ofstream("/etc/netns/" + ns + "/hosts") << hosts;
    return ok("ip -n " + switch_ns() + " link add " + port + " type veth peer name eth0 netns " +
              ns) &&
           ok("ip -n " + switch_ns() + " link set " + port + " master br0") &&
           ok("ip -n " + switch_ns() + " link set " + port + " up") &&
           ok("ip -n " + ns + " addr add " + address + "/24 dev eth0") &&
           ok("ip -n " + ns + " link set eth0 up") && ok("ip -n " + ns + " link set lo up");
  }

  // A shell command that runs `inner` (a /bin/sh script) inside the pod's namespace, with the
  // host name `hostname` (Kubernetes names a pod's host after the pod).
  std::string in_pod(const std::string& pod, const std::string& hostname,
                     const std::string& inner) const {
    return "ip netns exec " + pod_ns(pod) + " unshare --uts /bin/sh -c " +
           quoted("hostname " + hostname + " && " + inner);
  }

  // SIGKILLs every process in the pod's namespace, as a node losing the pod would.
  void kill_pod(const std::string& pod) {
    for (const std::string& pid : run_command("ip netns pids " + pod_ns(pod)).lines()) {
      if (!pid.empty()) ::kill(std::stoi(pid), SIGKILL);
    }
  }

 private:
  bool add_namespace(const std::string& ns) {
    if (!ok("ip netns add " + ns)) return false;
    namespaces_.push_back(ns);
    return true;
  }
  std::string switch_ns() const { return prefix_ + "-switch"; }
  std::string pod_ns(const std::string& pod) const { return prefix_ + "-" + pod; }

  std::string prefix_;
  std::vector<std::string> namespaces_;
};

// What the training operator v1.7 adds to a Worker pod of an elastic PyTorchJob without a
// Master (pkg/controller.v1/pytorch/envvar.go, elastic.go), from the rendered job.
std::map<std::string, std::string> operator_env(const Json& job) {
  const Json& policy = job["spec"]["elasticPolicy"];
  return {{"PYTHONUNBUFFERED", "1"},
          {"PET_RDZV_ENDPOINT", policy["rdzvHost"].get<std::string>() + ":" +
                                    std::to_string(policy["rdzvPort"].get<int>())},
          {"PET_RDZV_BACKEND", policy["rdzvBackend"].get<std::string>()},
          {"PET_NNODES", std::to_string(policy["minReplicas"].get<int>()) + ":" +
                             std::to_string(policy["maxReplicas"].get<int>())},
          {"PET_MAX_RESTARTS", std::to_string(policy["maxRestarts"].get<int>())},
          {"PET_NPROC_PER_NODE", std::to_string(policy["nProcPerNode"].get<int>())},
          {"PET_RDZV_ID", policy["rdzvId"].get<std::string>()}};
}

// The container's own env as the kubelet resolves it (literal values, the pod's name and
// namespace, its Job completion index, Secrets from `secrets`).
std::map<std::string, std::string> container_env(const Json& container, const std::string& pod,
                                                 const std::map<std::string, std::string>& secrets,
                                                 int completion_index = 0) {
  std::map<std::string, std::string> env;
  for (const Json& entry : container["env"]) {
    const std::string name = entry["name"];
    if (entry.contains("value")) {
      env[name] = entry["value"];
    } else if (entry["valueFrom"].contains("fieldRef")) {
      const std::string field = entry["valueFrom"]["fieldRef"]["fieldPath"];
      env[name] = field == "metadata.name" ? pod
                  : field.find("job-completion-index") != std::string::npos
                      ? std::to_string(completion_index)
                      : "default";
    } else {
      const Json& ref = entry["valueFrom"]["secretKeyRef"];
      env[name] = secrets.at(ref["name"].get<std::string>() + "/" + ref["key"].get<std::string>());
    }
  }
  return env;
}

class K8sPodsNetnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root for network namespaces (CI runs as root)";
    if (!ok("command -v ip && command -v unshare")) GTEST_SKIP() << "needs iproute2 and unshare";
    if (testing::find_etcd().empty()) GTEST_SKIP() << "etcd not found: install etcd-server";
    dir_ = (fs::temp_directory_path() / ("shardtrain_k8s_pods_" + std::to_string(::getpid())))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    network_.emplace("stk" + std::to_string(::getpid() % 100000));
    std::string hosts = "127.0.0.1 localhost\n";
    for (const char* job : {"demo-full", "demo-kill"}) {
      hosts += std::string("10.213.0.2 ") + job + "-etcd\n";
      for (int i = 0; i < 2; ++i) {
        hosts += "10.213.0." + std::to_string(10 + i) + " " + job + "-worker-" + std::to_string(i) +
                 "\n";
      }
    }
    if (!network_->start()) GTEST_SKIP() << "cannot create network namespaces here (ip netns add)";
    ASSERT_TRUE(network_->add_pod("etcd", "10.213.0.2", hosts));
    ASSERT_TRUE(network_->add_pod("worker-0", "10.213.0.10", hosts));
    ASSERT_TRUE(network_->add_pod("worker-1", "10.213.0.11", hosts));
    etcd_.emplace(network_->in_pod("etcd", "etcd",
                                   "exec " + testing::find_etcd() + " --data-dir " + dir_ +
                                       "/etcd --listen-client-urls http://10.213.0.2:2379 "
                                       "--advertise-client-urls http://10.213.0.2:2379 "
                                       "--listen-peer-urls http://127.0.0.1:2380"),
                  dir_ + "/etcd.log");
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (testing::read_text(dir_ + "/etcd.log").find("ready to serve client requests") ==
           std::string::npos) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline)
          << testing::read_text(dir_ + "/etcd.log");
      std::this_thread::sleep_for(50ms);
    }
  }

  // The PyTorchJob `name` as `shardtrain k8s` renders it: a CPU job of 2 pods meeting in etcd,
  // checkpointing to the volume mounted at dir_/<name>.
  Json render_job(const std::string& name) {
    ManifestFlags flags;
    flags.kind = "pytorchjob";
    flags.name = name;
    flags.image = "registry.example/shardtrain:test";
    flags.nodes = "2";
    flags.gpus_per_node = "0";
    flags.rdzv = "etcd";
    flags.max_restarts = "2";
    flags.termination_grace = "60";
    flags.pvc = "ckpt:" + dir_ + "/" + name;
    fs::create_directories(dir_ + "/" + name);
    flags.worker_command = {"train",
                            "--config",
                            std::string(SHARDTRAIN_SOURCE_DIR) + "/examples/demo.toml",
                            "--steps",
                            "20",
                            "--checkpoint-every",
                            "5",
                            "--train.device=cpu",
                            "--train.micro_batch=2",
                            "--data.cache_dir=" + dir_ + "/data-cache",
                            "--train.output_dir=" + dir_ + "/" + name + "/out",
                            "--metrics",
                            dir_ + "/" + name + "/metrics.jsonl"};
    const std::vector<Json> docs = render_manifests(resolve_manifest_options(flags));
    for (const Json& doc : docs) {
      if (doc["kind"] == "PyTorchJob") return doc;
    }
    ADD_FAILURE() << "no PyTorchJob rendered";
    return Json();
  }

  // Worker pod `index` of `job`: its container's command (with the built binary for
  // `shardtrain`), run from the source dir with exactly the operator's and kubelet's env.
  std::string pod_command(const Json& job, int index) {
    const Json& container =
        job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0];
    const std::string pod =
        job["metadata"]["name"].get<std::string>() + "-worker-" + std::to_string(index);
    std::map<std::string, std::string> env =
        container_env(container, pod,
                      {{job["metadata"]["name"].get<std::string>() + "-store-secret/token",
                        "pod-test-secret-0123456789"}});
    for (const auto& [key, value] : operator_env(job)) env[key] = value;
    std::string inner = "cd " + quoted(SHARDTRAIN_SOURCE_DIR) +
                        " && exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin";
    for (const auto& [key, value] : env) inner += " " + quoted(key + "=" + value);
    for (const Json& word : container["command"]) {
      inner += " " + (word == "shardtrain" ? std::string(SHARDTRAIN_BINARY)
                                           : quoted(word.get<std::string>()));
    }
    return network_->in_pod("worker-" + std::to_string(index), pod, inner);
  }

  // The demo's worker command for a short run of `name` (3 steps, no checkpoints).
  std::vector<std::string> short_run(const std::string& name) {
    return {"train",
            "--config",
            std::string(SHARDTRAIN_SOURCE_DIR) + "/examples/demo.toml",
            "--steps",
            "3",
            "--train.device=cpu",
            "--train.micro_batch=2",
            "--data.cache_dir=" + dir_ + "/data-cache",
            "--train.output_dir=" + dir_ + "/" + name + "/out"};
  }

  // Pods `<name>-node-0-<i>` (subdomain <name>) at 10.213.0.<first + i>, each seeing its own
  // short name only in its own /etc/hosts (as the kubelet writes it) and the others, the etcd
  // Service and node 0 as cluster DNS answers for host.subdomain names.
  void add_named_pods(const std::string& name, int first) {
    std::string dns = "10.213.0.2 " + name + "-etcd\n";
    for (int i = 0; i < 2; ++i) {
      const std::string host = name + "-node-0-" + std::to_string(i);
      dns += "10.213.0." + std::to_string(first + i) + " " + host + "." + name + " " + host + "." +
             name + ".default.svc.cluster.local\n";
    }
    for (int i = 0; i < 2; ++i) {
      const std::string host = name + "-node-0-" + std::to_string(i);
      const std::string address = "10.213.0." + std::to_string(first + i);
      ASSERT_TRUE(network_->add_pod(name + "-" + std::to_string(i), address,
                                    "127.0.0.1 localhost\n" + address + " " + host + "." + name +
                                        ".default.svc.cluster.local " + host + "\n" + dns));
    }
  }

  // Pod `index` of `name` running `container`'s `command` with `extra` (the operator's) env.
  std::string named_pod_command(const std::string& name, int index, const Json& container,
                                const Json& command,
                                const std::map<std::string, std::string>& extra) {
    const std::string host = name + "-node-0-" + std::to_string(index);
    std::map<std::string, std::string> env = container_env(
        container, host, {{name + "-store-secret/token", "pod-test-secret-0123456789"}}, index);
    for (const auto& [key, value] : extra) env[key] = value;
    std::string inner = "cd " + quoted(SHARDTRAIN_SOURCE_DIR) +
                        " && exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin";
    for (const auto& [key, value] : env) inner += " " + quoted(key + "=" + value);
    for (const Json& word : command) {
      inner += " " + (word == "shardtrain" ? std::string(SHARDTRAIN_BINARY)
                                           : quoted(word.get<std::string>()));
    }
    return network_->in_pod(name + "-" + std::to_string(index), host, inner);
  }

  // Runs both pods to the end; both must exit 0 after 3 steps.
  void expect_both_train(const std::string& name, const std::string& pod0,
                         const std::string& pod1) {
    BackgroundLauncher first(pod0, dir_ + "/" + name + "-0.log");
    BackgroundLauncher second(pod1, dir_ + "/" + name + "-1.log");
    ASSERT_EQ(first.wait(180s), 0) << first.output() << second.output();
    ASSERT_EQ(second.wait(30s), 0) << second.output();
    const std::string out = first.output() + second.output();
    EXPECT_NE(out.find("first loss"), std::string::npos) << out;
  }

  std::string dir_;
  std::optional<PodNetwork> network_;
  std::optional<BackgroundLauncher> etcd_;
};

TEST_F(K8sPodsNetnsTest, DemoTrainsAcrossTwoPodsAndSurvivesAPodKill) {
  const Json full = render_job("demo-full");
  {
    BackgroundLauncher pod0(pod_command(full, 0), dir_ + "/full-0.log");
    BackgroundLauncher pod1(pod_command(full, 1), dir_ + "/full-1.log");
    ASSERT_EQ(pod0.wait(180s), 0) << pod0.output() << pod1.output();
    ASSERT_EQ(pod1.wait(30s), 0) << pod1.output();
  }
  const auto full_records = testing::metric_records(dir_ + "/demo-full/metrics.jsonl");
  ASSERT_EQ(full_records.size(), 20u);

  const Json killed = render_job("demo-kill");
  BackgroundLauncher pod0(pod_command(killed, 0), dir_ + "/kill-0.log");
  std::optional<BackgroundLauncher> pod1;
  pod1.emplace(pod_command(killed, 1), dir_ + "/kill-1-first.log");
  const int64_t seen = testing::wait_for_mid_run_step(dir_ + "/demo-kill/metrics.jsonl");
  ASSERT_LT(seen, 20) << "the run ended before the kill; nothing was tested";
  ASSERT_GE(seen, 7) << pod0.output() << pod1->output();
  network_->kill_pod("worker-1");
  pod1->wait(10s);
  pod1.emplace(pod_command(killed, 1), dir_ + "/kill-1-again.log");  // restartPolicy: OnFailure
  ASSERT_EQ(pod0.wait(240s), 0) << pod0.output() << pod1->output();
  ASSERT_EQ(pod1->wait(30s), 0) << pod1->output();
  const std::string out = pod0.output() + pod1->output();
  EXPECT_NE(out.find("restarting the worker group (restart 1 of 2)"), std::string::npos) << out;
  EXPECT_EQ(testing::metric_steps(dir_ + "/demo-kill/metrics.jsonl"), testing::one_to(20));
  const auto killed_records = testing::metric_records(dir_ + "/demo-kill/metrics.jsonl");
  ASSERT_EQ(killed_records.size(), 20u);
  EXPECT_EQ(killed_records.back().loss, full_records.back().loss)
      << "final loss differs from the uninterrupted run";
  const std::string full_model = testing::read_text(dir_ + "/demo-full/out/model.safetensors");
  ASSERT_FALSE(full_model.empty());
  EXPECT_EQ(full_model, testing::read_text(dir_ + "/demo-kill/out/model.safetensors"));
  etcd_.reset();
  network_.reset();
  fs::remove_all(dir_);
}

TEST_F(K8sPodsNetnsTest, JobSetAndTrainJobPodsReachNodeZeroByTheirHostNaming) {
  ManifestFlags flags;
  flags.image = "registry.example/shardtrain:test";
  flags.nodes = "2";
  flags.gpus_per_node = "0";
  flags.max_restarts = "0";
  flags.termination_grace = "60";

  // JobSet, etcd rendezvous: the pod template sets every PET_* itself.
  flags.kind = "jobset";
  flags.name = "names-js";
  flags.rdzv = "etcd";
  flags.worker_command = short_run("names-js");
  add_named_pods("names-js", 20);
  const Json jobset = render_manifests(resolve_manifest_options(flags))[2];
  ASSERT_EQ(jobset["kind"], "JobSet");
  const Json& js_container =
      jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0];
  expect_both_train("names-js",
                    named_pod_command("names-js", 0, js_container, js_container["command"], {}),
                    named_pod_command("names-js", 1, js_container, js_container["command"], {}));

  // TrainJob, static rendezvous: the torch plugin of Kubeflow Trainer v2 sets PET_* with node
  // 0 as <job>-node-0-0.<job> (pkg/runtime/framework/plugins/torch).
  flags.kind = "trainjob";
  flags.name = "names-tj";
  flags.rdzv = "static";
  flags.worker_command = short_run("names-tj");
  add_named_pods("names-tj", 30);
  const std::vector<Json> docs = render_manifests(resolve_manifest_options(flags));
  ASSERT_EQ(docs[1]["kind"], "TrainJob");
  const Json& runtime_pod = docs[0]["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]
                                ["spec"]["template"]["spec"];
  const Json& command = docs[1]["spec"]["trainer"]["command"];
  const auto trainer_env = [](int rank) {
    return std::map<std::string, std::string>{{"PET_NNODES", "2"},
                                              {"PET_NPROC_PER_NODE", "1"},
                                              {"PET_NODE_RANK", std::to_string(rank)},
                                              {"PET_MASTER_ADDR", "names-tj-node-0-0.names-tj"},
                                              {"PET_MASTER_PORT", "29500"}};
  };
  expect_both_train(
      "names-tj",
      named_pod_command("names-tj", 0, runtime_pod["containers"][0], command, trainer_env(0)),
      named_pod_command("names-tj", 1, runtime_pod["containers"][0], command, trainer_env(1)));
  etcd_.reset();
  network_.reset();
  fs::remove_all(dir_);
}

}  // namespace
}  // namespace shardtrain::launch::k8s
