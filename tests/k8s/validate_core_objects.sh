#!/usr/bin/env bash
# The core objects `shardtrain k8s` renders (Service, Deployment, PodMonitor), validated with the
# Kubernetes API schemas of the npm packages kubernetes-models and
# @kubernetes-models/prometheus-operator, installed once into BUILD_DIR/k8s-npm (a cache; the
# versions are pinned). Skips (exit 77) with a message when npm or the registry is unreachable.
#   validate_core_objects.sh PYTHON SHARDTRAIN CRD_DIR SOURCE_DIR BUILD_DIR
set -euo pipefail
python=$1 binary=$2 crd_dir=$3 source_dir=$4 build_dir=$5
modules=$build_dir/k8s-npm
packages=(kubernetes-models@5.1.0 @kubernetes-models/prometheus-operator@6.0.0)
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "SKIP: node/npm not installed (scripts/setup.sh installs npm)"
  exit 77
fi
if [[ ! -f $modules/.installed ]]; then
  mkdir -p "$modules"
  if ! timeout 300 npm install --no-audit --no-fund --silent --prefix "$modules" "${packages[@]}"; then
    echo "SKIP: npm could not install ${packages[*]} (is the npm registry reachable?)"
    exit 77
  fi
  printf '%s\n' "${packages[@]}" > "$modules/.installed"
fi
objects=$build_dir/k8s-core-objects.json
"$python" "$source_dir/tests/k8s/validate_manifests.py" "$binary" "$crd_dir" \
  "$source_dir/deploy/examples" "$objects"
node "$source_dir/tests/k8s/validate_core_objects.mjs" "$modules/node_modules" "$objects"
