#!/usr/bin/env bash
# Builds the libFuzzer targets of the file readers (safetensors, .npy, .npz) with clang,
# AddressSanitizer and UndefinedBehaviorSanitizer, and runs each for a bounded time.
#
#   bash scripts/fuzz.sh [seconds per target, default 60] [target...]
#
# Targets: safetensors npy npz (default: all). Fails (exit 1) on any crash, leak, timeout,
# uncaught non-kiln::Error exception or sanitizer report; the input that triggered it is kept
# in build-fuzz/fuzz-artifacts/<target>/ and the log's tail is printed. New inputs found
# while fuzzing go to build-fuzz/fuzz-corpus/<target>/ (kept between runs); the seeds in
# test/fuzz/corpus/<target>/ are only read. Inputs go up to KILN_FUZZ_MAX_LEN bytes (default
# 256 KiB: libFuzzer's own default of 4 KiB cannot reach deep nesting or many-member archives;
# it still starts small and grows lengths as coverage stops improving). See docs/io.md for
# longer runs.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/build-cache.sh
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(safetensors npy npz)
build=${KILN_FUZZ_BUILD:-build-fuzz}
max_len=${KILN_FUZZ_MAX_LEN:-262144}

if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ not found"
  exit 1
fi
if [ ! -f "$build/build.ninja" ]; then
  # meson adds ccache by itself only when CXX is not set.
  compiler=clang++
  command -v ccache >/dev/null && compiler="ccache clang++"
  CXX=$compiler meson setup "$build" -Dfuzzers=true -Db_sanitize=address,undefined \
    -Db_lundef=false -Dbuildtype=debugoptimized -Dwerror=false >"$build.setup.log" 2>&1 \
    || { cat "$build.setup.log"; exit 1; }
  rm -f "$build.setup.log"
fi
ninja -C "$build" -j"${KILN_FUZZ_JOBS:-2}" "${targets[@]/#/test/fuzz/fuzz_}" >/dev/null \
  || { ninja -C "$build" -j1 "${targets[@]/#/test/fuzz/fuzz_}" | tail -n 40; exit 1; }

export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
status=0
for target in "${targets[@]}"; do
  corpus="$build/fuzz-corpus/$target"
  artifacts="$build/fuzz-artifacts/$target"
  log="$build/fuzz-$target.log"
  mkdir -p "$corpus" "$artifacts"
  "$build/test/fuzz/fuzz_$target" "$corpus" "test/fuzz/corpus/$target" \
    -dict="test/fuzz/$target.dict" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 \
    -rss_limit_mb=2048 \
    -artifact_prefix="$artifacts/" -print_final_stats=1 >"$log" 2>&1
  code=$?
  runs=$(grep -oE '^stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$')
  if [ $code -ne 0 ] || grep -qE 'runtime error|Sanitizer|ERROR: libFuzzer' "$log"; then
    echo "FAILED: fuzz_$target (exit $code); artifacts in $artifacts"
    tail -n 60 "$log"
    status=1
  else
    echo "ok: fuzz_$target, ${runs:-?} inputs in ${seconds}s"
  fi
done
exit $status
