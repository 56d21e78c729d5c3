#!/usr/bin/env python3
"""Validates what `shardtrain k8s` renders against the upstream CRD schemas (run by ctest).

    validate_manifests.py SHARDTRAIN_BINARY CRD_DIR EXAMPLES_DIR CORE_OBJECTS_OUT.json

Renders every KIND over a matrix of flags (static and etcd rendezvous, GPU and CPU, EFA,
checkpoint volume, metrics + PodMonitor, node selector) plus the committed examples, and checks
each custom resource against its CRD's openAPIV3Schema with jsonschema, made as strict as the
API server: a field the schema does not declare is an error (the API server would silently
prune it), as is any field under an object the schema leaves empty. The core objects
(Service, Deployment, PodMonitor) are written to CORE_OBJECTS_OUT.json for
validate_core_objects.mjs (the Kubernetes schemas of the npm package kubernetes-models).
Exits 0 when all are valid; otherwise prints each error with its document and path, exits 1.
"""

import copy
import glob
import json
import os
import subprocess
import sys

try:
    import jsonschema
    import yaml
except ImportError as missing:
    print(f"SKIP: {missing.name} is not installed (Debian python3-jsonschema, python3-yaml; "
          "scripts/setup.sh installs them)")
    sys.exit(77)

CRD_FILES = {
    ("kubeflow.org/v1", "PyTorchJob"): "kubeflow.org_pytorchjobs.yaml",
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): "trainer.kubeflow.org_trainjobs.yaml",
    ("trainer.kubeflow.org/v1alpha1", "TrainingRuntime"):
        "trainer.kubeflow.org_trainingruntimes.yaml",
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): "jobset.x-k8s.io_jobsets.yaml",
    ("ray.io/v1", "RayJob"): "ray.io_rayjobs.yaml",
}
CORE_KINDS = {("v1", "Service"), ("apps/v1", "Deployment"), ("v1", "ConfigMap"),
              ("v1", "Secret"), ("monitoring.coreos.com/v1", "PodMonitor"),
              ("networking.k8s.io/v1", "NetworkPolicy")}

BASE = ["--name", "llama-ft", "--image", "registry.example/shardtrain:0.1.0"]
WORKER = ["--", "train", "--config", "/etc/shardtrain/job.toml"]
VARIANTS = [
    ["--nodes", "1", "--gpus-per-node", "8"],
    ["--nodes", "4", "--gpus-per-node", "8", "--efa-per-node", "32"],
    ["--nodes", "2", "--gpus-per-node", "0", "--pvc", "ckpt:/ckpt"],
    ["--nodes", "4", "--gpus-per-node", "4", "--metrics-port", "9400", "--pod-monitor",
     "--node-selector", "node.kubernetes.io/instance-type=g6.12xlarge",
     "--node-selector", "topology.kubernetes.io/zone=us-east-1a", "--namespace", "training",
     "--shm-size", "16Gi", "--termination-grace", "900", "--max-restarts", "0"],
    # What a team adds: node type, EFA choice, env, resources, labels, Kueue, priority, IRSA,
    # tolerations, Hub token, NetworkPolicy, PodMonitor label, no GPU metrics.
    ["--nodes", "2", "--instance-type", "p5.48xlarge", "--efa-rdma", "on",
     "--env", "NCCL_DEBUG=INFO", "--env", "ODD=[1, 2]", "--label", "team=ml",
     "--annotation", "example.com/owner=Ana", "--queue", "team-a", "--priority-class", "high",
     "--service-account", "shardtrain-s3", "--toleration", "dedicated=gpu:NoSchedule",
     "--hf-token-secret", "hf:token", "--network-policy", "--metrics-port", "9400",
     "--pod-monitor", "--monitor-label", "release=kube-prometheus-stack",
     "--metrics-gpu", "false", "--cpu", "180", "--memory", "1800Gi"],
]
ELASTIC_VARIANTS = [
    ["--nodes", "4", "--min-nodes", "2", "--gpus-per-node", "8", "--efa-per-node", "32"],
    ["--nodes", "2", "--rdzv", "etcd", "--gpus-per-node", "0", "--pvc", "ckpt:/ckpt"],
]


def strict(schema, at_root=True):
    """The CRD schema as JSON Schema that refuses what the API server would prune."""
    schema = copy.deepcopy(schema)

    def visit(node, path):
        if not isinstance(node, dict):
            return
        node.pop("x-kubernetes-int-or-string", None)
        preserve = node.get("x-kubernetes-preserve-unknown-fields", False)
        if node.get("type") == "object" and not preserve and "additionalProperties" not in node:
            if path == ("metadata",):
                node["properties"] = {key: {} for key in ("name", "namespace", "labels",
                                                          "annotations")}
            node["additionalProperties"] = False
        for key, child in node.get("properties", {}).items():
            visit(child, path + (key,))
        if isinstance(node.get("items"), dict):
            visit(node["items"], path + ("[]",))
        if isinstance(node.get("additionalProperties"), dict):
            visit(node["additionalProperties"], path + ("*",))
        for combinator in ("anyOf", "allOf", "oneOf"):
            for child in node.get(combinator, []):
                visit(child, path)

    visit(schema, ())
    return schema


