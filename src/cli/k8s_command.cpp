// `shardtrain k8s KIND ... -- train ...`: prints the Kubernetes manifests (multi-document YAML)
// that run a training job on a cluster (launch/k8s/manifests.h; docs/kubernetes.md). Flags are
// taken as strings and validated by launch/k8s/manifest_options, so every bad value ends in
// one error line naming the flag (exit 2), an unknown flag included (CLI11's own text would be
// two lines that do not name it). The worker command is parsed at render time by the parser
// the worker runs (cli/k8s_worker_check.h).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/k8s_worker_check.h"
#include "cli/optional_option.h"
#include "core/error.h"
#include "launch/k8s/manifests.h"
#include "launch/k8s/text_checks.h"
#include "launch/k8s/yaml_writer.h"
#include "launch/launcher.h"

namespace shardtrain::cli {
namespace {

// A repeatable option: each occurrence adds one value (never the words after it).
void add_repeatable(CLI::App* cmd, const std::string& name, std::vector<std::string>& values,
                    const std::string& help) {
  cmd->add_option(name, values, help)->allow_extra_args(false);
}

// The flags a team adds around the job (launch/k8s/manifest_team_options.cpp).
void add_team_options(CLI::App* cmd, launch::k8s::ManifestFlags& flags) {
  add_optional_string(cmd, "--instance-type", flags.instance_type,
                      "AWS instance type of the nodes (p5.48xlarge, p4d.24xlarge, g6.12xlarge, "
                      "g6e.12xlarge, ...): default GPUs, EFA, cpu and memory requests");
  add_optional_string(cmd, "--efa-rdma", flags.efa_rdma,
                      "auto (nothing set: libfabric and aws-ofi-nccl >= 1.7 detect GPUDirect "
                      "RDMA), on (FI_EFA_USE_DEVICE_RDMA=1, p4d/p5 only) or off [default auto]");
  add_repeatable(cmd, "--env", flags.env, "NAME=VALUE in the training containers (repeatable)");
  add_optional_string(cmd, "--cpu", flags.cpu,
                      "cpu request per pod [default: 7/8 of --instance-type's, else 6 per GPU]");
  add_optional_string(cmd, "--memory", flags.memory,
                      "memory request = limit per pod [default: 7/8 of --instance-type's, else "
                      "48Gi per GPU]");
  add_optional_string(cmd, "--hugepages-2mi", flags.hugepages,
                      "hugepages-2Mi per pod (0 = none) [default 5120Mi with EFA]");
  add_repeatable(cmd, "--monitor-label", flags.monitor_labels,
                 "KEY=VALUE label of the PodMonitor, e.g. release=kube-prometheus-stack "
                 "(repeatable)");
  add_optional_string(cmd, "--metrics-gpu", flags.metrics_gpu,
                      "true/false: GPU metrics on /metrics (false where dcgm-exporter runs)");
  add_repeatable(cmd, "--head-node-selector", flags.head_node_selectors,
                 "rayjob: KEY=VALUE node label the Ray head requires (repeatable)");
  add_repeatable(cmd, "--toleration", flags.tolerations,
                 "KEY[=VALUE][:EFFECT] toleration of the training pods (repeatable)");
  add_repeatable(cmd, "--head-toleration", flags.head_tolerations,
                 "rayjob: KEY[=VALUE][:EFFECT] toleration of the Ray head (repeatable)");
  add_repeatable(cmd, "--label", flags.labels,
                 "KEY=VALUE label of every object and pod (repeatable)");
  add_repeatable(cmd, "--annotation", flags.annotations,
                 "KEY=VALUE annotation of every object and pod (repeatable)");
  add_optional_string(cmd, "--queue", flags.queue, "Kueue LocalQueue (kueue.x-k8s.io/queue-name)");
  add_optional_string(cmd, "--priority-class", flags.priority_class,
                      "PriorityClass of the training pods");
  add_optional_string(cmd, "--service-account", flags.service_account,
                      "ServiceAccount of the pods (IRSA for S3 checkpoints)");
  add_optional_string(cmd, "--config-file", flags.config_file,
                      "local TOML config of train: rendered as a ConfigMap, mounted at "
                      "/etc/shardtrain/job.toml and passed as --config");
  add_optional_string(cmd, "--hf-token-secret", flags.hf_token_secret,
                      "SECRET[:KEY] holding the Hugging Face token (HF_TOKEN) [key: token]");
  cmd->add_flag("--network-policy", flags.network_policy,
                "also render a NetworkPolicy admitting only the job's pods to its ports");
}

// The words after `--` exactly as typed: CLI11 splits a vector option's value written as
// "[a, b]" into a and b, so they are read from this process's own arguments when it is the
// `shardtrain k8s` process; otherwise (a parser driven from a test) CLI11's words.
std::vector<std::string> worker_words(const std::vector<std::string>& parsed) {
  const std::vector<std::string> own = launch::own_args_without("\x01");
  const auto k8s = std::find(own.begin(), own.end(), "k8s");
  const auto dashes = std::find(k8s, own.end(), "--");
  if (k8s == own.end() || dashes == own.end()) return parsed;
  return std::vector<std::string>(dashes, own.end());
}

}  // namespace

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
  add_repeatable(cmd, "--node-selector", flags->node_selectors,
                 "KEY=VALUE node label the pods require (repeatable)");
  add_optional_string(
      cmd, "--pvc", flags->pvc,
      "CLAIM:/path: mount this PersistentVolumeClaim; train checkpoints to /path/checkpoints "
      "and a restarted pod resumes from there");
  add_optional_string(cmd, "--termination-grace", flags->termination_grace,
                      "seconds a stopped pod gets to write its SIGTERM checkpoint [default 300]");
  add_optional_string(cmd, "--etcd-image", flags->etcd_image,
                      "etcd image of the rendezvous [default quay.io/coreos/etcd:v3.5.17]");
  add_team_options(cmd, *flags);
  auto after_dashes = std::make_shared<std::vector<std::string>>();
  cmd->add_option("command", *after_dashes, "the worker command (after --)");
  cmd->allow_extras();  // unknown flags reach the callback, which names them in one line
  cmd->callback([cmd, flags, after_dashes, &exit_code] {
    // CLI11 lists the "--" before the worker command among the extras too: not a flag.
    for (const std::string& extra : cmd->remaining()) {
      if (extra == "--") continue;
      fail("unknown flag {} for shardtrain k8s; see shardtrain k8s --help",
           launch::k8s::quote_for_error(extra));
    }
    flags->worker_command = worker_words(*after_dashes);
    if (flags->config_file) flags->config_file_text = read_config_file(*flags->config_file);
    const auto options = launch::k8s::resolve_manifest_options(*flags);
    check_worker_command(options.worker_command, flags->config_file.value_or(""),
                         options.config_file_text);
    const std::string yaml = launch::k8s::to_yaml_stream(launch::k8s::render_manifests(options));
    std::fwrite(yaml.data(), 1, yaml.size(), stdout);
    exit_code = 0;
  });
}

}  // namespace shardtrain::cli
