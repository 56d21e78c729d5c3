// What `shardtrain k8s` renders: the flags as typed, and the validated options the renderers
// (launch/k8s/manifests.h) read.
//
// resolve_manifest_options() checks every flag and throws shardtrain::Error with one line
// naming the flag and a valid example, so `shardtrain k8s` exits 2 on any bad input:
// `--nodes 0`, a missing `--gpus-per-node`, an unknown KIND, `--min-nodes` > `--nodes`, an
// image with spaces, a worker command that `shardtrain launch` cannot run, ... Text a user typed
// is quoted in those lines through quote_for_error (text_checks.h), never raw. The flags a team
// adds around the job (resources, EFA environment, labels, tolerations, ConfigMap, Secrets,
// NetworkPolicy) are resolved in manifest_team_options.cpp.
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
  std::optional<std::string> instance_type;      // --instance-type (e.g. p5.48xlarge)
  std::optional<std::string> efa_rdma;           // --efa-rdma auto|on|off
  std::vector<std::string> env;                  // --env K=V (repeatable)
  std::optional<std::string> cpu;                // --cpu (request per pod)
  std::optional<std::string> memory;             // --memory (request = limit per pod)
  std::optional<std::string> hugepages;          // --hugepages-2mi (request = limit)
  std::vector<std::string> monitor_labels;       // --monitor-label K=V (repeatable)
  std::optional<std::string> metrics_gpu;        // --metrics-gpu true|false
  std::vector<std::string> head_node_selectors;  // --head-node-selector K=V (rayjob)
  std::vector<std::string> tolerations;          // --toleration KEY[=VALUE][:EFFECT]
  std::vector<std::string> head_tolerations;     // --head-toleration (rayjob head)
  std::vector<std::string> labels;               // --label K=V (job and pods)
  std::vector<std::string> annotations;          // --annotation K=V (job and pods)
  std::optional<std::string> queue;              // --queue (Kueue LocalQueue)
  std::optional<std::string> priority_class;     // --priority-class
  std::optional<std::string> service_account;    // --service-account (IRSA)
  std::optional<std::string> config_file;        // --config-file PATH (its text, read by cli/)
  std::string config_file_text;                  // what --config-file holds
  std::optional<std::string> hf_token_secret;    // --hf-token-secret NAME[:KEY]
  bool network_policy = false;                   // --network-policy
  std::vector<std::string> worker_command;       // after --
};

// An AWS instance type shardtrain knows: what its pods get by default.
struct InstanceType {
  const char* name;
  int gpus;
  int efa;         // EFA interfaces (vpc.amazonaws.com/efa)
  bool rdma_read;  // EFA with RDMA read (GPUDirect RDMA): P-series from p4d
  int vcpus;
  int memory_gib;
};
// nullptr when unknown.
const InstanceType* find_instance_type(const std::string& name);

struct Toleration {
  std::string key, value, effect;  // value empty: operator Exists; effect empty: all effects
};

enum class EfaRdma { kAuto, kOn, kOff };

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

  // What a team adds (manifest_team_options.cpp).
  std::string instance_type;  // "" = not given
  EfaRdma efa_rdma = EfaRdma::kAuto;
  std::vector<std::pair<std::string, std::string>> env;  // --env, after the rendered ones
  std::string cpu_request, memory_request;               // always set (defaults from the node type)
  std::string hugepages;                                 // hugepages-2Mi; "" = none
  std::vector<std::pair<std::string, std::string>> monitor_labels;
  std::optional<bool> metrics_gpu;  // nullopt: the launcher's default (true)
  std::vector<std::pair<std::string, std::string>> head_node_selector;
  std::vector<Toleration> tolerations, head_tolerations;
  std::vector<std::pair<std::string, std::string>> labels, annotations;
  std::string queue, priority_class, service_account;
  std::string config_file_text;  // "" = no ConfigMap
  std::string hf_token_secret, hf_token_key;
  bool network_policy = false;

  bool elastic() const { return min_nodes < nodes; }
  int nproc_per_node() const { return gpus_per_node > 0 ? gpus_per_node : 1; }
};

ManifestOptions resolve_manifest_options(const ManifestFlags& flags);

// Where --config-file's ConfigMap is mounted, and the path `train` is given.
constexpr const char* kConfigMountDir = "/etc/shardtrain";
constexpr const char* kConfigFileName = "job.toml";

// The pieces of resolve_manifest_options (manifest_team_options.cpp), exposed for it.
void resolve_team_options(const ManifestFlags& flags, ManifestOptions& options);
// KEY=VALUE with a label key and value; throws naming `flag`.
std::pair<std::string, std::string> parse_label_pair(const std::string& item, const char* flag);

}  // namespace shardtrain::launch::k8s
