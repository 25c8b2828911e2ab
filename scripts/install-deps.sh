#!/usr/bin/env bash
# Installs everything utramp needs to build, test and benchmark, from Debian's packages.
# Idempotent; run as root (or with sudo) on Debian 12.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends \
  build-essential cmake ninja-build pkg-config git \
  gcc g++ clang lld llvm \
  libzydis-dev libasmjit-dev \
  libelf-dev libdw-dev libbpf-dev libzstd-dev zstd libxxhash-dev systemtap-sdt-dev \
  libcli11-dev libfmt-dev nlohmann-json3-dev libcpp-httplib-dev \
  libgtest-dev libgmock-dev libbenchmark-dev \
  binutils file gdb libclang-rt-14-dev \
  prometheus chromium
