#!/usr/bin/env bash
# Downloads (here, on Debian 12) the Debian packages that bench/gpu/build.sh unpacks on a GPU
# machine that has CMake, ninja, g++ and a CUDA PyTorch but no Debian libraries and no network.
# Usage: bench/gpu/fetch-debs.sh [DIR]   (default .debs, ignored by git; carry it to the machine)
set -euo pipefail
dir=${1:-.debs}
mkdir -p "$dir"
cd "$dir"
apt-get download \
  libboost1.74-dev libcli11-dev nlohmann-json3-dev libtomlplusplus-dev libtomlplusplus3 \
  libssl-dev libssl3 zlib1g-dev zlib1g libpng-dev libpng16-16 \
  libturbojpeg0-dev libturbojpeg0 libjpeg62-turbo-dev libjpeg62-turbo libgtest-dev \
  libfmt-dev libfmt9 libgloo-dev libgloo0
ls -la
