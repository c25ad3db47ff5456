#!/usr/bin/env bash
# Builds strato's minimal subset (-DSTRATO_MINIMAL=ON -DSTRATO_WITH_CUDA=ON: training and serving) against the CUDA
# libtorch of this machine's python3, on a GPU machine that has CMake, ninja, g++ and PyTorch but
# not the Debian libraries strato builds on, and no network: those travel as .deb files
# (bench/gpu/fetch-debs.sh) and are unpacked into a private prefix.
#
#   bench/gpu/build.sh [BUILD_DIR]      (default build/gpu; DEBS_DIR default .debs)
#
# The prefix's lib directories are in the binaries' run path; run them as they are.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/gpu}
debs=${DEBS_DIR:-.debs}
prefix=${DEPS_PREFIX:-/tmp/strato-deps}
py=${PYTHON:-python3}
torch_cmake=$($py -c 'import torch; print(torch.utils.cmake_prefix_path)')
torch_inc=$($py -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "include"))')
mkdir -p "$prefix"
for f in "$debs"/*.deb; do
  case $(basename "$f") in
    libgloo*) [ -d "$torch_inc/gloo" ] && continue ;;          # torch's own gloo headers win
    libfmt*) [ -f "$torch_inc/fmt/base.h" ] && continue ;;      # torch's own fmt (CMakeLists.txt)
  esac
  if command -v dpkg >/dev/null; then dpkg -x "$f" "$prefix"; else ar p "$f" data.tar.xz | tar -xJ -C "$prefix"; fi
done
# Debian's CMake files and a few links name /usr/... absolutely: point them into the prefix.
grep -rl '"/usr/' "$prefix"/usr/lib/x86_64-linux-gnu/cmake "$prefix"/usr/share/cmake 2>/dev/null |
  xargs -r sed -i -e "s#\"/usr/#\"$prefix/usr/#g" -e "s#\"/usr\"#\"$prefix/usr\"#g"
find "$prefix" -type l -lname '/*' | while read -r l; do ln -sfn "$prefix$(readlink "$l")" "$l"; done
libs="$prefix/usr/lib/x86_64-linux-gnu;$prefix/lib/x86_64-linux-gnu"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATO_MINIMAL=ON -DSTRATO_WITH_CUDA=ON -DSTRATO_BUILD_BENCHMARKS=ON \
  -DCMAKE_PREFIX_PATH="$prefix/usr;$torch_cmake" -DOPENSSL_ROOT_DIR="$prefix/usr" \
  -DCMAKE_BUILD_RPATH="$libs" -DCMAKE_CXX_FLAGS="-include cstdint"
ninja -C "$build" -k 0 strato gpu_test train_test dist_test serve_test serve_forward_bench
