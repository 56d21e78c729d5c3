// The pieces every KIND's manifests share: object metadata, the training container (its
// `shardtrain launch` command, environment, GPU/EFA resources, ports, volume mounts) and the pod
// spec around it (the `shardtrain doctor` init container, /dev/shm, the checkpoint volume,
// the termination grace, node selector, GPU toleration).
//
// Each function is pure: the same options give the same tree, so rendered examples can be
// compared byte for byte.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "launch/k8s/manifest_options.h"

namespace shardtrain::launch::k8s {

using Json = nlohmann::ordered_json;

// The port node 0's launcher serves the rendezvous store on (torchrun's MASTER_PORT default,
// and the port trainer.kubeflow.org v2 hands its pods in PET_MASTER_PORT).
constexpr int kStorePort = 29500;
constexpr int kEtcdClientPort = 2379;
// The worker store's per-run secret comes from this variable, filled from a Kubernetes Secret
// (docs/kubernetes.md says how to create it).
constexpr const char* kStoreSecretEnv = "SHARDTRAIN_STORE_SECRET";
constexpr const char* kStoreSecretKey = "token";

std::string store_secret_name(const ManifestOptions& options);  // <name>-store-secret
std::string etcd_service_name(const ManifestOptions& options);  // <name>-etcd
std::string config_map_name(const ManifestOptions& options);    // <name>-config

// {name, namespace (unless cluster-scoped), labels, annotations}; labels name the app and the
// job, plus --label; annotations are --annotation.
Json object_metadata(const ManifestOptions& options, const std::string& name,
                     bool namespaced = true);
Json job_labels(const ManifestOptions& options);
// The job object's metadata: object_metadata plus the Kueue queue label.
Json job_metadata(const ManifestOptions& options);

// The worker command; with --config-file, `--config /etc/shardtrain/job.toml` follows the
// subcommand; for `train`, `--checkpoint-dir <mount>/checkpoints` is added when a checkpoint
// volume is given, unless the command names its own.
std::vector<std::string> worker_command(const ManifestOptions& options);

// ["shardtrain", "launch", <launch_flags>, "--metrics-port", P (with a metrics port: the
// node's agent serves /metrics for all of its workers, launch/node_metrics.h),
// "--stop-grace", S, "--", <worker command>].
Json launch_command(const ManifestOptions& options, const std::vector<std::string>& launch_flags);

// An environment variable with a literal value, or from a pod field (downward API).
Json env_value(const std::string& name, const std::string& value);
Json env_field(const std::string& name, const std::string& field_path);

// The training container. `ports` are added before the metrics port; `extra_env` after the
// shared variables (pod identity, store secret, NCCL/EFA).
Json training_container(const ManifestOptions& options, const std::string& container_name,
                        const Json& command, const Json& ports, const Json& extra_env);

// cpu and memory requests (memory limit = request), GPU, EFA and hugepages-2Mi requests =
// limits.
Json gpu_resources(const ManifestOptions& options);

// The pod spec around `container`, with the doctor init container, volumes and scheduling.
Json training_pod_spec(const ManifestOptions& options, Json container,
                       const std::string& restart_policy);

// Pod template metadata: the job's labels (plus `extra_labels`) and, with a metrics port, the
// prometheus.io scrape annotations.
Json pod_metadata(const ManifestOptions& options, const Json& extra_labels = Json::object());

// Kubernetes tolerations of --toleration / --head-toleration.
Json tolerations_json(const std::vector<Toleration>& tolerations);

}  // namespace shardtrain::launch::k8s
