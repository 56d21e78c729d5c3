#include "launch/k8s/manifests.h"

namespace shardtrain::launch::k8s {

std::vector<Json> render_manifests(const ManifestOptions& options) {
  std::vector<Json> documents;
  if (options.etcd) documents = render_etcd(options);
  if (!options.config_file_text.empty()) documents.push_back(render_config_map(options));
  const auto append = [&documents](std::vector<Json> more) {
    for (Json& document : more) documents.push_back(std::move(document));
  };
  switch (options.kind) {
    case ManifestKind::kPyTorchJob:
      documents.push_back(render_pytorchjob(options));
      break;
    case ManifestKind::kTrainJob:
      append(render_trainjob(options));
      break;
    case ManifestKind::kJobSet:
      append(render_jobset(options));
      break;
    case ManifestKind::kRayJob:
      documents.push_back(render_rayjob(options));
      break;
  }
  if (options.pod_monitor) documents.push_back(render_pod_monitor(options));
  if (options.network_policy) documents.push_back(render_network_policy(options));
  return documents;
}

}  // namespace shardtrain::launch::k8s
