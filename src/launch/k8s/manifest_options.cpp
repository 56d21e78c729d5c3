#include "launch/k8s/manifest_options.h"

#include <charconv>
#include <cstdlib>
#include <regex>

#include "core/error.h"
#include "launch/k8s/text_checks.h"

namespace shardtrain::launch::k8s {
namespace {

// Subcommands that `shardtrain launch` runs as workers (each reads the worker environment).
constexpr const char* kLaunchableSubcommands[] = {"train", "eval", "bench", "doctor"};

const std::string& required(const std::optional<std::string>& value, const char* flag,
                            const char* example) {
  if (!value || value->empty()) fail("{} is required, e.g. {}", flag, example);
  return *value;
}

int parse_int_in(const std::string& text, const char* flag, int min_value, int max_value) {
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < min_value || v > max_value) {
    fail("{} {}: expected an integer from {} to {}", flag, quote_for_error(text), min_value,
         max_value);
  }
  return v;
}

void check_form(const std::string& text, const std::regex& form, const char* flag,
                const char* expected) {
  if (!std::regex_match(text, form))
    fail("{} {}: expected {}", flag, quote_for_error(text), expected);
}

ManifestKind parse_kind(const std::string& kind) {
  if (kind == "pytorchjob") return ManifestKind::kPyTorchJob;
  if (kind == "trainjob") return ManifestKind::kTrainJob;
  if (kind == "jobset") return ManifestKind::kJobSet;
  if (kind == "rayjob") return ManifestKind::kRayJob;
  if (kind.empty()) fail("shardtrain k8s needs a KIND: pytorchjob, trainjob, jobset or rayjob");
  fail("unknown KIND {}: expected pytorchjob, trainjob, jobset or rayjob", quote_for_error(kind));
}

// Object names get suffixes (-etcd, -master-0, -node-0-0.<name>), so they stay well under the
// 63 characters of a DNS label.
void parse_identity(const ManifestFlags& flags, ManifestOptions& options) {
  static const std::regex dns_label(R"(^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$)");
  options.name = required(flags.name, "--name", "--name llama-ft");
  check_form(options.name, dns_label, "--name",
             "a DNS label of at most 40 characters: lower-case letters, digits and '-', starting "
             "with a letter, e.g. llama-ft");
  static const std::regex image_form(R"(^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$)");
  options.image = required(flags.image, "--image", "--image registry.example/shardtrain:0.1.0");
  check_form(options.image, image_form, "--image",
             "an image reference without spaces, e.g. registry.example/shardtrain:0.1.0");
  static const std::regex namespace_form(R"(^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$)");
  if (flags.namespace_name) {
    options.namespace_name = *flags.namespace_name;
    check_form(options.namespace_name, namespace_form, "--namespace",
               "a DNS label (lower-case letters, digits, '-'), e.g. training");
  }
  if (flags.etcd_image) {
    options.etcd_image = *flags.etcd_image;
    check_form(options.etcd_image, image_form, "--etcd-image",
               "an image reference without spaces, e.g. quay.io/coreos/etcd:v3.5.17");
  }
}

void parse_sizes(const ManifestFlags& flags, ManifestOptions& options) {
  options.nodes = parse_int_in(required(flags.nodes, "--nodes", "--nodes 2"), "--nodes", 1, 10000);
  // --instance-type gives the GPUs and EFA interfaces of its nodes unless the flags say more.
  const InstanceType* instance =
      flags.instance_type ? find_instance_type(*flags.instance_type) : nullptr;
  if (instance != nullptr && !flags.gpus_per_node) {
    options.gpus_per_node = instance->gpus;
  } else {
    options.gpus_per_node = parse_int_in(
        required(flags.gpus_per_node, "--gpus-per-node", "--gpus-per-node 8 (0 for a CPU job)"),
        "--gpus-per-node", 0, 64);
  }
  if (instance != nullptr && !flags.efa_per_node) options.efa_per_node = instance->efa;
  if (flags.efa_per_node) {
    options.efa_per_node = parse_int_in(*flags.efa_per_node, "--efa-per-node", 0, 64);
    if (options.efa_per_node > 0 && options.gpus_per_node == 0) {
      fail("--efa-per-node {} needs GPUs: EFA carries NCCL traffic; give --gpus-per-node",
           options.efa_per_node);
    }
  }
  options.min_nodes = options.nodes;
  if (flags.min_nodes) {
    options.min_nodes = parse_int_in(*flags.min_nodes, "--min-nodes", 1, 10000);
    if (options.min_nodes > options.nodes) {
      fail(
          "--min-nodes {} is greater than --nodes {}; an elastic job runs between --min-nodes "
          "and --nodes nodes",
          options.min_nodes, options.nodes);
    }
  }
  if (flags.max_restarts) {
    options.max_restarts = parse_int_in(*flags.max_restarts, "--max-restarts", 0, 1000);
  }
  if (flags.termination_grace) {
    options.termination_grace_s =
        parse_int_in(*flags.termination_grace, "--termination-grace", 60, 86400);
  }
}

void parse_rendezvous(const ManifestFlags& flags, ManifestOptions& options) {
  options.etcd = options.elastic();
  if (flags.rdzv) {
    if (*flags.rdzv != "etcd" && *flags.rdzv != "static") {
      fail(
          "--rdzv {}: expected etcd (an etcd Deployment is rendered with the job) or static "
          "(node 0's launcher hosts the store)",
          quote_for_error(*flags.rdzv));
    }
    options.etcd = *flags.rdzv == "etcd";
  }
  if (options.elastic() && !options.etcd) {
    fail(
        "--min-nodes {} < --nodes {} is an elastic job, which needs --rdzv etcd (with the "
        "static rendezvous node 0 hosts the store and cannot leave)",
        options.min_nodes, options.nodes);
  }
  if (options.kind == ManifestKind::kRayJob && (options.etcd || options.elastic())) {
    fail(
        "rayjob: Ray places a fixed number of nodes and the driver hands node 0's address to "
        "every node; drop --min-nodes and --rdzv etcd");
  }
}

void parse_pod_extras(const ManifestFlags& flags, ManifestOptions& options) {
  if (flags.metrics_port) {
    options.metrics_port = parse_int_in(*flags.metrics_port, "--metrics-port", 1024, 65535);
    if (options.metrics_port == 29500 || options.metrics_port == 2379) {
      fail("--metrics-port {}: that port is the rendezvous store's; pick another, e.g. 9400",
           options.metrics_port);
    }
  }
  options.pod_monitor = flags.pod_monitor;
  if (options.pod_monitor && options.metrics_port == 0) {
    fail("--pod-monitor needs --metrics-port PORT (the port Prometheus scrapes), e.g. 9400");
  }
  static const std::regex quantity(R"(^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$)");
  if (flags.shm_size) {
    options.shm_size = *flags.shm_size;
    check_form(options.shm_size, quantity, "--shm-size", "a Kubernetes quantity, e.g. 64Gi");
    // NCCL and Gloo put their shared-memory transport in /dev/shm: an empty one fails the first
    // collective, not the rendering.
    if (!(std::strtod(options.shm_size.c_str(), nullptr) > 0)) {
      fail("--shm-size {}: /dev/shm must be larger than 0 (NCCL and Gloo need it), e.g. 64Gi",
           quote_for_error(options.shm_size));
    }
  }
  for (const std::string& item : flags.node_selectors) {
    options.node_selector.push_back(parse_label_pair(item, "--node-selector"));
  }
  if (flags.pvc) {
    static const std::regex pvc_form(
        R"(^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?):(/[A-Za-z0-9._/-]*)$)");
    std::smatch m;
    if (!std::regex_match(*flags.pvc, m, pvc_form) || m[3].str() == "/") {
      fail(
          "--pvc {}: expected CLAIM:/mount/path, an existing PersistentVolumeClaim and an "
          "absolute path other than /, e.g. ckpt-llama:/checkpoints",
          quote_for_error(*flags.pvc));
    }
    options.checkpoint = CheckpointVolume{m[1].str(), m[3].str()};
  }
}

void parse_worker_command(const ManifestFlags& flags, ManifestOptions& options) {
  std::vector<std::string> command = flags.worker_command;
  if (!command.empty() && command.front() == "--") command.erase(command.begin());
  if (command.empty()) {
    fail(
        "nothing to run: give the worker command after --, e.g. shardtrain k8s pytorchjob ... "
        "-- train --config /etc/shardtrain/job.toml");
  }
  for (const std::string& word : command) {
    if (!is_valid_utf8(word)) {
      fail("worker command: the argument {} is not valid UTF-8; pass UTF-8 text",
           quote_for_error(word));
    }
    if (word.find('\n') != std::string::npos || word.find('\0') != std::string::npos) {
      fail("worker command: the argument {} holds a newline or NUL; pass it in a config file",
           quote_for_error(word));
    }
  }
  const std::string& first = command.front();
  bool launchable = !first.empty() && first.front() == '/';
  for (const char* subcommand : kLaunchableSubcommands) launchable |= first == subcommand;
  if (!launchable) {
    fail(
        "worker command {}: shardtrain launch runs a shardtrain subcommand (train, eval, "
        "bench, doctor) or an absolute path to an executable, e.g. -- train --config job.toml",
        quote_for_error(first));
  }
  options.worker_command = std::move(command);
}

}  // namespace

ManifestOptions resolve_manifest_options(const ManifestFlags& flags) {
  ManifestOptions options;
  options.kind = parse_kind(flags.kind);
  options.kind_name = flags.kind;
  parse_identity(flags, options);
  parse_sizes(flags, options);
  parse_rendezvous(flags, options);
  parse_pod_extras(flags, options);
  parse_worker_command(flags, options);
  resolve_team_options(flags, options);
  return options;
}

}  // namespace shardtrain::launch::k8s
