// What `shardtrain k8s` renders: the flags as typed, and the validated options the renderers
// (launch/k8s/manifests.h) read.
//
// resolve_manifest_options() checks every flag and throws shardtrain::Error with one line
// naming the flag and a valid example, so `shardtrain k8s` exits 2 on any bad input:
// `--nodes 0`, a missing `--gpus-per-node`, an unknown KIND, `--min-nodes` > `--nodes`, an
// image with spaces, a worker command that `shardtrain launch` cannot run, ...
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace shardtrain::launch::k8s {

enum class ManifestKind { kPyTorchJob, kTrainJob, kJobSet, kRayJob };

// The flags as typed (nullopt = not given).
struct ManifestFlags {
  std::string kind;                              // pytorchjob | trainjob | jobset | rayjob
  std::optional<std::string> name;               // --name (required)
  std::optional<std::string> image;              // --image (required)
  std::optional<std::string> nodes;              // --nodes (required)
  std::optional<std::string> gpus_per_node;      // --gpus-per-node (required; 0 = a CPU job)
  std::optional<std::string> efa_per_node;       // --efa-per-node
  std::optional<std::string> min_nodes;          // --min-nodes (elastic when < --nodes)
  std::optional<std::string> max_restarts;       // --max-restarts
  std::optional<std::string> rdzv;               // --rdzv etcd|static
  std::optional<std::string> namespace_name;     // --namespace
  std::optional<std::string> metrics_port;       // --metrics-port
  bool pod_monitor = false;                      // --pod-monitor
  std::optional<std::string> shm_size;           // --shm-size
  std::vector<std::string> node_selectors;       // --node-selector k=v (repeatable)
  std::optional<std::string> pvc;                // --pvc NAME:/path
  std::optional<std::string> termination_grace;  // --termination-grace SECONDS
  std::optional<std::string> etcd_image;         // --etcd-image
  std::vector<std::string> worker_command;       // after --
};

struct CheckpointVolume {
  std::string claim_name;  // an existing PersistentVolumeClaim (ReadWriteMany across nodes)
  std::string mount_path;  // absolute; checkpoints go to <mount_path>/checkpoints
};

struct ManifestOptions {
  ManifestKind kind = ManifestKind::kPyTorchJob;
  std::string kind_name;  // as typed, lower case
  std::string name;
  std::string image;
  std::string namespace_name = "default";
  int nodes = 1;
  int min_nodes = 1;  // == nodes unless elastic
  int gpus_per_node = 0;
  int efa_per_node = 0;
  int max_restarts = 3;
  bool etcd = false;     // rendezvous through the etcd Deployment this renders (else static)
  int metrics_port = 0;  // 0 = no metrics endpoint
  bool pod_monitor = false;
  std::string shm_size = "64Gi";
  std::vector<std::pair<std::string, std::string>> node_selector;
  std::optional<CheckpointVolume> checkpoint;
  // The pod's terminationGracePeriodSeconds; the launcher's --stop-grace is 30 s less, so the
  // workers' SIGTERM checkpoint finishes before the kubelet's SIGKILL.
  int termination_grace_s = 300;
  std::string etcd_image = "quay.io/coreos/etcd:v3.5.17";
  std::vector<std::string> worker_command;  // what `shardtrain launch -- ...` runs

  bool elastic() const { return min_nodes < nodes; }
  int nproc_per_node() const { return gpus_per_node > 0 ? gpus_per_node : 1; }
};

ManifestOptions resolve_manifest_options(const ManifestFlags& flags);

}  // namespace shardtrain::launch::k8s
