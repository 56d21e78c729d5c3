// The flags a team adds around a job (manifest_options.h): the node type and its EFA environment,
// cpu/memory/hugepages requests, extra environment, labels, annotations, Kueue queue, priority,
// service account, tolerations, the Ray head's placement, the job's TOML as a ConfigMap, the
// Hub token Secret and the NetworkPolicy. Each bad value is one Error line naming the flag.
#include <array>
#include <cstdlib>
#include <regex>

#include "core/error.h"
#include "launch/k8s/manifest_options.h"
#include "launch/k8s/text_checks.h"

namespace shardtrain::launch::k8s {
namespace {

// vCPUs and memory as EC2 lists them; EFA interfaces the instance can attach; RDMA read is what
// FI_EFA_USE_DEVICE_RDMA=1 needs (libfabric aborts without it): P-series from p4d only.
constexpr std::array<InstanceType, 11> kInstanceTypes{{
    {"p5.48xlarge", 8, 32, true, 192, 2048},
    {"p5e.48xlarge", 8, 32, true, 192, 2048},
    {"p5en.48xlarge", 8, 16, true, 192, 2048},
    {"p4d.24xlarge", 8, 4, true, 96, 1152},
    {"p4de.24xlarge", 8, 4, true, 96, 1152},
    {"g6.12xlarge", 4, 1, false, 48, 192},
    {"g6.48xlarge", 8, 1, false, 192, 768},
    {"g6e.12xlarge", 4, 1, false, 48, 384},
    {"g6e.48xlarge", 8, 4, false, 192, 1536},
    {"g5.12xlarge", 4, 1, false, 48, 192},
    {"g5.48xlarge", 8, 1, false, 192, 768},
}};

constexpr const char* kKnownTypes =
    "p5.48xlarge, p5e.48xlarge, p5en.48xlarge, p4d.24xlarge, p4de.24xlarge, g6.12xlarge, "
    "g6.48xlarge, g6e.12xlarge, g6e.48xlarge, g5.12xlarge, g5.48xlarge";

const std::regex& quantity_form() {
  static const std::regex form(R"(^[0-9]+(\.[0-9]+)?(m|Ki|Mi|Gi|Ti|k|M|G|T)?$)");
  return form;
}

std::string checked_quantity(const std::string& text, const char* flag, const char* example) {
  if (!std::regex_match(text, quantity_form())) {
    fail("{} {}: expected a Kubernetes quantity, e.g. {}", flag, quote_for_error(text), example);
  }
  return text;
}

void check_name(const std::string& text, const char* flag, const char* example) {
  static const std::regex subdomain(R"(^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$)");
  if (!std::regex_match(text, subdomain)) {
    fail("{} {}: expected a Kubernetes object name (lower-case letters, digits, '-', '.'), e.g. {}",
         flag, quote_for_error(text), example);
  }
}

void check_utf8_text(const std::string& text, const char* flag) {
  if (!is_valid_utf8(text) || text.find('\0') != std::string::npos) {
    fail("{} {}: expected UTF-8 text without NUL", flag, quote_for_error(text));
  }
}

Toleration parse_toleration(const std::string& item, const char* flag) {
  static const std::regex form(
      R"(^((?:[a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?))"
      R"((=([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?))?)"
      R"((:(NoSchedule|PreferNoSchedule|NoExecute))?$)");
  std::smatch m;
  if (!std::regex_match(item, m, form)) {
    fail(
        "{} {}: expected KEY[=VALUE][:EFFECT] with EFFECT NoSchedule, PreferNoSchedule or "
        "NoExecute, e.g. nvidia.com/gpu:NoSchedule",
        flag, quote_for_error(item));
  }
  return {m[1].str(), m[5].str(), m[8].str()};
}

std::vector<std::pair<std::string, std::string>> label_pairs(const std::vector<std::string>& items,
                                                             const char* flag) {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const std::string& item : items) pairs.push_back(parse_label_pair(item, flag));
  return pairs;
}

void resolve_efa(const ManifestFlags& flags, const InstanceType* instance,
                 ManifestOptions& options) {
  if (!flags.efa_rdma || *flags.efa_rdma == "auto") return;
  if (*flags.efa_rdma != "on" && *flags.efa_rdma != "off") {
    fail("--efa-rdma {}: expected auto (libfabric and aws-ofi-nccl >= 1.7 decide), on or off",
         quote_for_error(*flags.efa_rdma));
  }
  if (options.efa_per_node == 0) {
    fail("--efa-rdma {} needs EFA: give --efa-per-node or an --instance-type with EFA",
         *flags.efa_rdma);
  }
  options.efa_rdma = *flags.efa_rdma == "on" ? EfaRdma::kOn : EfaRdma::kOff;
  if (options.efa_rdma == EfaRdma::kOn && instance != nullptr && !instance->rdma_read) {
    fail(
        "--efa-rdma on: {} has no EFA RDMA read, and libfabric aborts when "
        "FI_EFA_USE_DEVICE_RDMA=1 meets such a device; use --efa-rdma auto",
        instance->name);
  }
}

void resolve_resources(const ManifestFlags& flags, const InstanceType* instance,
                       ManifestOptions& options) {
  // Without requests the pods are BestEffort, the first evicted under memory pressure. Defaults
  // leave 1/8 of a known node to the kubelet and daemon sets.
  if (instance != nullptr) {
    options.cpu_request = std::to_string(instance->vcpus * 7 / 8);
    options.memory_request = std::to_string(instance->memory_gib * 7 / 8) + "Gi";
  } else {
    const int gpus = options.gpus_per_node;
    options.cpu_request = std::to_string(gpus > 0 ? 6 * gpus : 2);
    options.memory_request = std::to_string(gpus > 0 ? 48 * gpus : 8) + "Gi";
  }
  if (flags.cpu) options.cpu_request = checked_quantity(*flags.cpu, "--cpu", "48 or 47500m");
  if (flags.memory) {
    options.memory_request = checked_quantity(*flags.memory, "--memory", "160Gi");
  }
  // aws-ofi-nccl and libfabric back their EFA buffers with 2 MiB huge pages when the pod may
  // use them (AWS's EKS EFA examples request 5120Mi).
  if (options.efa_per_node > 0) options.hugepages = "5120Mi";
  if (flags.hugepages) {
    options.hugepages = checked_quantity(*flags.hugepages, "--hugepages-2mi", "5120Mi (0 = none)");
    if (std::strtod(options.hugepages.c_str(), nullptr) == 0) options.hugepages.clear();
  }
}

void resolve_scheduling(const ManifestFlags& flags, ManifestOptions& options) {
  options.head_node_selector = label_pairs(flags.head_node_selectors, "--head-node-selector");
  for (const std::string& item : flags.tolerations) {
    options.tolerations.push_back(parse_toleration(item, "--toleration"));
  }
  for (const std::string& item : flags.head_tolerations) {
    options.head_tolerations.push_back(parse_toleration(item, "--head-toleration"));
  }
  if (options.kind != ManifestKind::kRayJob &&
      (!flags.head_node_selectors.empty() || !flags.head_tolerations.empty())) {
    fail("--head-node-selector and --head-toleration place a RayJob's head; {} has none",
         options.kind_name);
  }
  options.labels = label_pairs(flags.labels, "--label");
  for (const std::string& item : flags.annotations) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) {
      fail("--annotation {}: expected KEY=VALUE, e.g. team.example/owner=ml-platform",
           quote_for_error(item));
    }
    const std::string key = parse_label_pair(item.substr(0, eq) + "=", "--annotation").first;
    check_utf8_text(item.substr(eq + 1), "--annotation");
    options.annotations.emplace_back(key, item.substr(eq + 1));
  }
  if (flags.queue) {
    check_name(*flags.queue, "--queue", "team-a-queue (a Kueue LocalQueue)");
    options.queue = *flags.queue;
  }
  if (flags.priority_class) {
    check_name(*flags.priority_class, "--priority-class", "high-priority");
    options.priority_class = *flags.priority_class;
  }
  if (flags.service_account) {
    check_name(*flags.service_account, "--service-account", "shardtrain-s3 (IRSA)");
    options.service_account = *flags.service_account;
  }
}

