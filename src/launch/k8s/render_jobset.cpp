// jobset.x-k8s.io/v1alpha2 JobSet, for clusters without Kubeflow: one indexed Job of N pods.
// No operator sets PET_* here, so the pod template sets them itself: PET_NODE_RANK from the
// pod's Job completion index, PET_MASTER_ADDR the headless Service that selects node 0 (static
// rendezvous: node 0's launcher hosts the store), or PET_RDZV_* for etcd. A pod that exits 2 (a
// config error) fails its Job through the Job's podFailurePolicy and the JobSet at once through
// the failure-policy rule on that reason; evictions and preemptions do not count as failures.
#include "launch/k8s/manifests.h"

namespace shardtrain::launch::k8s {
namespace {

constexpr const char* kCompletionIndexLabel = "batch.kubernetes.io/job-completion-index";
constexpr const char* kJobSetNameLabel = "jobset.sigs.k8s.io/jobset-name";

std::string node0_service_name(const ManifestOptions& options) { return options.name + "-node0"; }

Json rendezvous_env(const ManifestOptions& options) {
  Json env = Json::array();
  env.push_back(env_value("PET_NNODES", options.elastic() ? std::to_string(options.min_nodes) +
                                                                ":" + std::to_string(options.nodes)
                                                          : std::to_string(options.nodes)));
  env.push_back(env_value("PET_NPROC_PER_NODE", std::to_string(options.nproc_per_node())));
  env.push_back(env_field("PET_NODE_RANK",
                          std::string("metadata.annotations['") + kCompletionIndexLabel + "']"));
  env.push_back(env_value("PET_RDZV_ID", options.name));
  env.push_back(env_value("PET_MAX_RESTARTS", std::to_string(options.max_restarts)));
  if (options.etcd) {
    env.push_back(env_value("PET_RDZV_BACKEND", "etcd"));
    env.push_back(env_value("PET_RDZV_ENDPOINT",
                            etcd_service_name(options) + ":" + std::to_string(kEtcdClientPort)));
  } else {
    env.push_back(env_value("PET_RDZV_BACKEND", "static"));
    env.push_back(env_value("PET_MASTER_ADDR", node0_service_name(options)));
    env.push_back(env_value("PET_MASTER_PORT", std::to_string(kStorePort)));
  }
  return env;
}

Json node0_service(const ManifestOptions& options) {
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata", object_metadata(options, node0_service_name(options))},
          {"spec",
           {{"clusterIP", "None"},
            {"publishNotReadyAddresses", true},
            {"selector", {{kJobSetNameLabel, options.name}, {kCompletionIndexLabel, "0"}}},
            {"ports", Json::array({Json{{"name", "store"},
                                        {"port", kStorePort},
                                        {"targetPort", kStorePort},
                                        {"protocol", "TCP"}}})}}}};
}

}  // namespace

std::vector<Json> render_jobset(const ManifestOptions& options) {
  const Json ports =
      Json::array({Json{{"name", "store"}, {"containerPort", kStorePort}, {"protocol", "TCP"}}});
  Json container = training_container(options, "node", launch_command(options, {}), ports,
                                      rendezvous_env(options));
  const Json job_spec = {{"parallelism", options.nodes},
                         {"completions", options.nodes},
                         {"completionMode", "Indexed"},
                         {"backoffLimit", options.max_restarts},
                         {"podFailurePolicy", pod_failure_policy()},
                         {"template",
                          {{"metadata", pod_metadata(options)},
                           {"spec", training_pod_spec(options, std::move(container), "Never")}}}};
  Json jobset = {
      {"apiVersion", "jobset.x-k8s.io/v1alpha2"},
      {"kind", "JobSet"},
      {"metadata", job_metadata(options)},
      {"spec",
       {{"network", {{"enableDNSHostnames", true}, {"publishNotReadyAddresses", true}}},
        {"failurePolicy", jobset_failure_policy(options)},
        {"replicatedJobs",
         Json::array(
             {Json{{"name", "node"}, {"replicas", 1}, {"template", {{"spec", job_spec}}}}})}}}};
  std::vector<Json> documents = {jobset};
  if (!options.etcd) documents.push_back(node0_service(options));
  return documents;
}

}  // namespace shardtrain::launch::k8s
