// The flags a team adds around a job (manifest_team_options.cpp), each rendered where the
// cluster reads it, and each bad value one error line naming the flag with the text escaped.
#include <gtest/gtest.h>

#include "core/testing/test_support.h"
#include "launch/k8s/manifests.h"
#include "launch/k8s/text_checks.h"

namespace shardtrain::launch::k8s {
namespace {

using testing::error_of;

ManifestFlags base_flags(const std::string& kind) {
  ManifestFlags flags;
  flags.kind = kind;
  flags.name = "llama-ft";
  flags.image = "registry.example/shardtrain:0.1.0";
  flags.nodes = "2";
  flags.worker_command = {"train", "--config", "/etc/job.toml"};
  return flags;
}

std::vector<Json> render(const ManifestFlags& flags) {
  return render_manifests(resolve_manifest_options(flags));
}

const Json& pytorch_pod(const std::vector<Json>& docs) {
  for (const Json& doc : docs) {
    if (doc["kind"] == "PyTorchJob")
      return doc["spec"]["pytorchReplicaSpecs"]["Master"]["template"];
  }
  static const Json none;
  return none;
}

Json env_entry(const Json& container, const std::string& name) {
  for (const Json& entry : container["env"]) {
    if (entry["name"] == name) return entry;
  }
  return nullptr;
}

std::string error_with(const std::string& kind, const std::function<void(ManifestFlags&)>& change) {
  ManifestFlags flags = base_flags(kind);
  flags.gpus_per_node = "8";
  change(flags);
  return error_of([&] { resolve_manifest_options(flags); });
}

TEST(ManifestTeamOptions, InstanceTypeGivesDevicesRequestsAndHugePages) {
  ManifestFlags flags = base_flags("pytorchjob");
  flags.instance_type = "p5.48xlarge";
  const Json container = pytorch_pod(render(flags))["spec"]["containers"][0];
  const Json& requests = container["resources"]["requests"];
  EXPECT_EQ(requests["nvidia.com/gpu"], 8);
  EXPECT_EQ(requests["vpc.amazonaws.com/efa"], 32);
  EXPECT_EQ(requests["cpu"], "168");  // 7/8 of 192 vCPUs
  EXPECT_EQ(requests["memory"], "1792Gi");
  EXPECT_EQ(container["resources"]["limits"]["hugepages-2Mi"], "5120Mi");
  EXPECT_TRUE(env_entry(container, "FI_EFA_USE_DEVICE_RDMA").is_null());  // auto: detected

  flags.instance_type = "g6.12xlarge";
  flags.cpu = "40";
  flags.memory = "150Gi";
  flags.hugepages = "0";
  const Json g6 = pytorch_pod(render(flags))["spec"]["containers"][0];
  EXPECT_EQ(g6["resources"]["requests"], (Json{{"cpu", "40"},
                                               {"memory", "150Gi"},
                                               {"nvidia.com/gpu", 4},
                                               {"vpc.amazonaws.com/efa", 1}}));
  EXPECT_EQ(g6["resources"]["limits"]["memory"], "150Gi");
}

TEST(ManifestTeamOptions, EfaRdmaIsRenderedOnlyWhereTheDeviceHasIt) {
  ManifestFlags flags = base_flags("pytorchjob");
  flags.instance_type = "p4d.24xlarge";
  flags.efa_rdma = "on";
  const Json on = pytorch_pod(render(flags))["spec"]["containers"][0];
  EXPECT_EQ(env_entry(on, "FI_EFA_USE_DEVICE_RDMA")["value"], "1");
  flags.efa_rdma = "off";
  EXPECT_EQ(env_entry(pytorch_pod(render(flags))["spec"]["containers"][0],
                      "FI_EFA_USE_DEVICE_RDMA")["value"],
            "0");
  EXPECT_EQ(error_with("pytorchjob",
                       [](ManifestFlags& f) {
                         f.gpus_per_node.reset();
                         f.instance_type = "g6e.12xlarge";
                         f.efa_rdma = "on";
                       }),
            "--efa-rdma on: g6e.12xlarge has no EFA RDMA read, and libfabric aborts when "
            "FI_EFA_USE_DEVICE_RDMA=1 meets such a device; use --efa-rdma auto");
  EXPECT_EQ(error_with("pytorchjob", [](ManifestFlags& f) { f.efa_rdma = "on"; }),
            "--efa-rdma on needs EFA: give --efa-per-node or an --instance-type with EFA");
  EXPECT_NE(error_with("pytorchjob", [](ManifestFlags& f) { f.instance_type = "p9.huge"; })
                .find("--instance-type 'p9.huge': not a type shardtrain knows"),
            std::string::npos);
}

TEST(ManifestTeamOptions, EnvReplacesOrAppends) {
  ManifestFlags flags = base_flags("pytorchjob");
  flags.gpus_per_node = "8";
  flags.env = {"NCCL_SOCKET_IFNAME=ens5", "NCCL_DEBUG=INFO", "ODD=[1, 2]"};
  const Json container = pytorch_pod(render(flags))["spec"]["containers"][0];
  EXPECT_EQ(env_entry(container, "NCCL_SOCKET_IFNAME")["value"], "ens5");
  EXPECT_EQ(env_entry(container, "NCCL_DEBUG")["value"], "INFO");
  EXPECT_EQ(env_entry(container, "ODD")["value"], "[1, 2]");
  EXPECT_EQ(error_with("pytorchjob", [](ManifestFlags& f) { f.env = {"1BAD=x"}; }),
            "--env '1BAD=x': expected NAME=VALUE with a variable name, e.g. NCCL_DEBUG=INFO");
}

TEST(ManifestTeamOptions, MetricsLabelsAndGpuMetrics) {
  ManifestFlags flags = base_flags("jobset");
  flags.gpus_per_node = "4";
  flags.metrics_port = "9400";
  flags.pod_monitor = true;
  flags.monitor_labels = {"release=kube-prometheus-stack"};
  flags.metrics_gpu = "false";
  const std::vector<Json> docs = render(flags);
  const Json& monitor = docs[2];
  ASSERT_EQ(monitor["kind"], "PodMonitor");
  EXPECT_EQ(monitor["metadata"]["labels"]["release"], "kube-prometheus-stack");
  const Json& command = docs[0]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
                            ["containers"][0]["command"];
  const auto at = std::find(command.begin(), command.end(), "--metrics-gpu");
  ASSERT_NE(at, command.end());
  EXPECT_EQ(*(at + 1), "false");
  EXPECT_EQ(error_with("jobset", [](ManifestFlags& f) { f.metrics_gpu = "no"; }),
            "--metrics-gpu 'no': expected true or false (false where dcgm-exporter runs)");
  EXPECT_EQ(error_with("jobset", [](ManifestFlags& f) { f.monitor_labels = {"release=x"}; }),
            "--monitor-label labels the PodMonitor: add --pod-monitor (and --metrics-port)");
}

TEST(ManifestTeamOptions, RayHeadHasItsOwnPlacement) {
  ManifestFlags flags = base_flags("rayjob");
  flags.gpus_per_node = "4";
  flags.node_selectors = {"node.kubernetes.io/instance-type=g6.12xlarge"};
  flags.tolerations = {"dedicated=gpu:NoSchedule"};
  flags.head_node_selectors = {"role=cpu"};
  flags.head_tolerations = {"role:NoExecute"};
  const Json cluster = render(flags)[0]["spec"]["rayClusterSpec"];
  const Json& head = cluster["headGroupSpec"]["template"]["spec"];
  EXPECT_EQ(head["nodeSelector"], (Json{{"role", "cpu"}}));
  EXPECT_EQ(head["tolerations"],
            Json::array({Json{{"key", "role"}, {"operator", "Exists"}, {"effect", "NoExecute"}}}));
  const Json& workers = cluster["workerGroupSpecs"][0]["template"]["spec"];
  EXPECT_EQ(workers["nodeSelector"]["node.kubernetes.io/instance-type"], "g6.12xlarge");
  EXPECT_EQ(workers["tolerations"][1], (Json{{"key", "dedicated"},
                                             {"operator", "Equal"},
                                             {"value", "gpu"},
                                             {"effect", "NoSchedule"}}));
  EXPECT_EQ(error_with("pytorchjob", [](ManifestFlags& f) { f.head_node_selectors = {"a=b"}; }),
            "--head-node-selector and --head-toleration place a RayJob's head; pytorchjob has "
            "none");
  EXPECT_NE(error_with("rayjob", [](ManifestFlags& f) { f.tolerations = {"x:Sometimes"}; })
                .find("--toleration 'x:Sometimes': expected KEY[=VALUE][:EFFECT]"),
            std::string::npos);
}

TEST(ManifestTeamOptions, LabelsQueuePriorityAccountSecretsAndConfig) {
  ManifestFlags flags = base_flags("pytorchjob");
  flags.gpus_per_node = "8";
  flags.labels = {"team=ml"};
  flags.annotations = {"example.com/owner=Ana María"};
  flags.queue = "team-a";
  flags.priority_class = "high";
  flags.service_account = "shardtrain-s3";
  flags.hf_token_secret = "hf";
  flags.config_file = "job.toml";
  flags.config_file_text = "[train]\nsteps = 5\n";
  flags.worker_command = {"train", "--steps", "5"};
  flags.network_policy = true;
  const std::vector<Json> docs = render(flags);
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0]["kind"], "ConfigMap");
  EXPECT_EQ(docs[0]["data"]["job.toml"], "[train]\nsteps = 5\n");
  const Json& job = docs[1];
  EXPECT_EQ(job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "team-a");
  EXPECT_EQ(job["metadata"]["labels"]["team"], "ml");
  EXPECT_EQ(job["metadata"]["annotations"]["example.com/owner"], "Ana María");
  const Json& pod = pytorch_pod(docs);
  EXPECT_EQ(pod["metadata"]["labels"]["team"], "ml");
  EXPECT_EQ(pod["spec"]["priorityClassName"], "high");
  EXPECT_EQ(pod["spec"]["serviceAccountName"], "shardtrain-s3");
  const Json& container = pod["spec"]["containers"][0];
  EXPECT_EQ(env_entry(container, "HF_TOKEN")["valueFrom"]["secretKeyRef"],
            (Json{{"name", "hf"}, {"key", "token"}}));
  const Json& command = container["command"];
  const auto train = std::find(command.begin(), command.end(), "train");
  ASSERT_NE(train, command.end());
  EXPECT_EQ(*(train + 1), "--config");
  EXPECT_EQ(*(train + 2), "/etc/shardtrain/job.toml");
  EXPECT_EQ(container["volumeMounts"].back()["mountPath"], "/etc/shardtrain");
  EXPECT_EQ(pod["spec"]["volumes"].back()["configMap"]["name"], "llama-ft-config");
  const Json& policy = docs[2];
  EXPECT_EQ(policy["kind"], "NetworkPolicy");
  EXPECT_EQ(policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/instance"], "llama-ft");
  EXPECT_EQ(policy["spec"]["ingress"][0]["from"][0]["podSelector"], policy["spec"]["podSelector"]);

  EXPECT_NE(error_with("pytorchjob",
                       [](ManifestFlags& f) {
                         f.config_file = "job.toml";
                         f.config_file_text = "x = 1\n";
                       })
                .find("--config-file and the worker command's --config both name"),
            std::string::npos);
  EXPECT_EQ(error_with("pytorchjob", [](ManifestFlags& f) { f.queue = "Team A"; }),
            "--queue 'Team A': expected a Kubernetes object name (lower-case letters, digits, "
            "'-', '.'), e.g. team-a-queue (a Kueue LocalQueue)");
}

TEST(ManifestTeamOptions, ErrorLinesEscapeWhatTheyQuote) {
  EXPECT_EQ(quote_for_error("a\nb\x7f"
                            "c\xc2\x85"
                            "d\xe2\x80\xa8"
                            "e\xff'"),
            "'a\\nb\\x7fc\\u0085d\\u2028e\\xff\\''");
  EXPECT_EQ(quote_for_error("é"), "'é'");
  EXPECT_EQ(quote_for_error(std::string(300, 'x')), "'" + std::string(200, 'x') + "'...");
  const std::string nul_error = error_with("pytorchjob", [](ManifestFlags& f) {
    f.worker_command = {"train", "--config", "a\nb.toml"};
  });
  EXPECT_EQ(nul_error,
            "worker command: the argument 'a\\nb.toml' holds a newline or NUL; pass it in a "
            "config file");
  EXPECT_EQ(error_with("pytorchjob",
                       [](ManifestFlags& f) {
                         f.worker_command = {"train", "--config", "\xff\xfe.toml"};
                       }),
            "worker command: the argument '\\xff\\xfe.toml' is not valid UTF-8; pass UTF-8 text");
  EXPECT_EQ(error_with("pytorchjob", [](ManifestFlags& f) { f.kind = "job\x1b[2J"; }),
            "unknown KIND 'job\\x1b[2J': expected pytorchjob, trainjob, jobset or rayjob");
}

}  // namespace
}  // namespace shardtrain::launch::k8s
