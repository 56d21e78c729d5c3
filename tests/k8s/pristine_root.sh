# shellcheck shell=bash
# Sourced by the clean-root tests (deb_install_test.sh, dockerfile_root_test.sh): checks what they
# need and provides, in $tarball, a pristine minbase root of this machine's Debian release made
# once by debootstrap and cached as $work/root-<suite>.tar. Sets skip(), suite, mirror, tarball.
# REQUIRES: $work (the cache folder). Skips (exit 77) with a message when not root, without
# debootstrap, or without the mirror (SHARDTRAIN_DEBIAN_MIRROR, default deb.debian.org).
skip() { echo "SKIP: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "needs root (debootstrap, chroot)"
command -v debootstrap >/dev/null || skip "debootstrap not installed (scripts/setup.sh test installs it)"
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[[ -n $suite ]] || skip "cannot tell this machine's Debian release from /etc/os-release"
mirror=${SHARDTRAIN_DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$work"
tarball=$work/root-$suite.tar
if [[ ! -f $tarball ]]; then
  scratch=$work/debootstrap-scratch
  rm -rf "$scratch"
  echo "debootstrap $suite from $mirror (once; cached as $tarball)"
  if ! debootstrap --variant=minbase "$suite" "$scratch" "$mirror" > "$work/debootstrap.log" 2>&1; then
    tail -5 "$work/debootstrap.log"
    rm -rf "$scratch"
    skip "debootstrap could not build a $suite root from $mirror (see $work/debootstrap.log)"
  fi
  tar -C "$scratch" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
  rm -rf "$scratch"
fi
