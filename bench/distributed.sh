#!/usr/bin/env bash
# Issue 22's measurements on this machine: kiln_bench_distributed with 1 and 2 processes (one
# kiln thread each, so 2 processes use the 2 cores one each), the same with 1 process and 2
# threads, and MPI_Allreduce alone on the same sizes. Prints each run's lines and the scaling
# efficiency time(1) / time(2) / 2 of scenario 2's and workload 7's steps (strong scaling: each
# global batch of 64 is split over the processes). Usage: bench/distributed.sh [BUILD_DIR]
set -eu
dir=${1:-build}
run() { timeout 600 mpirun --allow-run-as-root --oversubscribe --mca btl self,vader "$@"; }
one=$(KILN_NUM_THREADS=1 run -np 1 -x KILN_NUM_THREADS "$dir/bench/kiln_bench_distributed")
two=$(KILN_NUM_THREADS=1 run -np 2 -x KILN_NUM_THREADS "$dir/bench/kiln_bench_distributed")
threads=$(KILN_NUM_THREADS=2 run -np 1 -x KILN_NUM_THREADS "$dir/bench/kiln_bench_distributed")
mpi=$(run -np 2 "$dir/bench/kiln_bench_mpi_allreduce")
printf '%s\n\n%s\n\n%s\n\n%s\n\n' "$one" "$two" "$threads" "$mpi"
step() { sed -n "s/^$2.*median_ms=\([0-9.]*\).*/\1/p" <<<"$1"; }
for workload in "scenario2_step scenario 2 step" "lstm256_step workload 7 (LSTM 256) step"; do
  read -r key title <<<"$workload"
  awk -v t1="$(step "$one" "$key")" -v t2="$(step "$two" "$key")" \
    -v tt="$(step "$threads" "$key")" -v title="$title" 'BEGIN {
    printf "%s: 1 process %.3f ms, 2 processes %.3f ms: efficiency %.2f", title, t1, t2, t1 / t2 / 2
    printf " (1 process with 2 threads: %.3f ms)\n", tt }'
done
