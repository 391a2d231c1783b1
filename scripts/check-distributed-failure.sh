#!/usr/bin/env bash
# Runs test/mpi/failure_test.cpp's job in one mode (kill or stall) under mpirun with N ranks
# and checks that it fails, in time, with the expected message from every surviving rank.
# Usage: scripts/check-distributed-failure.sh BUILD_DIR MODE RANKS
set -u
dir=$1 mode=$2 ranks=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s)
timeout 120 mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np "$ranks" \
  "$dir/test/distributed_failure_test" "$mode" >"$out" 2>&1
status=$?
elapsed=$(( $(date +%s) - start ))
case $mode in
  kill) pattern='kiln::distributed: process [0-9]+ of [0-9]+ was stopped by the launcher' ;;
  stall) pattern='failed: \[distributed\..*\] no answer from the other processes within 2 s' ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
said=$(grep -Ec "$pattern" "$out")
if [ "$status" -eq 0 ] || [ "$status" -eq 124 ] || [ "$said" -ne $((ranks - 1)) ]; then
  echo "distributed failure ($mode, $ranks ranks): exit $status after ${elapsed}s, $said of" \
    "$((ranks - 1)) surviving ranks said why (wanted: a failed job, every survivor's message)"
  cat "$out"
  exit 1
fi
echo "distributed failure ($mode, $ranks ranks): the job failed after ${elapsed}s;" \
  "every surviving rank said why"
