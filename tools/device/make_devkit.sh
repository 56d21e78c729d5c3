#!/usr/bin/env bash
# Packs this machine's Debian build dependencies (headers, shared libraries, CMake package files)
# into .devkit/usr so a GPU machine that has CUDA, CMake and a compiler but none of our Debian
# -dev packages (and no network) can build shardtrain:
#   tools/device/make_devkit.sh            # here, once (after scripts/setup.sh)
#   tools/device/build_on_device.sh        # there, with .devkit carried along
# The layout mirrors /usr so the packages' CMake files find their libraries relative to
# themselves. Libraries are Debian 12's (glibc 2.36); the target needs glibc >= 2.36.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
kit=$root/.devkit/usr
arch=x86_64-linux-gnu
rm -rf "$root/.devkit"
mkdir -p "$kit/include/$arch" "$kit/lib/$arch/cmake" "$kit/share/cmake"

for dir in fmt nlohmann toml++ CLI gtest gmock gloo; do
  cp -rL "/usr/include/$dir" "$kit/include/"
done
cp -L /usr/include/pcre2.h /usr/include/utf8proc.h "$kit/include/"
for header in cblas.h openblas_config.h f77blas.h cblas_mangling.h; do
  [[ -e /usr/include/$arch/$header ]] && cp -L "/usr/include/$arch/$header" "$kit/include/$arch/"
done

copy_libs() {  # pattern...
  for pattern in "$@"; do
    for f in /usr/lib/$arch/$pattern; do [[ -e $f ]] && cp -a "$f" "$kit/lib/$arch/"; done
  done
}
copy_libs 'libfmt.so*' 'libtomlplusplus.so*' 'libpcre2-8.so*' 'libutf8proc.so*' \
  'libgfortran.so.5*' 'libquadmath.so.0*' 'libgtest*.a' 'libgmock*.a'
# cpp-httplib (obs/metrics_server) and the headers its feature macros pull in.
cp -L /usr/include/httplib.h /usr/include/zlib.h /usr/include/zconf.h "$kit/include/"
cp -rL /usr/include/openssl /usr/include/brotli "$kit/include/"
cp -rL /usr/include/$arch/openssl "$kit/include/$arch/"
copy_libs 'libcpp-httplib.so*'
# libcurl (io/http: the Hub and etcd clients) and xxHash (checkpoint checksums).
cp -rL /usr/include/$arch/curl "$kit/include/"
cp -L /usr/include/xxhash.h "$kit/include/"
copy_libs 'libcurl.so*' 'libxxhash.so*'
cp -L /usr/lib/$arch/openblas-pthread/libopenblas.so.0 "$kit/lib/$arch/libopenblas.so.0"
ln -sf libopenblas.so.0 "$kit/lib/$arch/libopenblas.so"
cp -a /usr/lib/libgloo.so* "$kit/lib/"
# yaml-cpp (launch/k8s: the manifests' emitter).
cp -rL /usr/include/yaml-cpp "$kit/include/"
copy_libs 'libyaml-cpp.so*'

# Whatever those libraries load in turn (gloo: hiredis, ibverbs, libnl), except the C/C++ runtime.
for lib in "$kit"/lib/$arch/*.so.* "$kit"/lib/*.so.*; do
  ldd "$lib" | awk '/=> \//{print $3}' | while read -r dep; do
    case $(basename "$dep") in
      libc.so*|libm.so*|libstdc++*|libgcc_s*|ld-linux*|libpthread*|libdl.so*|librt.so*) ;;
      *) [[ -e "$kit/lib/$arch/$(basename "$dep")" ]] || cp -L "$dep" "$kit/lib/$arch/" ;;
    esac
  done
done

for pkg in fmt tomlplusplus GTest yaml-cpp; do cp -r "/usr/lib/$arch/cmake/$pkg" "$kit/lib/$arch/cmake/"; done
for pkg in CLI11 nlohmann_json Gloo; do cp -r "/usr/share/cmake/$pkg" "$kit/share/cmake/"; done
# Gloo's exported targets name /usr/lib absolutely; make them relative to the package.
sed -i 's#"/usr/lib/libgloo#"${_IMPORT_PREFIX}/lib/libgloo#g' "$kit/share/cmake/Gloo/"GlooTargets-*.cmake
du -sh "$root/.devkit"
