#!/usr/bin/env bash
# deploy/Dockerfile's RUN steps, as far as they run without Docker and without NVIDIA's
# repository: in a clean minbase root of this machine's Debian release (tests/k8s/pristine_root.sh:
# made once with debootstrap, cached at BUILD_DIR/deb-test/root-<suite>.tar and shared with
# deb_install_test.sh), each stage's `apt-get install` package list (as
# tests/k8s/dockerfile_lint.py reads it) must resolve: apt-get install --simulate, so every
# package name exists and its dependencies are satisfiable. The NCCL pins (NVIDIA's repository)
# and the download steps (EFA installer, aws-ofi-nccl, Ray from PyPI) are reported as skipped
# when their hosts are unreachable. Skips (exit 77) with a message when not root, without
# debootstrap, or without the Debian mirror.
#   dockerfile_root_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
trap 'echo "dockerfile_root_test.sh: line $LINENO failed (exit $?): $BASH_COMMAND"' ERR
build_dir=$(realpath "$1")
source_dir=$(realpath "$2")
work=$build_dir/deb-test
dockerfile=$source_dir/deploy/Dockerfile
source "$(dirname "$0")/pristine_root.sh"

root=$work/docker-root
trap 'rm -rf "$root"' EXIT
rm -rf "$root" && mkdir -p "$root"
tar -C "$root" -xf "$tarball"
cp /etc/resolv.conf "$root/etc/resolv.conf"
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"; }
in_root apt-get update -qq > "$work/docker-apt.log" 2>&1 ||
  { cat "$work/docker-apt.log"; skip "apt-get update failed in the chroot (mirror unreachable?)"; }

steps=$(python3 "$source_dir/tests/k8s/dockerfile_lint.py" --apt-steps "$dockerfile")
failed=0
while IFS=$'\t' read -r stage packages; do
  debian=() nvidia=()
  for package in $packages; do
    if [[ $package == *=* ]]; then nvidia+=("$package"); else debian+=("$package"); fi
  done
  ((${#nvidia[@]})) && echo "stage $stage: skipped ${nvidia[*]} (pinned from NVIDIA's repository)"
  ((${#debian[@]})) || continue
  if in_root env DEBIAN_FRONTEND=noninteractive apt-get install --simulate -y -qq \
      --no-install-recommends "${debian[@]}" > "$work/docker-simulate.log" 2>&1; then
    echo "stage $stage: apt-get install of ${#debian[@]} packages resolves: ${debian[*]}"
  else
    echo "stage $stage: apt-get install does not resolve:"
    tail -20 "$work/docker-simulate.log"
    failed=1
  fi
done < <(python3 -c 'import json,sys
for stage, lists in json.loads(sys.argv[1]).items():
    for packages in lists:
        print(stage + "\t" + " ".join(packages))' "$steps")

# The download steps, with the versions the Dockerfile pins.
arg() { sed -n "s/^ARG $1=//p" "$dockerfile" | head -n 1; }
efa=$(arg EFA_INSTALLER_VERSION) ofi=$(arg AWS_OFI_NCCL_VERSION)
for url in "https://efa-installer.amazonaws.com/aws-efa-installer-$efa.tar.gz" \
  "https://github.com/aws/aws-ofi-nccl/releases/download/v$ofi/aws-ofi-nccl-$ofi.tar.gz"; do
  host=$(cut -d/ -f3 <<< "$url")
  if timeout 20 curl -fsSIL "$url" > /dev/null 2>&1; then
    echo "download step: $url exists"
  elif timeout 10 curl -sSI "https://$host/" > /dev/null 2>&1; then
    echo "download step: $url does not exist (a wrong version pin?)"
    failed=1
  else
    echo "download step skipped: $url is unreachable from here (no network to it)"
  fi
done
exit "$failed"