def load_schemas(crd_dir):
    schemas = {}
    for (api_version, kind), filename in CRD_FILES.items():
        with open(os.path.join(crd_dir, filename)) as file:
            crd = yaml.safe_load(file)
        group = crd["spec"]["group"]
        for version in crd["spec"]["versions"]:
            if f"{group}/{version['name']}" == api_version:
                schemas[(api_version, kind)] = strict(version["schema"]["openAPIV3Schema"])
        assert (api_version, kind) in schemas, f"{filename} has no {api_version}"
    return schemas


def render(binary, args):
    result = subprocess.run([binary, "k8s"] + args, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"shardtrain k8s {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def rendered_streams(binary, examples_dir):
    for kind in ("pytorchjob", "trainjob", "jobset", "rayjob"):
        for variant in VARIANTS:
            args = [kind] + BASE + variant + WORKER
            yield " ".join(args), render(binary, args)
        if kind != "rayjob":
            for variant in ELASTIC_VARIANTS:
                args = [kind] + BASE + variant + WORKER
                yield " ".join(args), render(binary, args)
    for path in sorted(glob.glob(os.path.join(examples_dir, "*.yaml"))):
        with open(path) as file:
            yield path, file.read()


# Worker arguments a YAML loader could misread if written raw: a flow sequence, NEL, DEL, a C1
# control, U+2028, non-ASCII, a YAML 1.1 boolean, a number, a comment marker, quotes.
ODD_ARGUMENTS = ["[1, 2]", "a\u0085b", "d\u007f", "\u009b", "e\u2028f", "\u00e9t\u00e9", "yes",
                 "0x1F", "#x", "it's \"q\"", "--x=: y"]


def odd_arguments_round_trip(binary):
    """Errors when the rendered worker command does not load back as exactly the arguments."""
    errors = []
    for kind in ("pytorchjob", "jobset", "trainjob"):
        args = [kind] + BASE + ["--nodes", "2", "--gpus-per-node", "0", "--",
                                "/usr/bin/env"] + ODD_ARGUMENTS
        text = render(binary, args)
        commands = []
        for document in yaml.safe_load_all(text):
            stack = [document]
            while stack:
                node = stack.pop()
                if isinstance(node, dict):
                    if isinstance(node.get("command"), list):
                        commands.append(node["command"])
                    stack.extend(node.values())
                elif isinstance(node, list):
                    stack.extend(node)
        launched = [c for c in commands if c[:2] == ["shardtrain", "launch"]]
        if not launched:
            errors.append(f"{kind}: no shardtrain launch command rendered")
        for command in launched:
            if command[-len(ODD_ARGUMENTS):] != ODD_ARGUMENTS:
                errors.append(f"{kind}: arguments changed: {command[-len(ODD_ARGUMENTS):]!r}")
    return errors


def first_container(document):
    """Some container of the document's pod templates, found by walking the tree."""
    stack = [document]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("containers"), list) and node["containers"]:
                return node["containers"][0]
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return None


def refuses_unknown_fields(validator, document):
    """The strict schema must refuse a misspelt field deep in a pod template and at the top."""
    deep = copy.deepcopy(document)
    container = first_container(deep)
    if container is None:
        return True
    container["imagePullPolicyy"] = "Always"
    top = copy.deepcopy(document)
    top["spec"]["unknownField"] = 1
    return not validator.is_valid(deep) and not validator.is_valid(top)


def main(argv):
    binary, crd_dir, examples_dir, core_out = argv[1:5]
    if not os.path.isdir(crd_dir):
        print(f"SKIP: no CRDs at {crd_dir} (configure with -DSHARDTRAIN_K8S_CRD_DIR=...)")
        return 77
    schemas = load_schemas(crd_dir)
    errors, core_objects, checked = [], [], {}
    for source, text in rendered_streams(binary, examples_dir):
        for document in yaml.safe_load_all(text):
            key = (document.get("apiVersion"), document.get("kind"))
            checked[key] = checked.get(key, 0) + 1
            if key in CORE_KINDS:
                core_objects.append({"source": source, "object": document})
                continue
            if key not in schemas:
                errors.append(f"{source}: {key}: no schema to validate against")
                continue
            validator = jsonschema.Draft7Validator(schemas[key])
            if checked[key] == 1 and not refuses_unknown_fields(validator, document):
                errors.append(f"{source}: the {key[1]} schema accepts unknown fields")
            for error in validator.iter_errors(document):
                path = "/".join(str(p) for p in error.absolute_path)
                errors.append(f"{source}: {key[1]} at {path}: {error.message}")
    errors += odd_arguments_round_trip(binary)
    with open(core_out, "w") as file:
        json.dump(core_objects, file)
    for (api_version, kind), count in sorted(checked.items()):
        print(f"checked {count} {kind} ({api_version})")
    missing = [key for key in CRD_FILES if key not in checked]
    for key in missing:
        errors.append(f"nothing rendered a {key}")
    for error in errors:
        print("INVALID", error)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
