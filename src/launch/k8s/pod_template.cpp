#include "launch/k8s/pod_template.h"

#include <algorithm>

namespace shardtrain::launch::k8s {
namespace {

constexpr const char* kShmVolume = "dshm";
constexpr const char* kCheckpointVolume = "checkpoints";
constexpr const char* kConfigVolume = "job-config";

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
  if (!options.config_file_text.empty()) {
    mounts.push_back({{"name", kConfigVolume}, {"mountPath", kConfigMountDir}, {"readOnly", true}});
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
  if (!options.config_file_text.empty()) {
    list.push_back({{"name", kConfigVolume}, {"configMap", {{"name", config_map_name(options)}}}});
  }
  return list;
}

// Gloo (CPU ranks, host-staged GPUs) and NCCL's bootstrap and socket fallback use the pod's own
// network (eth0); NCCL over EFA goes through aws-ofi-nccl (the image's libfabric and plugin).
// With libfabric >= 1.18 and aws-ofi-nccl >= 1.7 (the image's) the provider and GPUDirect RDMA
// are detected, and AWS advises against setting FI_PROVIDER or FI_EFA_USE_DEVICE_RDMA: the
// latter is rendered only when --efa-rdma asks (libfabric aborts when =1 meets a device without
// RDMA read, which is why auto renders nothing).
Json network_env(const ManifestOptions& options) {
  Json env = Json::array();
  env.push_back(env_value("SHARDTRAIN_GLOO_IFNAME", "eth0"));
  if (options.gpus_per_node == 0) return env;
  env.push_back(env_value("NCCL_SOCKET_IFNAME", "eth0"));
  if (options.efa_per_node > 0 && options.efa_rdma != EfaRdma::kAuto) {
    env.push_back(
        env_value("FI_EFA_USE_DEVICE_RDMA", options.efa_rdma == EfaRdma::kOn ? "1" : "0"));
  }
  return env;
}

// --env entries replace a rendered variable of the same name, or come after the rendered ones.
void apply_user_env(const ManifestOptions& options, Json& env) {
  for (const auto& [name, value] : options.env) {
    bool replaced = false;
    for (Json& entry : env) {
      if (entry["name"] == name) {
        entry = env_value(name, value);
        replaced = true;
      }
    }
    if (!replaced) env.push_back(env_value(name, value));
  }
}

Json security_context(const ManifestOptions& options) {
  // EFA registers memory with the device: locked pages beyond the default limit.
  if (options.efa_per_node == 0) return Json::object();
  return {{"capabilities", {{"add", Json::array({"IPC_LOCK"})}}}};
}

Json toleration_json(const Toleration& toleration) {
  Json entry = {{"key", toleration.key}};
  if (toleration.value.empty()) {
    entry["operator"] = "Exists";
  } else {
    entry["operator"] = "Equal";
    entry["value"] = toleration.value;
  }
  if (!toleration.effect.empty()) entry["effect"] = toleration.effect;
  return entry;
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

// The doctor's verdict must be the trainer's: the same environment (EFA and NCCL variables),
// capabilities (IPC_LOCK lifts the memlock limit it checks), resources and mounts.
Json doctor_init_container(const ManifestOptions& options, const Json& trainer) {
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
  if (trainer.contains("env")) container["env"] = trainer["env"];
  container["resources"] = gpu_resources(options);
  container["volumeMounts"] = volume_mounts(options);
  if (trainer.contains("securityContext"))
    container["securityContext"] = trainer["securityContext"];
  return container;
}

}  // namespace

std::string store_secret_name(const ManifestOptions& options) {
  return options.name + "-store-secret";
}

std::string etcd_service_name(const ManifestOptions& options) { return options.name + "-etcd"; }

std::string config_map_name(const ManifestOptions& options) { return options.name + "-config"; }

Json job_labels(const ManifestOptions& options) {
  return {{"app.kubernetes.io/name", "shardtrain"},
          {"app.kubernetes.io/instance", options.name},
          {"app.kubernetes.io/component", "training"}};
}

Json object_metadata(const ManifestOptions& options, const std::string& name, bool namespaced) {
  Json metadata = {{"name", name}};
  if (namespaced) metadata["namespace"] = options.namespace_name;
  Json labels = job_labels(options);
  for (const auto& [key, value] : options.labels) labels[key] = value;
  metadata["labels"] = labels;
  if (!options.annotations.empty()) {
    Json annotations = Json::object();
    for (const auto& [key, value] : options.annotations) annotations[key] = value;
    metadata["annotations"] = annotations;
  }
  return metadata;
}

Json job_metadata(const ManifestOptions& options) {
  Json metadata = object_metadata(options, options.name);
  // Kueue admits the job through this LocalQueue (it reads the label on the job object).
  if (!options.queue.empty()) metadata["labels"]["kueue.x-k8s.io/queue-name"] = options.queue;
  return metadata;
}

std::vector<std::string> worker_command(const ManifestOptions& options) {
  std::vector<std::string> command = options.worker_command;
  if (!options.config_file_text.empty()) {
    command.insert(command.begin() + 1,
                   {"--config", std::string(kConfigMountDir) + "/" + kConfigFileName});
  }
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
  if (options.metrics_gpu) {
    command.push_back("--metrics-gpu");
    command.push_back(*options.metrics_gpu ? "true" : "false");
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
  // Devices and huge pages: requests = limits (Kubernetes requires it of extended resources and
  // huge pages); memory: request = limit, so a pod that outgrows it is the one killed; cpu: a
  // request only (a cpu limit would throttle the data loader and NCCL's proxy threads).
  Json requests = {{"cpu", options.cpu_request}, {"memory", options.memory_request}};
  Json limits = {{"memory", options.memory_request}};
  const auto both = [&](const char* name, const Json& amount) {
    requests[name] = amount;
    limits[name] = amount;
  };
  if (options.gpus_per_node > 0) both("nvidia.com/gpu", options.gpus_per_node);
  if (options.efa_per_node > 0) both("vpc.amazonaws.com/efa", options.efa_per_node);
  if (!options.hugepages.empty()) both("hugepages-2Mi", options.hugepages);
  return {{"requests", requests}, {"limits", limits}};
}

Json training_container(const ManifestOptions& options, const std::string& container_name,
                        const Json& command, const Json& ports, const Json& extra_env) {
  Json env = Json::array();
  env.push_back(env_field("POD_NAME", "metadata.name"));
  env.push_back(env_field("POD_NAMESPACE", "metadata.namespace"));
  env.push_back(store_secret_env(options));
  if (!options.hf_token_secret.empty()) {
    // Hub downloads (model.path = org/name) read HF_TOKEN, like huggingface_hub.
    env.push_back(
        {{"name", "HF_TOKEN"},
         {"valueFrom",
          {{"secretKeyRef", {{"name", options.hf_token_secret}, {"key", options.hf_token_key}}}}}});
  }
  for (const Json& variable : network_env(options)) env.push_back(variable);
  for (const Json& variable : extra_env) env.push_back(variable);
  apply_user_env(options, env);

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
  container["resources"] = gpu_resources(options);
  container["volumeMounts"] = volume_mounts(options);
  if (const Json context = security_context(options); !context.empty()) {
    container["securityContext"] = context;
  }
  return container;
}

Json training_pod_spec(const ManifestOptions& options, Json container,
                       const std::string& restart_policy) {
  Json spec = {{"restartPolicy", restart_policy},
               {"terminationGracePeriodSeconds", options.termination_grace_s}};
  if (!options.service_account.empty()) spec["serviceAccountName"] = options.service_account;
  if (!options.priority_class.empty()) spec["priorityClassName"] = options.priority_class;
  if (!options.node_selector.empty()) {
    Json selector = Json::object();
    for (const auto& [key, value] : options.node_selector) selector[key] = value;
    spec["nodeSelector"] = selector;
  }
  Json tolerations = Json::array();
  if (options.gpus_per_node > 0) {
    tolerations.push_back(
        Json{{"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}});
  }
  for (const Toleration& toleration : options.tolerations) {
    tolerations.push_back(toleration_json(toleration));
  }
  if (!tolerations.empty()) spec["tolerations"] = tolerations;
  spec["initContainers"] = Json::array({doctor_init_container(options, container)});
  spec["containers"] = Json::array({std::move(container)});
  spec["volumes"] = volumes(options);
  return spec;
}

Json pod_metadata(const ManifestOptions& options, const Json& extra_labels) {
  Json labels = job_labels(options);
  for (const auto& [key, value] : options.labels) labels[key] = value;
  for (const auto& [key, value] : extra_labels.items()) labels[key] = value;
  Json metadata = {{"labels", labels}};
  Json annotations = Json::object();
  for (const auto& [key, value] : options.annotations) annotations[key] = value;
  if (options.metrics_port > 0) {
    annotations["prometheus.io/scrape"] = "true";
    annotations["prometheus.io/port"] = std::to_string(options.metrics_port);
    annotations["prometheus.io/path"] = "/metrics";
  }
  if (!annotations.empty()) metadata["annotations"] = annotations;
  return metadata;
}

Json tolerations_json(const std::vector<Toleration>& tolerations) {
  Json list = Json::array();
  for (const Toleration& toleration : tolerations) list.push_back(toleration_json(toleration));
  return list;
}

}  // namespace shardtrain::launch::k8s
