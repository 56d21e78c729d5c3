// trainer.kubeflow.org/v1alpha1 TrainJob (Kubeflow Trainer v2.3) and the namespaced
// TrainingRuntime it references (one per job, in the job's namespace: no cluster RBAC, no
// collision between namespaces; deleting the namespace's job objects takes it along). The runtime's
// torch policy makes the operator set PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK (the pod's Job
// completion index) and PET_MASTER_ADDR/PORT (<job>-node-0-0.<job>:29500); Trainer v2 has no
// elastic policy, so the etcd rendezvous is given as launcher flags, which win over PET_*.
#include "launch/k8s/manifests.h"

namespace shardtrain::launch::k8s {
namespace {

std::string runtime_name(const ManifestOptions& options) { return options.name + "-runtime"; }

Json training_runtime(const ManifestOptions& options) {
  // The command comes from the TrainJob (trainer.command), so the runtime's container has none.
  Json container = training_container(options, "node", Json(), Json::array(), Json::array());
  container.erase("command");
  const Json job_template = {
      {"metadata", {{"labels", {{"trainer.kubeflow.org/trainjob-ancestor-step", "trainer"}}}}},
      {"spec",
       {{"backoffLimit", options.max_restarts},
        {"podFailurePolicy", pod_failure_policy()},
        {"template",
         {{"metadata", pod_metadata(options)},
          {"spec", training_pod_spec(options, std::move(container), "Never")}}}}}};
  Json metadata = object_metadata(options, runtime_name(options));
  metadata["labels"]["trainer.kubeflow.org/framework"] = "torch";
  return {{"apiVersion", "trainer.kubeflow.org/v1alpha1"},
          {"kind", "TrainingRuntime"},
          {"metadata", metadata},
          {"spec",
           {{"mlPolicy", {{"numNodes", options.nodes}, {"torch", Json::object()}}},
            {"template",
             {{"spec",
               {{"failurePolicy", jobset_failure_policy(options)},
                {"replicatedJobs",
                 Json::array({Json{{"name", "node"}, {"template", job_template}}})}}}}}}}};
}

}  // namespace

std::vector<Json> render_trainjob(const ManifestOptions& options) {
  const std::vector<std::string> flags =
      options.etcd ? etcd_launch_flags(options)
                   : std::vector<std::string>{"--rdzv-id", options.name, "--max-restarts",
                                              std::to_string(options.max_restarts)};
  Json trainer = {{"numNodes", options.nodes},
                  {"numProcPerNode", options.nproc_per_node()},
                  {"command", launch_command(options, flags)}};
  const Json resources = gpu_resources(options);
  if (!resources.empty()) trainer["resourcesPerNode"] = resources;
  Json trainjob = {{"apiVersion", "trainer.kubeflow.org/v1alpha1"},
                   {"kind", "TrainJob"},
                   {"metadata", job_metadata(options)},
                   {"spec",
                    {{"runtimeRef",
                      {{"name", runtime_name(options)},
                       {"apiGroup", "trainer.kubeflow.org"},
                       {"kind", "TrainingRuntime"}}},
                     {"trainer", trainer}}}};
  return {training_runtime(options), trainjob};
}

}  // namespace shardtrain::launch::k8s