void resolve_secrets_and_config(const ManifestFlags& flags, ManifestOptions& options) {
  if (flags.config_file) {
    if (flags.config_file_text.empty()) {
      fail("--config-file {}: the file is empty; give the job's TOML config",
           quote_for_error(*flags.config_file));
    }
    check_utf8_text(flags.config_file_text, "--config-file");
    options.config_file_text = flags.config_file_text;
  }
  if (flags.hf_token_secret) {
    static const std::regex form(
        R"(^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?)(:([-._A-Za-z0-9]+))?$)");
    std::smatch m;
    if (!std::regex_match(*flags.hf_token_secret, m, form)) {
      fail("--hf-token-secret {}: expected SECRET[:KEY], e.g. hf-token:token",
           quote_for_error(*flags.hf_token_secret));
    }
    options.hf_token_secret = m[1].str();
    options.hf_token_key = m[4].matched ? m[4].str() : "token";
  }
  options.network_policy = flags.network_policy;
}

}  // namespace

const InstanceType* find_instance_type(const std::string& name) {
  for (const InstanceType& type : kInstanceTypes) {
    if (name == type.name) return &type;
  }
  return nullptr;
}

std::pair<std::string, std::string> parse_label_pair(const std::string& item, const char* flag) {
  static const std::regex form(
      R"(^(([a-z0-9]([-a-z0-9.]*[a-z0-9])?)/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?=)"
      R"(([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$)");
  if (!std::regex_match(item, form)) {
    fail("{} {}: expected KEY=VALUE with a label key and value, e.g. {}", flag,
         quote_for_error(item), "node.kubernetes.io/instance-type=p5.48xlarge");
  }
  const auto eq = item.find('=');
  return {item.substr(0, eq), item.substr(eq + 1)};
}

