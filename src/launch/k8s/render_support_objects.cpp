// The objects around a job: the etcd v3 server of the etcd rendezvous (one replica, in-memory
// data: a rendezvous holds no state worth keeping across an etcd restart, the agents re-form)
// and the Prometheus Operator PodMonitor that scrapes every training pod's metrics port; the
// ConfigMap of --config-file, the NetworkPolicy that admits only the job's pods to its ports
// (etcd, the store, NCCL/Gloo, Ray) and the failure policies the job renderers share.
#include "launch/k8s/manifests.h"

namespace shardtrain::launch::k8s {
namespace {

Json etcd_labels(const ManifestOptions& options) {
  return {{"app.kubernetes.io/name", "shardtrain"},
          {"app.kubernetes.io/instance", options.name},
          {"app.kubernetes.io/component", "etcd"}};
}

Json etcd_metadata(const ManifestOptions& options) {
  Json metadata = object_metadata(options, etcd_service_name(options));
  metadata["labels"] = etcd_labels(options);
  return metadata;
}

Json etcd_container(const ManifestOptions& options) {
  const std::string client_port = std::to_string(kEtcdClientPort);
  return {
      {"name", "etcd"},
      {"image", options.etcd_image},
      {"imagePullPolicy", "IfNotPresent"},
      {"command",
       {"etcd", "--name", etcd_service_name(options), "--data-dir", "/var/lib/etcd",
        "--listen-client-urls", "http://0.0.0.0:" + client_port, "--advertise-client-urls",
        "http://" + etcd_service_name(options) + ":" + client_port}},
      {"ports", Json::array({Json{
                    {"name", "client"}, {"containerPort", kEtcdClientPort}, {"protocol", "TCP"}}})},
      {"readinessProbe",
       {{"httpGet", {{"path", "/health"}, {"port", kEtcdClientPort}}}, {"periodSeconds", 5}}},
      {"resources",
       {{"requests", {{"cpu", "500m"}, {"memory", "512Mi"}}}, {"limits", {{"memory", "1Gi"}}}}},
      {"volumeMounts", Json::array({Json{{"name", "data"}, {"mountPath", "/var/lib/etcd"}}})}};
}

}  // namespace

std::vector<std::string> etcd_launch_flags(const ManifestOptions& options) {
  return {
      "--rdzv-backend",  "etcd",
      "--rdzv-endpoint", etcd_service_name(options) + ":" + std::to_string(kEtcdClientPort),
      "--nnodes",        std::to_string(options.min_nodes) + ":" + std::to_string(options.nodes),
      "--rdzv-id",       options.name,
      "--max-restarts",  std::to_string(options.max_restarts)};
}

std::vector<Json> render_etcd(const ManifestOptions& options) {
  const Json service = {{"apiVersion", "v1"},
                        {"kind", "Service"},
                        {"metadata", etcd_metadata(options)},
                        {"spec",
                         {{"selector", etcd_labels(options)},
                          {"ports", Json::array({Json{{"name", "client"},
                                                      {"port", kEtcdClientPort},
                                                      {"targetPort", kEtcdClientPort},
                                                      {"protocol", "TCP"}}})}}}};
  const Json deployment = {
      {"apiVersion", "apps/v1"},
      {"kind", "Deployment"},
      {"metadata", etcd_metadata(options)},
      {"spec",
       {{"replicas", 1},
        {"selector", {{"matchLabels", etcd_labels(options)}}},
        {"template",
         {{"metadata", {{"labels", etcd_labels(options)}}},
          {"spec",
           {{"containers", Json::array({etcd_container(options)})},
            {"volumes",
             Json::array({Json{{"name", "data"}, {"emptyDir", {{"medium", "Memory"}}}}})}}}}}}}};
  return {service, deployment};
}

Json render_pod_monitor(const ManifestOptions& options) {
  // kube-prometheus-stack selects PodMonitors by a label (release: NAME): --monitor-label.
  Json metadata = object_metadata(options, options.name);
  for (const auto& [key, value] : options.monitor_labels) metadata["labels"][key] = value;
  return {
      {"apiVersion", "monitoring.coreos.com/v1"},
      {"kind", "PodMonitor"},
      {"metadata", metadata},
      {"spec",
       {{"selector", {{"matchLabels", job_labels(options)}}},
        {"podMetricsEndpoints",
         Json::array({Json{{"port", "metrics"}, {"path", "/metrics"}, {"interval", "15s"}}})}}}};
}

}  // namespace shardtrain::launch::k8s

namespace shardtrain::launch::k8s {

Json render_config_map(const ManifestOptions& options) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", object_metadata(options, config_map_name(options))},
          {"data", {{kConfigFileName, options.config_file_text}}}};
}

Json render_network_policy(const ManifestOptions& options) {
  const Json job_pods = {{"matchLabels", {{"app.kubernetes.io/instance", options.name}}}};
  Json ingress = Json::array({Json{{"from", Json::array({Json{{"podSelector", job_pods}}})}}});
  if (options.metrics_port > 0) {
    // Prometheus scrapes from its own namespace: the metrics port stays open.
    ingress.push_back(
        {{"ports", Json::array({Json{{"port", options.metrics_port}, {"protocol", "TCP"}}})}});
  }
  if (options.kind == ManifestKind::kRayJob) {
    // KubeRay's submitter pod (K8sJobMode) reaches the head's dashboard to submit the job.
    ingress.push_back({{"from", Json::array({Json{{"podSelector", Json::object()}}})},
                       {"ports", Json::array({Json{{"port", 8265}, {"protocol", "TCP"}}})}});
  }
  return {{"apiVersion", "networking.k8s.io/v1"},
          {"kind", "NetworkPolicy"},
          {"metadata", object_metadata(options, options.name)},
          {"spec",
           {{"podSelector", job_pods},
            {"policyTypes", Json::array({"Ingress"})},
            {"ingress", ingress}}}};
}

Json pod_failure_policy() {
  return {{"rules",
           Json::array(
               {Json{{"action", "FailJob"},
                     {"onExitCodes", {{"operator", "In"}, {"values", Json::array({2})}}}},
                Json{{"action", "Ignore"},
                     {"onPodConditions", Json::array({Json{{"type", "DisruptionTarget"}}})}}})}};
}

Json jobset_failure_policy(const ManifestOptions& options) {
  return {
      {"maxRestarts", options.max_restarts},
      {"rules", Json::array({Json{{"name", "config-error"},
                                  {"action", "FailJobSet"},
                                  {"onJobFailureReasons", Json::array({"PodFailurePolicy"})}}})}};
}

}  // namespace shardtrain::launch::k8s
