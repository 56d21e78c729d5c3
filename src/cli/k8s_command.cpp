// `shardtrain k8s KIND ... -- train ...`: prints the Kubernetes manifests (multi-document YAML)
// that run a training job on a cluster (launch/k8s/manifests.h; docs/kubernetes.md). Flags are
// taken as strings and validated by launch/k8s/manifest_options, so every bad value ends in
// one error line naming the flag (exit 2).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/optional_option.h"
#include "launch/k8s/manifests.h"
#include "launch/k8s/yaml_writer.h"

namespace shardtrain::cli {

void add_k8s_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<launch::k8s::ManifestFlags>();
  CLI::App* cmd = app.add_subcommand(
      "k8s",
      "Print the Kubernetes manifests of a training job: shardtrain k8s KIND --name NAME --image "
      "IMAGE --nodes N --gpus-per-node G [flags] -- train --config PATH ...; KIND is pytorchjob "
      "(Kubeflow), trainjob (Kubeflow Trainer v2), jobset or rayjob (KubeRay). Apply with "
      "kubectl apply -f -. See docs/kubernetes.md");
  cmd->add_option("kind", flags->kind, "pytorchjob, trainjob, jobset or rayjob");
  add_optional_string(cmd, "--name", flags->name,
                      "job name, a DNS label of at most 40 characters (required)");
  add_optional_string(cmd, "--image", flags->image,
                      "container image holding shardtrain (required)");
  add_optional_string(cmd, "--nodes", flags->nodes,
                      "nodes (pods) in the job; the maximum when elastic (required)");
  add_optional_string(
      cmd, "--gpus-per-node", flags->gpus_per_node,
      "GPUs per pod, one worker each; 0 for a CPU job of one worker per pod (required)");
  add_optional_string(
      cmd, "--efa-per-node", flags->efa_per_node,
      "EFA interfaces per pod (vpc.amazonaws.com/efa); sets the NCCL/EFA environment");
  add_optional_string(
      cmd, "--min-nodes", flags->min_nodes,
      "elastic: train on anywhere from this many to --nodes nodes (needs --rdzv etcd)");
  add_optional_string(cmd, "--max-restarts", flags->max_restarts,
                      "worker group restarts [default 3]");
  add_optional_string(
      cmd, "--rdzv", flags->rdzv,
      "etcd (an etcd Deployment + Service is rendered too) or static (node 0 hosts the store) "
      "[default: etcd when elastic, else static]");
  add_optional_string(cmd, "--namespace", flags->namespace_name,
                      "namespace of the objects [default default]");
  add_optional_string(
      cmd, "--metrics-port", flags->metrics_port,
      "serve Prometheus metrics on this port: container port, prometheus.io annotations");
  cmd->add_flag("--pod-monitor", flags->pod_monitor,
                "also render a Prometheus Operator PodMonitor (needs --metrics-port)");
  add_optional_string(cmd, "--shm-size", flags->shm_size,
                      "size of the memory-backed /dev/shm [default 64Gi]");
  cmd->add_option("--node-selector", flags->node_selectors,
                  "KEY=VALUE node label the pods require (repeatable)")
      ->allow_extra_args(false);
  add_optional_string(
      cmd, "--pvc", flags->pvc,
      "CLAIM:/path: mount this PersistentVolumeClaim; train checkpoints to /path/checkpoints "
      "and a restarted pod resumes from there");
  add_optional_string(cmd, "--termination-grace", flags->termination_grace,
                      "seconds a stopped pod gets to write its SIGTERM checkpoint [default 300]");
  add_optional_string(cmd, "--etcd-image", flags->etcd_image,
                      "etcd image of the rendezvous [default quay.io/coreos/etcd:v3.5.17]");
  auto after_dashes = std::make_shared<std::vector<std::string>>();
  cmd->add_option("command", *after_dashes, "the worker command (after --)");
  cmd->callback([flags, after_dashes, &exit_code] {
    flags->worker_command = *after_dashes;
    const auto options = launch::k8s::resolve_manifest_options(*flags);
    const std::string yaml = launch::k8s::to_yaml_stream(launch::k8s::render_manifests(options));
    std::fwrite(yaml.data(), 1, yaml.size(), stdout);
    exit_code = 0;
  });
}

}  // namespace shardtrain::cli
