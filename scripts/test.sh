#!/usr/bin/env bash
# Command 2 of the README: build and run the whole test suite in an optimized build and an
# address+undefined sanitizer build and a thread-sanitizer build, then print
# "N passed, N failed" as the last line.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh || exit 1
source scripts/build-cache.sh

passed=0
failed=0
logdir=$(mktemp -d)

# Adds the counts of one Catch2 run (its console output in $1) to the totals.
count_catch() {
  local summary
  summary=$(grep -E '^(All tests passed|test cases:)' "$1" | tail -n 1)
  if [[ $summary =~ All\ tests\ passed.*\ ([0-9]+)\ test\ case ]]; then
    passed=$((passed + BASH_REMATCH[1]))
  elif [[ $summary =~ test\ cases:\ *([0-9]+)\ \|\ *([0-9]+)\ passed\ \|\ *([0-9]+)\ failed ]]; then
    passed=$((passed + BASH_REMATCH[2]))
    failed=$((failed + BASH_REMATCH[3]))
  elif [[ $summary =~ test\ cases:\ *([0-9]+)\ \|\ *([0-9]+)\ failed ]]; then
    failed=$((failed + BASH_REMATCH[2]))
  else
    echo "could not read a Catch2 summary from $1"
    failed=$((failed + 1))
  fi
}

# Runs one named check (a command); counts it as one test.
check() {
  local name=$1
  shift
  if "$@" >"$logdir/$name.log" 2>&1; then
    echo "ok: $name"
    passed=$((passed + 1))
  else
    echo "FAILED: $name (log follows)"
    tail -n 60 "$logdir/$name.log"
    failed=$((failed + 1))
  fi
}

# Runs one Catch2 suite (the command after $1, its log's name) and counts its results; on a
# failure prints the failing parts and counts a sanitizer report as one more failure.
run_suite() {
  local log="$logdir/$1.log"
  shift
  "$@" >"$log" 2>&1
  local status=$?
  tail -n 3 "$log"
  count_catch "$log"
  if [ $status -ne 0 ]; then
    grep -B2 -A30 -E 'FAILED|ERROR|runtime error|Sanitizer' "$log" | head -n 120
    grep -qE 'runtime error|Sanitizer' "$log" && failed=$((failed + 1))
  fi
}

# Prints the tail of a failed build's log, and says so plainly when the disk was full.
build_failed() {
  tail -n 80 "$1"
  grep -q 'No space left on device' "$1" &&
    echo "the build ran out of disk space: $(df -Ph . | awk 'NR == 2 {print $4}') free now"
}

run_build() {
  local dir=$1
  shift
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$@" >"$logdir/setup-$dir.log" 2>&1 ||
      { build_failed "$logdir/setup-$dir.log"; return 1; }
  fi
  ninja -C "$dir" >"$logdir/build-$dir.log" 2>&1 ||
    { build_failed "$logdir/build-$dir.log"; return 1; }
}

# A fresh clone's builds (release 0.2 GiB, ASan 2.0, TSan 0.9, fuzzers 0.3) and its Python
# environment (1.7 GiB) take about 5 GiB of disk.
free_kib=$(df -Pk . | awk 'NR == 2 {print $4}')
if [[ $free_kib =~ ^[0-9]+$ ]] && [ "$free_kib" -lt $((6 * 1024 * 1024)) ]; then
  echo "warning: $((free_kib / 1024)) MiB free on this disk; a fresh clone's builds and" \
    "Python environment take about 5 GiB"
fi

# NumPy and safetensors in a private environment, for the interop test (it skips, with a
# warning, when they cannot be installed, e.g. offline).
if python_path=$(bash scripts/python-env.sh 2>"$logdir/python-env.log" | tail -n 1) &&
  [ -x "$python_path" ]; then
  export KILN_PYTHON=$python_path
else
  echo "warning: no Python environment with numpy and safetensors (interop test skipped)"
  tail -n 5 "$logdir/python-env.log"
fi