void resolve_team_options(const ManifestFlags& flags, ManifestOptions& options) {
  const InstanceType* instance = nullptr;
  if (flags.instance_type) {
    instance = find_instance_type(*flags.instance_type);
    if (instance == nullptr) {
      fail(
          "--instance-type {}: not a type shardtrain knows ({}); give --gpus-per-node, "
          "--efa-per-node, --cpu and --memory instead",
          quote_for_error(*flags.instance_type), kKnownTypes);
    }
    options.instance_type = instance->name;
    if (options.efa_per_node > instance->efa || options.gpus_per_node > instance->gpus) {
      fail("--instance-type {} has {} GPUs and {} EFA interfaces; the pod asks for {} and {}",
           instance->name, instance->gpus, instance->efa, options.gpus_per_node,
           options.efa_per_node);
    }
  }
  resolve_efa(flags, instance, options);
  for (const std::string& item : flags.env) {
    static const std::regex name_form(R"(^[A-Za-z_][A-Za-z0-9_.-]*$)");
    const auto eq = item.find('=');
    if (eq == std::string::npos || !std::regex_match(item.substr(0, eq), name_form)) {
      fail("--env {}: expected NAME=VALUE with a variable name, e.g. NCCL_DEBUG=INFO",
           quote_for_error(item));
    }
    check_utf8_text(item.substr(eq + 1), "--env");
    options.env.emplace_back(item.substr(0, eq), item.substr(eq + 1));
  }
  resolve_resources(flags, instance, options);
  options.monitor_labels = label_pairs(flags.monitor_labels, "--monitor-label");
  if (!options.monitor_labels.empty() && !options.pod_monitor) {
    fail("--monitor-label labels the PodMonitor: add --pod-monitor (and --metrics-port)");
  }
  if (flags.metrics_gpu) {
    if (*flags.metrics_gpu != "true" && *flags.metrics_gpu != "false") {
      fail("--metrics-gpu {}: expected true or false (false where dcgm-exporter runs)",
           quote_for_error(*flags.metrics_gpu));
    }
    if (options.metrics_port == 0) fail("--metrics-gpu needs --metrics-port PORT, e.g. 9400");
    options.metrics_gpu = *flags.metrics_gpu == "true";
  }
  resolve_scheduling(flags, options);
  resolve_secrets_and_config(flags, options);
  if (!options.config_file_text.empty()) {
    const std::vector<std::string>& command = options.worker_command;
    if (command.front() != "train") {
      fail("--config-file mounts the config of train; the worker command runs {}",
           quote_for_error(command.front()));
    }
    for (const std::string& word : command) {
      if (word == "--config" || word.rfind("--config=", 0) == 0) {
        fail(
            "--config-file and the worker command's --config both name the job's config; drop "
            "one (--config-file mounts it at {}/{} and passes --config itself)",
            kConfigMountDir, kConfigFileName);
      }
    }
  }
}

}  // namespace shardtrain::launch::k8s
