"""Shared parts of the peer benchmarks: sizes, thread settings, the timing harness and the
JSON report. The workloads mirror kiln's bench/kiln_bench.cpp and bench/bench_function.cpp.

Each peer script (peer_torch.py, peer_tensorflow.py, peer_jax.py) runs in its own process,
prints one JSON object on standard output and nothing else there (frameworks' chatter goes to
standard error). Run them through bench/compare, or alone:

    python bench/peers/peer_torch.py [--quick] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

# Workload sizes: the same as kiln's benchmarks.
CHAIN_N = 4 << 20  # workload 2: elements per array
CHAIN_BYTES = 4.0 * CHAIN_N * 4  # 3 inputs read + 1 output written, f32
COPY_BYTES = 2.0 * CHAIN_N * 4  # 1 read + 1 write
BATCH, INPUT, HIDDEN, STEPS = 32, 10, 20, 5  # workload 3


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true",
                        help="one call per measurement: a smoke test, not a measurement")
    parser.add_argument("--threads", type=int,
                        default=int(os.environ.get("KILN_NUM_THREADS", "2")),
                        help="threads the framework may use (default: $KILN_NUM_THREADS or 2)")
    return parser.parse_args()


def limit_threads(threads: int) -> None:
    """Environment read by the frameworks' thread pools at import: call before importing them."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = str(threads)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@dataclass
class TimingPlan:
    """Like kiln's bench/harness.hpp: warm up, then samples of calibrated length."""
    warmup_seconds: float = 0.2
    sample_seconds: float = 0.03
    samples: int = 21

    @staticmethod
    def quick() -> "TimingPlan":
        return TimingPlan(0.0, 0.0, 1)


def measure(plan: TimingPlan, fn: Callable[[], object]) -> dict:
    """Times fn() as kiln's harness does: returns seconds per call (median, p10, p90)."""
    clock = time.perf_counter
    start = clock()
    warmup_calls = 0
    while True:
        fn()
        warmup_calls += 1
        if clock() - start >= plan.warmup_seconds:
            break
    per_call_estimate = (clock() - start) / warmup_calls
    calls = max(1, int(plan.sample_seconds / per_call_estimate))
    samples = max(1, plan.samples)
    per_call = []
    for _ in range(samples):
        start = clock()
        for _ in range(calls):
            fn()
        per_call.append((clock() - start) / calls)
    per_call.sort()

    def percentile(q: float) -> float:
        return per_call[int(q * (len(per_call) - 1) + 0.5)]

    return {"median_s": percentile(0.5), "p10_s": percentile(0.1), "p90_s": percentile(0.9),
            "calls_per_sample": calls, "samples": samples}


def time_once(fn: Callable[[], object]) -> float:
    """Seconds taken by one call of fn (for first-call costs)."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


@dataclass
class Report:
    """What one peer script prints: settings, results and the errors of failed workloads."""
    peer: str
    args: argparse.Namespace
    results: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    info: dict = field(default_factory=dict)

    @property
    def plan(self) -> TimingPlan:
        return TimingPlan.quick() if self.args.quick else TimingPlan()

    def add(self, workload: str, variant: str, timing: dict, **extra) -> None:
        self.results.append({"workload": workload, "variant": variant, **timing, **extra})

    def run(self, workload: str, variant: str, body: Callable[[], None]) -> None:
        """Runs one measurement body; a failure is recorded and the other workloads go on."""
        try:
            body()
        except Exception as error:  # noqa: BLE001 - any failure is reported, not fatal
            message = f"{type(error).__name__}: {error}".strip()
            self.errors.append({"workload": workload, "variant": variant,
                                "error": message.splitlines()[0][:300] if message else "error"})
            traceback.print_exc(file=sys.stderr)

    def emit(self) -> None:
        json.dump({"peer": self.peer, "quick": self.args.quick, "threads": self.args.threads,
                   "python": platform.python_version(), "info": self.info,
                   "results": self.results, "errors": self.errors}, sys.stdout, indent=1)
        sys.stdout.write("\n")


def weights(gates: int, seed: int):
    """The RNN (gates = 1) or LSTM (gates = 4) weights as numpy f32 arrays: w [input, g*hidden],
    u [hidden, g*hidden] ~ N(0, 0.3), b zeros; as kiln's make_weights (its own random stream)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    w = rng.normal(0, 0.3, (INPUT, gates * HIDDEN)).astype(np.float32)
    u = rng.normal(0, 0.3, (HIDDEN, gates * HIDDEN)).astype(np.float32)
    b = np.zeros(gates * HIDDEN, np.float32)
    return w, u, b


def inputs():
    """xs [batch, steps, input] ~ N(0, 1), f32."""
    import numpy as np
    return np.random.default_rng(7).normal(0, 1, (BATCH, STEPS, INPUT)).astype(np.float32)


def chain_inputs():
    """The three 4M-element arrays of workload 2, as kiln's bench_chain makes them."""
    import numpy as np
    a = np.linspace(-2.0, 2.0, CHAIN_N, dtype=np.float32)
    b = np.full(CHAIN_N, 0.75, np.float32)
    c = np.linspace(-1.0, 1.0, CHAIN_N, dtype=np.float32)
    return a, b, c


def check_chain(last_element: float) -> None:
    expected = 0.5 * math.tanh(2.0 * 0.75 + 1.0)
    if abs(last_element - expected) > 1e-5:
        raise ValueError(f"chain returned {last_element} for the last element, not {expected}")


def check_close(name: str, got, want, tolerance: float = 1e-4) -> None:
    """Raises when two numpy arrays differ by more than tolerance (absolute, per element)."""
    import numpy as np
    err = float(np.max(np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64))))
    if not err <= tolerance:
        raise ValueError(f"{name} differs from the numpy reference by {err}")


def reference_rnn(w, u, b, xs):
    """numpy forward of the RNN: the ground truth every variant is checked against."""
    import numpy as np
    h = np.zeros((BATCH, HIDDEN), np.float32)
    for t in range(STEPS):
        h = np.tanh(xs[:, t] @ w + h @ u + b)
    return h


def reference_lstm(w, u, b, xs):
    import numpy as np

    def sigmoid(v):
        return 1 / (1 + np.exp(-v))

    h = np.zeros((BATCH, HIDDEN), np.float32)
    c = np.zeros((BATCH, HIDDEN), np.float32)
    for t in range(STEPS):
        z = xs[:, t] @ w + h @ u + b
        i, f, g, o = np.split(z, 4, axis=1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
    return h
