// kubeflow.org/v1 PyTorchJob (training-operator v1.7). Static rendezvous: one Master (node 0,
// hosts the store on its pytorchjob-port) and N-1 Workers; the operator sets PET_NNODES,
// PET_NODE_RANK, PET_NPROC_PER_NODE, PET_MASTER_ADDR/PORT. With etcd: Workers only and an
// elasticPolicy, from which the operator sets PET_RDZV_BACKEND/ENDPOINT/ID, PET_NNODES=MIN:MAX,
// PET_MAX_RESTARTS and PET_NPROC_PER_NODE. The container command is the same in both.
// restartPolicy ExitCode: the operator restarts a pod only for exit codes 128-255 (signals,
// OOM kills, node loss) and fails the job on 1-127, so a config error (exit 2, which the
// launcher itself never restarts) ends the job at once instead of looping to backoffLimit.
#include "launch/k8s/manifests.h"

namespace shardtrain::launch::k8s {
namespace {

Json replica_spec(const ManifestOptions& options, int replicas, const Json& command) {
  // The operator finds the store port by this container and port name.
  const Json ports = Json::array(
      {Json{{"name", "pytorchjob-port"}, {"containerPort", kStorePort}, {"protocol", "TCP"}}});
  Json container = training_container(options, "pytorch", command, ports, Json::array());
  return {{"replicas", replicas},
          {"restartPolicy", "ExitCode"},
          {"template",
           {{"metadata", pod_metadata(options)},
            {"spec", training_pod_spec(options, std::move(container), "Never")}}}};
}

}  // namespace

Json render_pytorchjob(const ManifestOptions& options) {
  Json spec = {
      {"nprocPerNode", std::to_string(options.nproc_per_node())},
      {"runPolicy", {{"cleanPodPolicy", "Running"}, {"backoffLimit", options.max_restarts}}}};
  Json replicas = Json::object();
  if (options.etcd) {
    spec["elasticPolicy"] = {{"rdzvBackend", "etcd"},
                             {"rdzvHost", etcd_service_name(options)},
                             {"rdzvPort", kEtcdClientPort},
                             {"rdzvId", options.name},
                             {"minReplicas", options.min_nodes},
                             {"maxReplicas", options.nodes},
                             {"maxRestarts", options.max_restarts},
                             {"nProcPerNode", options.nproc_per_node()}};
    replicas["Worker"] = replica_spec(options, options.nodes, launch_command(options, {}));
  } else {
    const Json command = launch_command(options, {"--rdzv-id", options.name, "--max-restarts",
                                                  std::to_string(options.max_restarts)});
    replicas["Master"] = replica_spec(options, 1, command);
    if (options.nodes > 1) replicas["Worker"] = replica_spec(options, options.nodes - 1, command);
  }
  spec["pytorchReplicaSpecs"] = replicas;
  return {{"apiVersion", "kubeflow.org/v1"},
          {"kind", "PyTorchJob"},
          {"metadata", job_metadata(options)},
          {"spec", spec}};
}

}  // namespace shardtrain::launch::k8s
