#!/usr/bin/env bash
# Installs the build in $1 into a staging folder, then builds and runs a consumer program
# against it twice: as a meson project (pkg-config kiln) and as a CMake project
# (find_package(kiln)).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

meson install -C "$build" --destdir "$stage" --no-rebuild --quiet
pcdir=$(dirname "$(find "$stage" -name kiln.pc | head -n 1)")
libdir=$(dirname "$(find "$stage" -name 'libkiln.so' | head -n 1)")
cmakedir=$(dirname "$(find "$stage" -name kilnConfig.cmake | head -n 1)")
prefix=$(dirname "$(dirname "$(find "$stage" -type d -path '*/include/kiln' | head -n 1)")")
[ -f "$pcdir/kiln.pc" ] && [ -f "$libdir/libkiln.so" ] && [ -d "$prefix/include/kiln" ] || {
  echo "install incomplete under $stage"; exit 1; }

echo "-- meson consumer"
PKG_CONFIG_PATH="$pcdir" PKG_CONFIG_SYSROOT_DIR="$stage" \
  meson setup "$stage/meson-build" "$here/meson" >/dev/null
ninja -C "$stage/meson-build" >/dev/null
LD_LIBRARY_PATH="$libdir" "$stage/meson-build/consumer"

echo "-- cmake consumer"
cmake -S "$here/cmake" -B "$stage/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
  -Dkiln_DIR="$cmakedir" >/dev/null
cmake --build "$stage/cmake-build" >/dev/null
LD_LIBRARY_PATH="$libdir" "$stage/cmake-build/consumer"
echo "consumers ok"
