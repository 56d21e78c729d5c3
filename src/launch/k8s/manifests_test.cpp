// The rendered objects of each KIND: what the operators read (replica layout, elastic policy,
// ports, PET_* sources), what every training pod gets (GPU/EFA resources, NCCL/EFA env,
// /dev/shm, checkpoint volume, doctor init container, grace period), and the bad inputs.
#include "launch/k8s/manifests.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/testing/test_support.h"

namespace shardtrain::launch::k8s {
namespace {

using testing::error_of;

ManifestFlags base_flags(const std::string& kind) {
  ManifestFlags flags;
  flags.kind = kind;
  flags.name = "llama-ft";
  flags.image = "registry.example/shardtrain:0.1.0";
  flags.nodes = "2";
  flags.gpus_per_node = "8";
  flags.worker_command = {"--", "train", "--config", "/etc/job.toml"};
  return flags;
}

std::vector<Json> render(const ManifestFlags& flags) {
  return render_manifests(resolve_manifest_options(flags));
}

// The env entry named `name` of `container`, or null.
Json env_entry(const Json& container, const std::string& name) {
  for (const Json& entry : container["env"]) {
    if (entry["name"] == name) return entry;
  }
  return nullptr;
}

Json words(std::initializer_list<const char*> list) {
  Json out = Json::array();
  for (const char* word : list) out.push_back(word);
  return out;
}

TEST(ManifestsTest, StaticPyTorchJobHasOneMasterAndTheRestWorkers) {
  ManifestFlags flags = base_flags("pytorchjob");
  flags.nodes = "4";
  flags.efa_per_node = "32";
  const std::vector<Json> docs = render(flags);
  ASSERT_EQ(docs.size(), 1u);
  const Json& job = docs[0];
  EXPECT_EQ(job["apiVersion"], "kubeflow.org/v1");
  EXPECT_EQ(job["spec"]["nprocPerNode"], "8");
  EXPECT_FALSE(job["spec"].contains("elasticPolicy"));
  const Json& replicas = job["spec"]["pytorchReplicaSpecs"];
  EXPECT_EQ(replicas["Master"]["replicas"], 1);
  EXPECT_EQ(replicas["Worker"]["replicas"], 3);
  const Json& pod = replicas["Worker"]["template"]["spec"];
  const Json& container = pod["containers"][0];
  EXPECT_EQ(container["name"], "pytorch");
  EXPECT_EQ(container["ports"][0],
            (Json{{"name", "pytorchjob-port"}, {"containerPort", 29500}, {"protocol", "TCP"}}));
  EXPECT_EQ(container["command"],
            words({"shardtrain", "launch", "--rdzv-id", "llama-ft", "--max-restarts", "3",
                   "--stop-grace", "270", "--", "train", "--config", "/etc/job.toml"}));
  // Devices and huge pages: requests = limits; memory request = limit; cpu a request only.
  EXPECT_EQ(container["resources"], (Json{{"requests",
                                           {{"cpu", "48"},
                                            {"memory", "384Gi"},
                                            {"nvidia.com/gpu", 8},
                                            {"vpc.amazonaws.com/efa", 32},
                                            {"hugepages-2Mi", "5120Mi"}}},
                                          {"limits",
                                           {{"memory", "384Gi"},
                                            {"nvidia.com/gpu", 8},
                                            {"vpc.amazonaws.com/efa", 32},
                                            {"hugepages-2Mi", "5120Mi"}}}}));
  // AWS's guidance with libfabric >= 1.18 / aws-ofi-nccl >= 1.7: neither is set by default.
  EXPECT_TRUE(env_entry(container, "FI_PROVIDER").is_null());
  EXPECT_TRUE(env_entry(container, "FI_EFA_USE_DEVICE_RDMA").is_null());
  EXPECT_EQ(env_entry(container, "NCCL_SOCKET_IFNAME")["value"], "eth0");
  // A config error (exit 2) fails the job instead of restarting the pod.
  EXPECT_EQ(replicas["Worker"]["restartPolicy"], "ExitCode");
  EXPECT_EQ(pod["restartPolicy"], "Never");
  EXPECT_EQ(env_entry(container, "SHARDTRAIN_STORE_SECRET")["valueFrom"]["secretKeyRef"],
            (Json{{"name", "llama-ft-store-secret"}, {"key", "token"}, {"optional", false}}));
  EXPECT_EQ(pod["terminationGracePeriodSeconds"], 300);
  EXPECT_EQ(pod["initContainers"][0]["command"],
            words({"shardtrain", "doctor", "--expect-transport", "efa"}));
  // The doctor judges the trainer's environment with the trainer's capabilities.
  EXPECT_EQ(pod["initContainers"][0]["env"], container["env"]);
  EXPECT_EQ(pod["initContainers"][0]["securityContext"]["capabilities"]["add"][0], "IPC_LOCK");
  EXPECT_EQ(pod["volumes"][0],
            (Json{{"name", "dshm"}, {"emptyDir", {{"medium", "Memory"}, {"sizeLimit", "64Gi"}}}}));
  EXPECT_EQ(container["volumeMounts"][0]["mountPath"], "/dev/shm");
}

TEST(ManifestsTest, ElasticPyTorchJobMeetsInTheEtcdItRenders) {
  ManifestFlags flags = base_flags("pytorchjob");
  flags.nodes = "4";
  flags.min_nodes = "2";
  const std::vector<Json> docs = render(flags);
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0]["kind"], "Service");
  EXPECT_EQ(docs[0]["metadata"]["name"], "llama-ft-etcd");
  EXPECT_EQ(docs[1]["kind"], "Deployment");
  EXPECT_EQ(docs[1]["spec"]["selector"]["matchLabels"], docs[0]["spec"]["selector"]);
  const Json& spec = docs[2]["spec"];
  EXPECT_EQ(spec["elasticPolicy"]["rdzvBackend"], "etcd");
  EXPECT_EQ(spec["elasticPolicy"]["rdzvHost"], "llama-ft-etcd");
  EXPECT_EQ(spec["elasticPolicy"]["rdzvPort"], 2379);
  EXPECT_EQ(spec["elasticPolicy"]["minReplicas"], 2);
  EXPECT_EQ(spec["elasticPolicy"]["maxReplicas"], 4);
  EXPECT_FALSE(spec["pytorchReplicaSpecs"].contains("Master"));
  EXPECT_EQ(spec["pytorchReplicaSpecs"]["Worker"]["replicas"], 4);
  const Json& container =
      spec["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0];
  // The operator sets the rendezvous variables from elasticPolicy; the command adds nothing.
  EXPECT_EQ(container["command"], words({"shardtrain", "launch", "--stop-grace", "270", "--",
                                         "train", "--config", "/etc/job.toml"}));
  EXPECT_EQ(
      env_entry(container, "SHARDTRAIN_STORE_SECRET")["valueFrom"]["secretKeyRef"]["optional"],
      true);
}

TEST(ManifestsTest, TrainJobReferencesTheRuntimeItRenders) {
  ManifestFlags flags = base_flags("trainjob");
  flags.rdzv = "etcd";
  const std::vector<Json> docs = render(flags);
  ASSERT_EQ(docs.size(), 4u);
  const Json& runtime = docs[2];
  const Json& trainjob = docs[3];
  // Namespaced: no cluster RBAC, no collision across namespaces.
  EXPECT_EQ(runtime["kind"], "TrainingRuntime");
  EXPECT_EQ(runtime["metadata"]["namespace"], "default");
  EXPECT_EQ(trainjob["spec"]["runtimeRef"]["name"], runtime["metadata"]["name"]);
  EXPECT_EQ(trainjob["spec"]["runtimeRef"]["kind"], "TrainingRuntime");
  const Json& replicated = runtime["spec"]["template"]["spec"]["replicatedJobs"][0];
  EXPECT_EQ(replicated["name"], "node");
  EXPECT_EQ(
      replicated["template"]["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"],
      "trainer");
  const Json& container = replicated["template"]["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(container["name"], "node");
  EXPECT_FALSE(container.contains("command"));
  EXPECT_EQ(trainjob["spec"]["trainer"]["numNodes"], 2);
  EXPECT_EQ(
      trainjob["spec"]["trainer"]["command"],
      words({"shardtrain", "launch", "--rdzv-backend", "etcd", "--rdzv-endpoint",
             "llama-ft-etcd:2379", "--nnodes", "2:2", "--rdzv-id", "llama-ft", "--max-restarts",
             "3", "--stop-grace", "270", "--", "train", "--config", "/etc/job.toml"}));
}

TEST(ManifestsTest, JobSetSetsThePetVariablesAndAServiceForNodeZero) {
  ManifestFlags flags = base_flags("jobset");
  flags.gpus_per_node = "0";
  const std::vector<Json> docs = render(flags);
  ASSERT_EQ(docs.size(), 2u);
  const Json& job = docs[0]["spec"]["replicatedJobs"][0]["template"]["spec"];
  EXPECT_EQ(job["completionMode"], "Indexed");
  EXPECT_EQ(job["parallelism"], 2);
  const Json& container = job["template"]["spec"]["containers"][0];
  EXPECT_EQ(
      container["resources"],  // a CPU job: requests, no devices
      (Json{{"requests", {{"cpu", "2"}, {"memory", "8Gi"}}}, {"limits", {{"memory", "8Gi"}}}}));
  // Exit 2 fails the Job through its podFailurePolicy, and the JobSet through the rule.
  EXPECT_EQ(job["podFailurePolicy"]["rules"][0],
            (Json{{"action", "FailJob"},
                  {"onExitCodes", {{"operator", "In"}, {"values", Json::array({2})}}}}));
  EXPECT_EQ(job["template"]["spec"]["restartPolicy"], "Never");
  EXPECT_EQ(docs[0]["spec"]["failurePolicy"]["rules"][0]["onJobFailureReasons"][0],
            "PodFailurePolicy");
  EXPECT_EQ(docs[0]["spec"]["failurePolicy"]["rules"][0]["action"], "FailJobSet");
  EXPECT_TRUE(env_entry(container, "NCCL_SOCKET_IFNAME").is_null());
  EXPECT_EQ(env_entry(container, "PET_NODE_RANK")["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.annotations['batch.kubernetes.io/job-completion-index']");
  EXPECT_EQ(env_entry(container, "PET_NNODES")["value"], "2");
  EXPECT_EQ(env_entry(container, "PET_NPROC_PER_NODE")["value"], "1");
  EXPECT_EQ(env_entry(container, "PET_MASTER_ADDR")["value"], "llama-ft-node0");
  EXPECT_EQ(env_entry(container, "PET_RDZV_BACKEND")["value"], "static");
  const Json& service = docs[1];
  EXPECT_EQ(service["metadata"]["name"], "llama-ft-node0");
  EXPECT_EQ(service["spec"]["clusterIP"], "None");
  EXPECT_EQ(service["spec"]["selector"]["batch.kubernetes.io/job-completion-index"], "0");
  EXPECT_EQ(service["spec"]["selector"]["jobset.sigs.k8s.io/jobset-name"], "llama-ft");
  EXPECT_EQ(job["template"]["spec"]["initContainers"][0]["command"],
            words({"shardtrain", "doctor", "--expect-transport", "socket"}));
}

TEST(ManifestsTest, RayJobRunsTheDriverOnACpuHeadWithGpuWorkers) {
  ManifestFlags flags = base_flags("rayjob");
  flags.worker_command = {"train", "--config", "/etc/my job.toml"};
  const std::vector<Json> docs = render(flags);
  ASSERT_EQ(docs.size(), 1u);
  const Json& spec = docs[0]["spec"];
  EXPECT_EQ(spec["entrypoint"],
            "python3 /usr/share/shardtrain/ray/shardtrain_ray.py --nodes 2 --gpus-per-node 8 "
            "--nproc-per-node 8 --run-id llama-ft --max-restarts 3 --stop-grace 270 -- train "
            "--config '/etc/my job.toml'");
  const Json& cluster = spec["rayClusterSpec"];
  EXPECT_EQ(cluster["headGroupSpec"]["rayStartParams"]["num-cpus"], "0");
  const Json& head = cluster["headGroupSpec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(head["resources"]["limits"], (Json{{"cpu", "2"}, {"memory", "8Gi"}}));
  const Json& workers = cluster["workerGroupSpecs"][0];
  EXPECT_EQ(workers["replicas"], 2);
  EXPECT_EQ(workers["minReplicas"], 2);
  EXPECT_EQ(workers["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
            8);
  EXPECT_FALSE(workers["template"]["spec"]["containers"][0].contains("command"));
}

TEST(ManifestsTest, CheckpointVolumeMetricsAndScheduling) {
  ManifestFlags flags = base_flags("pytorchjob");
  flags.pvc = "ckpt-llama:/ckpt";
  flags.metrics_port = "9400";
  flags.pod_monitor = true;
  flags.termination_grace = "900";
  flags.node_selectors = {"node.kubernetes.io/instance-type=p5.48xlarge"};
  const std::vector<Json> docs = render(flags);
  ASSERT_EQ(docs.size(), 2u);
  const Json& template_ = docs[0]["spec"]["pytorchReplicaSpecs"]["Master"]["template"];
  const Json& pod = template_["spec"];
  const Json& container = pod["containers"][0];
  const Json& command = container["command"];
  EXPECT_EQ(command[command.size() - 2], "--checkpoint-dir");
  EXPECT_EQ(command.back(), "/ckpt/checkpoints");
  // The launcher serves the node's /metrics for all of its workers (launch/node_metrics.h).
  const auto metrics_flag = std::find(command.begin(), command.end(), "--metrics-port");
  ASSERT_NE(metrics_flag, command.end());
  EXPECT_EQ(*(metrics_flag + 1), "9400");
  EXPECT_LT(metrics_flag - command.begin(),
            std::find(command.begin(), command.end(), "--") - command.begin());
  EXPECT_EQ(std::count(command.begin(), command.end(), "--metrics.port=9400"), 0);
  EXPECT_EQ(command[command.size() - 7], "870");  // --stop-grace: 900 - 30
  EXPECT_EQ(pod["terminationGracePeriodSeconds"], 900);
  EXPECT_EQ(pod["volumes"][1]["persistentVolumeClaim"]["claimName"], "ckpt-llama");
  EXPECT_EQ(container["volumeMounts"][1]["mountPath"], "/ckpt");
  EXPECT_EQ(pod["initContainers"][0]["command"].back(), "/ckpt/checkpoints");
  EXPECT_EQ(pod["nodeSelector"]["node.kubernetes.io/instance-type"], "p5.48xlarge");
  EXPECT_EQ(template_["metadata"]["annotations"]["prometheus.io/port"], "9400");
  EXPECT_EQ(container["ports"][1]["name"], "metrics");
  EXPECT_EQ(docs[1]["kind"], "PodMonitor");
  EXPECT_EQ(docs[1]["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"], "llama-ft");

  // A checkpoint dir the user names is kept, not doubled.
  flags.worker_command = {"train", "--config", "x.toml", "--checkpoint-dir", "/elsewhere"};
  const Json again = render(flags)[0]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"];
  EXPECT_EQ(again["containers"][0]["command"].back(), "/elsewhere");
}

TEST(ManifestsTest, BadInputNamesTheFlag) {
  const auto error_with = [](const std::function<void(ManifestFlags&)>& change) {
    ManifestFlags flags = base_flags("pytorchjob");
    change(flags);
    return error_of([&] { resolve_manifest_options(flags); });
  };
  EXPECT_EQ(error_with([](ManifestFlags& f) { f.nodes = "0"; }),
            "--nodes '0': expected an integer from 1 to 10000");
  EXPECT_EQ(error_with([](ManifestFlags& f) { f.shm_size = "0"; }),
            "--shm-size '0': /dev/shm must be larger than 0 (NCCL and Gloo need it), e.g. 64Gi");
  EXPECT_EQ(error_with([](ManifestFlags& f) { f.gpus_per_node.reset(); }),
            "--gpus-per-node is required, e.g. --gpus-per-node 8 (0 for a CPU job)");
  EXPECT_EQ(error_with([](ManifestFlags& f) { f.kind = "mpijob"; }),
            "unknown KIND 'mpijob': expected pytorchjob, trainjob, jobset or rayjob");
  EXPECT_EQ(error_with([](ManifestFlags& f) { f.min_nodes = "3"; }),
            "--min-nodes 3 is greater than --nodes 2; an elastic job runs between --min-nodes "
            "and --nodes nodes");
  EXPECT_NE(error_with([](ManifestFlags& f) { f.image = "my image"; }).find("--image 'my image'"),
            std::string::npos);
  EXPECT_NE(error_with([](ManifestFlags& f) {
              f.worker_command = {"--", "python", "x.py"};
            }).find("worker command 'python'"),
            std::string::npos);
  EXPECT_NE(error_with([](ManifestFlags& f) { f.worker_command.clear(); }).find("nothing to run"),
            std::string::npos);
  EXPECT_NE(error_with([](ManifestFlags& f) {
              f.min_nodes = "1";
              f.rdzv = "static";
            }).find("needs --rdzv etcd"),
            std::string::npos);
  EXPECT_NE(error_with([](ManifestFlags& f) { f.name = "Llama_FT"; }).find("--name 'Llama_FT'"),
            std::string::npos);
  EXPECT_NE(error_with([](ManifestFlags& f) { f.pvc = "ckpt"; }).find("--pvc 'ckpt'"),
            std::string::npos);
  EXPECT_NE(error_with([](ManifestFlags& f) { f.pod_monitor = true; }).find("--metrics-port"),
            std::string::npos);
  EXPECT_NE(error_with([](ManifestFlags& f) { f.shm_size = "lots"; }).find("--shm-size 'lots'"),
            std::string::npos);
  EXPECT_NE(error_with([](ManifestFlags& f) {
              f.kind = "rayjob";
              f.min_nodes = "1";
            }).find("rayjob"),
            std::string::npos);
  EXPECT_EQ(error_with([](ManifestFlags&) {}), "");
}

}  // namespace
}  // namespace shardtrain::launch::k8s
