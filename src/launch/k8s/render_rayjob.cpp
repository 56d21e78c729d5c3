// ray.io/v1 RayJob (KubeRay v1.7) with its RayCluster: a CPU-only head (num-cpus 0, so no
// training bundle lands on it) and one GPU worker pod per node. Ray places the workers, shardtrain
// trains: the entrypoint is the driver deploy/ray/shardtrain_ray.py (installed by the package at
// /usr/share/shardtrain/ray/), which reserves one bundle per node (STRICT_SPREAD) and runs
// `shardtrain launch` on each with node 0's address as the store endpoint. KubeRay writes the
// Ray containers' commands itself (`ray start`), so the worker container has none.
#include <regex>

#include "launch/k8s/manifests.h"

namespace shardtrain::launch::k8s {
namespace {

constexpr const char* kRayDriver = "/usr/share/shardtrain/ray/shardtrain_ray.py";
constexpr const char* kRayVersion = "2.40.0";

// One word of a POSIX shell command line (the RayJob entrypoint is run by a shell).
std::string shell_word(const std::string& word) {
  static const std::regex safe(R"(^[A-Za-z0-9_./=:,@%+-]+$)");
  if (std::regex_match(word, safe)) return word;
  std::string quoted = "'";
  for (char c : word) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

std::string entrypoint(const ManifestOptions& options) {
  std::vector<std::string> words = {
      "python3",          kRayDriver,
      "--nodes",          std::to_string(options.nodes),
      "--gpus-per-node",  std::to_string(options.gpus_per_node),
      "--nproc-per-node", std::to_string(options.nproc_per_node()),
      "--run-id",         options.name,
      "--max-restarts",   std::to_string(options.max_restarts),
      "--stop-grace",     std::to_string(options.termination_grace_s - 30)};
  if (options.metrics_port > 0) {
    words.push_back("--metrics-port");
    words.push_back(std::to_string(options.metrics_port));
  }
  words.push_back("--");
  for (const std::string& word : worker_command(options)) words.push_back(word);
  std::string line;
  for (const std::string& word : words) line += (line.empty() ? "" : " ") + shell_word(word);
  return line;
}

Json head_group(const ManifestOptions& options) {
  const Json amounts = {{"cpu", "2"}, {"memory", "8Gi"}};
  Json container = {{"name", "ray-head"},
                    {"image", options.image},
                    {"imagePullPolicy", "IfNotPresent"},
                    {"ports", Json::array({Json{{"name", "gcs-server"}, {"containerPort", 6379}},
                                           Json{{"name", "dashboard"}, {"containerPort", 8265}},
                                           Json{{"name", "client"}, {"containerPort", 10001}}})},
                    {"resources", {{"requests", amounts}, {"limits", amounts}}}};
  Json spec = {{"containers", Json::array({container})}};
  // The head is a CPU pod: it gets its own placement (--head-node-selector, --head-toleration),
  // never the GPU workers' (a CPU head on a tainted GPU group would stay Pending).
  if (!options.head_node_selector.empty()) {
    spec["nodeSelector"] = Json::object();
    for (const auto& [key, value] : options.head_node_selector) spec["nodeSelector"][key] = value;
  }
  if (!options.head_tolerations.empty()) {
    spec["tolerations"] = tolerations_json(options.head_tolerations);
  }
  if (!options.service_account.empty()) spec["serviceAccountName"] = options.service_account;
  return {{"rayStartParams", {{"dashboard-host", "0.0.0.0"}, {"num-cpus", "0"}}},
          {"template",
           {{"metadata",
             {{"labels",
               {{"app.kubernetes.io/name", "shardtrain"},
                {"app.kubernetes.io/instance", options.name},
                {"app.kubernetes.io/component", "ray-head"}}}}},
            {"spec", spec}}}};
}

Json worker_group(const ManifestOptions& options) {
  Json container = training_container(options, "ray-worker", Json(), Json::array(), Json::array());
  container.erase("command");
  Json pod_spec = training_pod_spec(options, std::move(container), "");
  pod_spec.erase("restartPolicy");  // KubeRay manages the Ray pods' restarts
  return {{"groupName", "gpu-workers"},
          {"replicas", options.nodes},
          {"minReplicas", options.nodes},
          {"maxReplicas", options.nodes},
          {"rayStartParams", Json::object()},
          {"template", {{"metadata", pod_metadata(options)}, {"spec", pod_spec}}}};
}

}  // namespace

Json render_rayjob(const ManifestOptions& options) {
  return {{"apiVersion", "ray.io/v1"},
          {"kind", "RayJob"},
          {"metadata", job_metadata(options)},
          {"spec",
           {{"entrypoint", entrypoint(options)},
            {"submissionMode", "K8sJobMode"},
            {"shutdownAfterJobFinishes", true},
            {"ttlSecondsAfterFinished", 600},
            {"rayClusterSpec",
             {{"rayVersion", kRayVersion},
              {"headGroupSpec", head_group(options)},
              {"workerGroupSpecs", Json::array({worker_group(options)})}}}}}};
}

}  // namespace shardtrain::launch::k8s