for variant in release asan; do
  if [ "$variant" = release ]; then
    dir=build
    run_build "$dir" || { echo "0 passed, 1 failed"; exit 1; }
  else
    dir=build-asan
    run_build "$dir" -Db_sanitize=address,undefined -Dbuildtype=debug -Db_lundef=false \
      || { echo "0 passed, 1 failed"; exit 1; }
  fi
  echo "== $variant: unit tests"
  export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
  # allocator_may_return_null: a request beyond memory returns null, as malloc does, so the
  # tests of kiln's out-of-memory errors run under ASan too.
  export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
  run_suite "unit-$variant" "$dir/test/kiln_tests"
  # Kernel-level tests once per instruction set this CPU has, each forced with KILN_SIMD (the
  # unit tests above ran only the best one): row kernels, special values, ulp sweeps, fused
  # programs, row copies, matmul (kiln lowers libxsmm itself), optimizer updates (their fused
  # loops write over the variables they read). OpenBLAS picks its own kernels
  # when it is loaded; OPENBLAS_CORETYPE is left as the machine has it (on some CPUs it is set
  # because older OpenBLAS builds compute wrong results there).
  if [ "$variant" = release ]; then
    kernel_tests='[elementwise],[simd],[fused_loop],[passes],[ops],[matmul],[fused_recurrent],[shape],[quantization],[sparse],[dtypes],[optim],short rows are copied exactly*,fused steps are laid out*,fused steps over the same elements*,a step that reads a group*,a group whose step writes bools*,an op of its own after a fused step*,a group may start with an op of its own*,independent updates in a group*,an update a later group step*'
    cpu_flags=" $(grep -m 1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
    simd_sets=(sse2)
    if [[ $cpu_flags == *" avx2 "* && $cpu_flags == *" fma "* ]]; then
      simd_sets+=(avx2)
      [[ $cpu_flags == *" avx512f "* ]] && simd_sets+=(avx512)
    fi
    for isa in "${simd_sets[@]}"; do
      echo "== $variant: kernel tests with KILN_SIMD=$isa"
      KILN_SIMD="$isa" "$dir/test/kiln_tests" "$kernel_tests" >"$logdir/kernels-$isa.log" 2>&1
      status=$?
      tail -n 2 "$logdir/kernels-$isa.log"
      count_catch "$logdir/kernels-$isa.log"
      [ $status -ne 0 ] && grep -B2 -A12 -E 'FAILED|ERROR' "$logdir/kernels-$isa.log" | head -n 80
    done
    echo "== $variant: kernel tests ran with KILN_SIMD=${simd_sets[*]}"
    # oneDNN picks its convolution kernels by the CPU on its own (KILN_SIMD does not reach it):
    # cap it at each instruction set the machine has, so every implementation it can choose here
    # runs the convolution tests (f32 against kiln's f64 loops).
    dnnl_sets=(SSE41)
    [[ " ${simd_sets[*]} " == *" avx2 "* ]] && dnnl_sets+=(AVX2)
    [[ " ${simd_sets[*]} " == *" avx512 "* ]] && dnnl_sets+=(AVX512_CORE)
    for isa in "${dnnl_sets[@]}"; do
      echo "== $variant: convolution tests with ONEDNN_MAX_CPU_ISA=$isa"
      ONEDNN_MAX_CPU_ISA="$isa" "$dir/test/kiln_tests" "[conv]" >"$logdir/conv-$isa.log" 2>&1
      status=$?
      tail -n 2 "$logdir/conv-$isa.log"
      count_catch "$logdir/conv-$isa.log"
      [ $status -ne 0 ] && grep -B2 -A12 -E 'FAILED|ERROR' "$logdir/conv-$isa.log" | head -n 80
    done
  fi
  check "$variant-bench-smoke" "$dir/bench/kiln_bench" --quick
  check "$variant-bench-function-smoke" "$dir/bench/kiln_bench_function" --quick
  check "$variant-bench-train-smoke" "$dir/bench/kiln_bench_train" --quick
  check "$variant-bench-scaling-smoke" "$dir/bench/kiln_bench_scaling" --quick
  check "$variant-bench-lstm-sizes-smoke" "$dir/bench/kiln_bench_lstm_sizes" --quick
  check "$variant-bench-gemm-smoke" "$dir/bench/kiln_bench_gemm" --quick
  check "$variant-bench-gemm-transposed-smoke" "$dir/bench/kiln_bench_gemm_calibrate" --quick \
    --transposed
  check "$variant-bench-mlp-smoke" "$dir/bench/kiln_bench_mlp" --quick
  check "$variant-bench-bandwidth-smoke" "$dir/bench/kiln_bench_bandwidth" --quick
  check "$variant-bench-callbacks-smoke" "$dir/bench/kiln_bench_callbacks" --quick
  check "$variant-bench-embedding-smoke" "$dir/bench/kiln_bench_embedding" --quick
  check "$variant-bench-layers-smoke" "$dir/bench/kiln_bench_layers" --quick
  check "$variant-demo" "$dir/examples/demo"
  check "$variant-autodiff-example" "$dir/examples/autodiff"
  check "$variant-checkpoint-example" "$dir/examples/checkpoint"
  check "$variant-cnn-example" "$dir/examples/cnn"
  check "$variant-transformer-example" "$dir/examples/transformer"
  # A model saved as data by one program and loaded by others that have none of its code:
  # from its architecture and weights, and as an exported function.
  check "$variant-save-load-model-example" bash -c \
    'cd "$(mktemp -d)" && "$0/save_model" . && "$0/load_model" . &&
     "$0/run_exported" model.kiln input.npy --expect predictions.npy && rm -rf "$PWD"' \
    "$PWD/$dir/examples"
  # T = 40, checkpoint_every 8, one repeat, 16 units, batch 4, 8 features: a smoke run.
  check "$variant-remat-memory-example" "$dir/examples/remat_memory" 40 8 1 16 4 8
  for example in tensors tracing variables nothing_grows tensorboard_training \
    quantization_aware_training; do
    check "$variant-$example-example" bash -c 'cd "$(mktemp -d)" && "$0" && rm -rf "$PWD"' \
      "$PWD/$dir/examples/$example"
  done
  # kiln::distributed across processes (issue 22), in the release build when kiln has MPI: 2
  # ranks, and 4 on these 2 cores (--oversubscribe). CI runs as root, which mpirun refuses
  # unless told (--allow-run-as-root); the processes talk over loopback and shared memory.
  if [ "$variant" = release ] && [ -x "$dir/test/distributed_test" ]; then
    for ranks in 2 4; do
      for program in distributed_test distributed_training_test \
        distributed_sync_replicas_test; do
        check "$variant-$program-$ranks-ranks" timeout 300 mpirun --allow-run-as-root \
          --oversubscribe --mca btl self,vader -np "$ranks" "$dir/test/$program"
      done
      # A rank killed, and a rank that stops calling collectives: the job fails with a clear
      # message on every other rank, never a hang.
      for mode in kill stall; do
        check "$variant-distributed-$mode-$ranks-ranks" \
          bash scripts/check-distributed-failure.sh "$dir" "$mode" "$ranks"
      done
    done
    # Checkpoints of a distributed fit: written by rank 0, restored on another process count.
    for counts in "4 2" "2 4"; do
      read -r from to <<<"$counts"
      check "$variant-distributed-checkpoint-$from-to-$to-ranks" bash -c '
        ckpt=$(mktemp -d) && trap "rm -rf $ckpt" EXIT &&
        for step in "save $1" "restore $2"; do
          set -- $step
          timeout 300 mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np "$2" \
            "$0/test/distributed_checkpoint_test" "$1" "$ckpt" || exit 1
        done' "$dir" "$from" "$to"
    done
  fi
  # Every ```cpp block of docs/ compiled against this build and run (docs/dev/docs-code-blocks.md).
  [ "$variant" = release ] && check "$variant-docs-code" bash scripts/check-docs.sh "$dir"
done

# ThreadSanitizer: a third build, running the whole suite, so every threaded path (concurrent
# traces and caches, plans, batch-split helpers, parallel kernels, variables; the tests tagged
# [threads] aim at them) is checked. OpenBLAS is not instrumented, so it runs with one thread
# here (OPENBLAS_NUM_THREADS=1): its own worker threads would be invisible to TSan and report
# false races; kiln's own threads are all instrumented. This build leaves MPI out (-Dmpi=disabled):
# the suite must pass on a machine without it too, where kiln::distributed says it is missing
# (the MPI engine's thread runs only under mpirun, in the release build above). It builds no
# benchmarks and no examples: nothing runs them here.
echo "== tsan: unit tests (kiln built without MPI)"
if run_build build-tsan -Db_sanitize=thread -Dbuildtype=debug -Db_lundef=false -Dmpi=disabled \
  -Dbenchmarks=false -Dexamples=false; then
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=1:allocator_may_return_null=1 \
    run_suite unit-tsan build-tsan/test/kiln_tests
else
  failed=$((failed + 1))
fi

echo "== API reference (Doxygen, fails on warnings)"
check api-docs bash scripts/api-docs.sh

echo "== install and consumers"
check install-consumers bash test/consumers/run.sh build

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
