// `shardtrain k8s`: the Kubernetes objects that run one training job, as typed document trees
// (written as YAML by launch/k8s/yaml_writer.h).
//
// render_manifests(options) returns, in apply order:
//   [etcd Service, etcd Deployment]    when options.etcd (the rendezvous of an elastic job)
//   [ConfigMap]                        with --config-file (the job's TOML)
//   [TrainingRuntime]                  for trainjob (the runtime the TrainJob references)
//   the job                            PyTorchJob (kubeflow.org/v1), TrainJob
//                                      (trainer.kubeflow.org/v1alpha1), JobSet
//                                      (jobset.x-k8s.io/v1alpha2) or RayJob (ray.io/v1)
//   [headless Service of node 0]       for jobset with the static rendezvous
//   [PodMonitor]                       with options.pod_monitor
//   [NetworkPolicy]                    with options.network_policy
// Every pod's container runs `shardtrain launch`, which reads the PET_* variables the
// operator sets (docs/kubernetes.md lists them per KIND).
#pragma once

#include <vector>

#include "launch/k8s/manifest_options.h"
#include "launch/k8s/pod_template.h"

namespace shardtrain::launch::k8s {

std::vector<Json> render_manifests(const ManifestOptions& options);

// The pieces, one per KIND (launch/k8s/render_*.cpp).
Json render_pytorchjob(const ManifestOptions& options);
std::vector<Json> render_trainjob(const ManifestOptions& options);  // runtime, then TrainJob
std::vector<Json> render_jobset(const ManifestOptions& options);    // JobSet, then Service
Json render_rayjob(const ManifestOptions& options);
std::vector<Json> render_etcd(const ManifestOptions& options);  // Service, then Deployment
Json render_pod_monitor(const ManifestOptions& options);
Json render_config_map(const ManifestOptions& options);
Json render_network_policy(const ManifestOptions& options);

// A Job's podFailurePolicy: exit code 2 (a config error) fails the Job at once; a pod disrupted
// by eviction or preemption is not counted against backoffLimit.
Json pod_failure_policy();
// A JobSet's failurePolicy: maxRestarts, and a Job failed by its podFailurePolicy fails the
// JobSet without restarts.
Json jobset_failure_policy(const ManifestOptions& options);

// The launcher flags for the etcd rendezvous: backend, endpoint, --nnodes MIN:MAX, run id.
std::vector<std::string> etcd_launch_flags(const ManifestOptions& options);

}  // namespace shardtrain::launch::k8s
