#!/usr/bin/env bash
# Download (not install) the Debian packages scripts/gpu-check.sh unpacks on a GPU
# machine that has CUDA but no package registry: into DIR (default .deps).
set -euo pipefail
DIR=${1:-.deps}
mkdir -p "$DIR"
cd "$DIR"
apt-get download libssh-dev libssh-4 libcjson-dev libcjson1 libopenblas-dev \
  libopenblas0-pthread libopenblas-pthread-dev libopenblas0 libgfortran5 zlib1g-dev libblas-dev
