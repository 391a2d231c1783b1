#!/usr/bin/env bash
# Command 1 of the README: install dependencies, configure, build, run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
[ -f build/build.ninja ] || meson setup build
ninja -C build
./build/examples/demo
