#!/usr/bin/env bash
# The Debian package installs in a clean root and runs there: builds
# shardtrain_<version>_amd64.deb with CPack from BUILD_DIR, installs it with apt (which fetches
# its Depends from the Debian mirror) into a fresh minbase root of this machine's Debian release
# (debootstrap; the pristine root is cached as BUILD_DIR/deb-test/root-<suite>.tar and the
# downloaded .debs in BUILD_DIR/deb-test/apt-archives, so reruns are fast), then runs
# `shardtrain --version` and 20 steps of the demo inside it with chroot.
# Skips (exit 77) with a message when not root, without debootstrap, or without the mirror.
#   deb_install_test.sh BUILD_DIR
set -euo pipefail
# Whatever fails, the log says which line and command (CI keeps only the test's output).
trap 'echo "deb_install_test.sh: line $LINENO failed (exit $?): $BASH_COMMAND"' ERR
build_dir=$(realpath "$1")
work=$build_dir/deb-test
source "$(dirname "$0")/pristine_root.sh"
mkdir -p "$work/apt-archives"

# 1. The package.
rm -rf "$build_dir/package"
(cd "$build_dir" && cpack -G DEB > "$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; exit 1; }
deb=$(ls "$build_dir"/package/shardtrain_*_amd64.deb)
echo "built $(basename "$deb")"
dpkg-deb --field "$deb" Depends

# 2. A clean root: $tarball (pristine_root.sh).
root=$work/root
# The exit trap never changes the test's verdict: each step's failure is reported, not fatal.
cleanup() {
  local status=$?
  set +e
  if mountpoint -q "$root/proc"; then
    umount "$root/proc" || umount -l "$root/proc" || echo "cleanup: could not unmount $root/proc"
  fi
  [[ -d $root/var/cache/apt/archives ]] &&
    cp -n "$root"/var/cache/apt/archives/*.deb "$work/apt-archives/" 2>/dev/null
  mountpoint -q "$root/proc" || rm -rf "$root" || echo "cleanup: could not remove $root"
  exit "$status"
}
trap cleanup EXIT
rm -rf "$root" && mkdir -p "$root"
tar -C "$root" -xf "$tarball"
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp "$work"/apt-archives/*.deb "$root/var/cache/apt/archives/" 2>/dev/null || true
cp "$deb" "$root/tmp/"
# Package scripts may want /proc; a container without the right to mount goes on without it.
mount -t proc proc "$root/proc" 2>/dev/null || echo "note: could not mount /proc in the root; going on without it"

# 3. Install with apt (Depends resolved from the mirror) and run.
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"; }
in_root apt-get update -qq > "$work/apt.log" 2>&1 || { cat "$work/apt.log"; skip "apt-get update failed in the chroot (mirror unreachable?)"; }
in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  "/tmp/$(basename "$deb")" >> "$work/apt.log" 2>&1 || { cat "$work/apt.log"; exit 1; }
# A CUDA build also links NVIDIA's runtime (libcudart, libcublasLt, libnccl), which Debian does
# not package: the image gets them from its nvidia/cuda base (deploy/Dockerfile). Here they are
# copied from this machine's toolkit into the root, as that base image provides them; any other
# library that does not resolve is a missing Depends and fails the test.
for pass in 1 2 3; do
  missing=$( (in_root ldd /usr/bin/shardtrain || true) | awk '/not found/ {print $1}')
  [[ -z $missing ]] && break
  for lib in $missing; do
    case $lib in
      libcudart* | libcublas* | libnccl*) ;;
      *) echo "the package's Depends miss $lib"; exit 1 ;;
    esac
    # No early exit in a pipe (awk's exit or head): the writer's SIGPIPE fails the pipeline
    # under pipefail (CI hit exactly that: exit 141 here).
    from=$(ldconfig -p | awk -v l="$lib" '$1 == l && !found {print $NF; found = 1}')
    [[ -n $from ]] || from=$(find /usr/local/cuda/ -name "$lib" -print -quit 2>/dev/null)
    [[ -n $from ]] || { echo "$lib: not found on this machine either"; exit 1; }
    mkdir -p "$root/usr/local/lib" && cp -L "$from" "$root/usr/local/lib/"
    echo "copied NVIDIA's $lib into the root (the CUDA base image's part)"
  done
  in_root ldconfig
done
version=$(in_root shardtrain --version)
echo "in the clean root: $version"
[[ $version == "shardtrain $(dpkg-deb --field "$deb" Version)" ]] || { echo "unexpected version"; exit 1; }
for file in share/shardtrain/ray/shardtrain_ray.py share/shardtrain/k8s share/doc/shardtrain/README.md; do
  [[ -e $root/usr/$file ]] || { echo "the package lacks /usr/$file"; exit 1; }
done
in_root sh -c 'mkdir -p /root/demo && cd /root/demo &&
  ln -sfn /usr/share/shardtrain/demo/examples examples &&
  shardtrain train --config examples/demo.toml --steps 20 --train.device=cpu' > "$work/demo.log" 2>&1 ||
  { cat "$work/demo.log"; exit 1; }
tail -3 "$work/demo.log"
grep -q "20/20" "$work/demo.log" || { echo "the demo did not reach step 20"; cat "$work/demo.log"; exit 1; }
echo "PASS: the package installs in a clean $suite root and trains the demo"
