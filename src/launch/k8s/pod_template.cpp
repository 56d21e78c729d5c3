#include "launch/k8s/pod_template.h"

#include <algorithm>

namespace shardtrain::launch::k8s {
namespace {

constexpr const char* kShmVolume = "dshm";
constexpr const char* kCheckpointVolume = "checkpoints";

bool names_checkpoint_dir(const std::vector<std::string>& command) {
  return std::any_of(command.begin(), command.end(), [](const std::string& word) {
    return word == "--checkpoint-dir" || word.rfind("--checkpoint-dir=", 0) == 0 ||
           word.rfind("--train.checkpoint_dir=", 0) == 0;
  });
}

std::string checkpoint_dir(const ManifestOptions& options) {
  return options.checkpoint->mount_path + "/checkpoints";
}

Json volume_mounts(const ManifestOptions& options) {
  Json mounts = Json::array();
  mounts.push_back({{"name", kShmVolume}, {"mountPath", "/dev/shm"}});
  if (options.checkpoint) {
    mounts.push_back({{"name", kCheckpointVolume}, {"mountPath", options.checkpoint->mount_path}});
  }
  return mounts;
}

Json volumes(const ManifestOptions& options) {
  Json list = Json::array();
  list.push_back({{"name", kShmVolume},
                  {"emptyDir", {{"medium", "Memory"}, {"sizeLimit", options.shm_size}}}});
  if (options.checkpoint) {
    list.push_back({{"name", kCheckpointVolume},
                    {"persistentVolumeClaim", {{"claimName", options.checkpoint->claim_name}}}});
  }
  return list;
}

// Gloo (CPU ranks, host-staged GPUs) and NCCL's bootstrap and socket fallback use the pod's own
// network (eth0); NCCL over EFA goes through aws-ofi-nccl (the image's libfabric and plugin).
Json network_env(const ManifestOptions& options) {
  Json env = Json::array();
  env.push_back(env_value("SHARDTRAIN_GLOO_IFNAME", "eth0"));
  if (options.gpus_per_node == 0) return env;
  env.push_back(env_value("NCCL_SOCKET_IFNAME", "eth0"));
  if (options.efa_per_node > 0) {
    env.push_back(env_value("FI_PROVIDER", "efa"));
    env.push_back(env_value("FI_EFA_USE_DEVICE_RDMA", "1"));
    env.push_back(env_value("FI_EFA_FORK_SAFE", "1"));
  }
  return env;
}

Json store_secret_env(const ManifestOptions& options) {
  // With etcd the agents share a generated secret through etcd, so the Secret is optional;
  // the static rendezvous needs it on every node.
  return {{"name", kStoreSecretEnv},
          {"valueFrom",
           {{"secretKeyRef",
             {{"name", store_secret_name(options)},
              {"key", kStoreSecretKey},
              {"optional", options.etcd}}}}}};
}

Json doctor_init_container(const ManifestOptions& options) {
  Json command = {"shardtrain", "doctor", "--expect-transport",
                  options.efa_per_node > 0 ? "efa" : "socket"};
  if (options.checkpoint) {
    command.push_back("--checkpoint-dir");
    command.push_back(checkpoint_dir(options));
  }
  Json container = {{"name", "doctor"},
                    {"image", options.image},
                    {"imagePullPolicy", "IfNotPresent"},
                    {"command", command}};
  const Json resources = gpu_resources(options);
  if (!resources.empty()) container["resources"] = resources;
  container["volumeMounts"] = volume_mounts(options);
  return container;
}

}  // namespace

std::string store_secret_name(const ManifestOptions& options) {
  return options.name + "-store-secret";
}

std::string etcd_service_name(const ManifestOptions& options) { return options.name + "-etcd"; }

Json job_labels(const ManifestOptions& options) {
  return {{"app.kubernetes.io/name", "shardtrain"},
          {"app.kubernetes.io/instance", options.name},
          {"app.kubernetes.io/component", "training"}};
}

Json object_metadata(const ManifestOptions& options, const std::string& name, bool namespaced) {
  Json metadata = {{"name", name}};
  if (namespaced) metadata["namespace"] = options.namespace_name;
  metadata["labels"] = job_labels(options);
  return metadata;
}

std::vector<std::string> worker_command(const ManifestOptions& options) {
  std::vector<std::string> command = options.worker_command;
  if (command.front() != "train") return command;
  if (options.checkpoint && !names_checkpoint_dir(command)) {
    command.push_back("--checkpoint-dir");
    command.push_back(checkpoint_dir(options));
  }
  return command;
}

Json launch_command(const ManifestOptions& options, const std::vector<std::string>& launch_flags) {
  Json command = {"shardtrain", "launch"};
  for (const std::string& flag : launch_flags) command.push_back(flag);
  if (options.metrics_port > 0) {
    command.push_back("--metrics-port");
    command.push_back(std::to_string(options.metrics_port));
  }
  command.push_back("--stop-grace");
  command.push_back(std::to_string(options.termination_grace_s - 30));
  command.push_back("--");
  for (const std::string& word : worker_command(options)) command.push_back(word);
  return command;
}

Json env_value(const std::string& name, const std::string& value) {
  return {{"name", name}, {"value", value}};
}

Json env_field(const std::string& name, const std::string& field_path) {
  return {{"name", name}, {"valueFrom", {{"fieldRef", {{"fieldPath", field_path}}}}}};
}

Json gpu_resources(const ManifestOptions& options) {
  Json amounts = Json::object();
  if (options.gpus_per_node > 0) amounts["nvidia.com/gpu"] = options.gpus_per_node;
  if (options.efa_per_node > 0) amounts["vpc.amazonaws.com/efa"] = options.efa_per_node;
  if (amounts.empty()) return Json::object();
  return {{"requests", amounts}, {"limits", amounts}};
}

Json training_container(const ManifestOptions& options, const std::string& container_name,
                        const Json& command, const Json& ports, const Json& extra_env) {
  Json env = Json::array();
  env.push_back(env_field("POD_NAME", "metadata.name"));
  env.push_back(env_field("POD_NAMESPACE", "metadata.namespace"));
  env.push_back(store_secret_env(options));
  for (const Json& variable : network_env(options)) env.push_back(variable);
  for (const Json& variable : extra_env) env.push_back(variable);

  Json all_ports = ports;
  if (options.metrics_port > 0) {
    all_ports.push_back(
        {{"name", "metrics"}, {"containerPort", options.metrics_port}, {"protocol", "TCP"}});
  }
  Json container = {{"name", container_name},
                    {"image", options.image},
                    {"imagePullPolicy", "IfNotPresent"},
                    {"command", command},
                    {"env", env}};
  if (!all_ports.empty()) container["ports"] = all_ports;
  const Json resources = gpu_resources(options);
  if (!resources.empty()) container["resources"] = resources;
  container["volumeMounts"] = volume_mounts(options);
  if (options.efa_per_node > 0) {
    // EFA registers memory with the device: locked pages beyond the default limit.
    container["securityContext"] = {{"capabilities", {{"add", Json::array({"IPC_LOCK"})}}}};
  }
  return container;
}

Json training_pod_spec(const ManifestOptions& options, Json container,
                       const std::string& restart_policy) {
  Json spec = {{"restartPolicy", restart_policy},
               {"terminationGracePeriodSeconds", options.termination_grace_s}};
  if (!options.node_selector.empty()) {
    Json selector = Json::object();
    for (const auto& [key, value] : options.node_selector) selector[key] = value;
    spec["nodeSelector"] = selector;
  }
  if (options.gpus_per_node > 0) {
    spec["tolerations"] = Json::array(
        {Json{{"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}});
  }
  spec["initContainers"] = Json::array({doctor_init_container(options)});
  spec["containers"] = Json::array({std::move(container)});
  spec["volumes"] = volumes(options);
  return spec;
}

Json pod_metadata(const ManifestOptions& options, const Json& extra_labels) {
  Json labels = job_labels(options);
  for (const auto& [key, value] : extra_labels.items()) labels[key] = value;
  Json metadata = {{"labels", labels}};
  if (options.metrics_port > 0) {
    metadata["annotations"] = {{"prometheus.io/scrape", "true"},
                               {"prometheus.io/port", std::to_string(options.metrics_port)},
                               {"prometheus.io/path", "/metrics"}};
  }
  return metadata;
}

}  // namespace shardtrain::launch::k8s
