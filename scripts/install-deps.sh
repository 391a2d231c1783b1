#!/usr/bin/env bash
# Installs kiln's build dependencies from Debian's packages (idempotent; needs root or sudo).
set -euo pipefail
packages=(g++ meson ninja-build pkg-config cmake
          libfmt-dev xtensor-dev libxsimd-dev libxbyak-dev catch2 libopenblas-dev libxsmm-dev libdnnl-dev
          nlohmann-json3-dev libzip-dev zlib1g-dev
          libonnx-dev libprotobuf-dev  # ONNX export (kiln::export_onnx) and its checker
          libisal-dev libpng-dev  # TensorBoard event files: CRC-32C of records, PNG images
          doxygen graphviz  # the API reference (scripts/api-docs.sh) and graph rendering
          libopenmpi-dev openmpi-bin  # kiln::distributed (issue 22) and mpirun for its tests
          clang libclang-rt-14-dev  # clang + its sanitizer/libFuzzer runtime: scripts/fuzz.sh
          ccache)  # compiler cache, used by meson when found (scripts/build-cache.sh)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
