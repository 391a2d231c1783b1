"""Shared parts of the peer benchmarks: sizes, thread settings, the timing harness, the JSON
report and the checks. The workloads mirror kiln's bench/kiln_bench.cpp,
bench/bench_function.cpp and bench/bench_train.cpp.

Each peer script (peer_torch.py, peer_tensorflow.py, peer_jax.py) runs in its own process,
prints one JSON object on standard output and nothing else there (frameworks' chatter goes to
standard error). Run them through bench/compare, or alone:

    python bench/peers/peer_torch.py [--quick] [--threads 2] [--train-init PATH]

--train-init names the .npz that `kiln_bench_train --save-init PATH` writes (bench/compare passes
it): the train step (workload 4) then starts from kiln's initial weights and data, and each
variant's first losses must match kiln's. Without it the peers draw their own weights and only
check that the loss is finite and decreases.
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
# Workload 4, kiln's bench_train.cpp: LSTM(64, return_sequences) -> LSTM(32) -> Dense(1, sigmoid),
# binary cross-entropy, Adam (Keras's formulation, epsilon 1e-7).
TRAIN_BATCH, TRAIN_STEPS, TRAIN_FEATURES = 16, 5, 10
TRAIN_UNITS = (64, 32)
LEARNING_RATE, BETA1, BETA2, EPSILON = 1e-3, 0.9, 0.999, 1e-7
CHECKED_STEPS = 3  # losses compared with kiln's (kiln_bench_train checks as many)
# The first loss (same weights, forward and loss) must match kiln's closely; later ones within
# the difference between Adam formulations: PyTorch adds epsilon to sqrt(v_hat), Keras (kiln,
# TF, the JAX step here) to sqrt(v), which is a 30x larger epsilon on the first update.
FIRST_LOSS_TOLERANCE, LOSS_TOLERANCE = 1e-5, 5e-4


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true",
                        help="one call per measurement: a smoke test, not a measurement")
    parser.add_argument("--threads", type=int,
                        default=int(os.environ.get("KILN_NUM_THREADS", "2")),
                        help="threads the framework may use (default: $KILN_NUM_THREADS or 2)")
    parser.add_argument("--train-init", metavar="PATH",
                        help="kiln's initial weights, data and losses for the train step (.npz "
                             "from kiln_bench_train --save-init)")
    return parser.parse_args()


def limit_threads(threads: int) -> None:
    """Environment read by the frameworks' thread pools at import: call before importing them."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = str(threads)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def limit_jax_threads(threads: int) -> None:
    """JAX on the CPU with XLA's thread pool (Eigen) of `threads` threads (the machine's core
    count otherwise): call before importing jax. XLA_FLAGS holds the setting."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               f" --xla_cpu_multi_thread_eigen=true"
                               f" intra_op_parallelism_threads={threads}").strip()


def limit_tensorflow_threads(tf, threads: int) -> None:
    """TensorFlow's intra- and inter-op pools at `threads` threads each: call right after
    importing tensorflow, before any op runs."""
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)


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

    def add_once(self, workload: str, variant: str, seconds: float) -> None:
        """A single timing (a first call) in the shape of measure()'s."""
        self.add(workload, variant, {"median_s": seconds, "p10_s": seconds, "p90_s": seconds,
                                     "calls_per_sample": 1, "samples": 1})

    def run(self, workloads, variant: str, body: Callable[[], None]) -> None:
        """Runs one measurement body for a workload (or a tuple of workloads it measures); a
        failure is recorded for each of them and the other workloads go on."""
        try:
            body()
        except Exception as error:  # noqa: BLE001 - any failure is reported, not fatal
            message = f"{type(error).__name__}: {error}".strip()
            for workload in (workloads,) if isinstance(workloads, str) else workloads:
                self.errors.append({"workload": workload, "variant": variant,
                                    "error": message.splitlines()[0][:300] if message else "error"})
            traceback.print_exc(file=sys.stderr)

    def first_and_cached(self, workload: str, variant: str, make: Callable[[], Callable],
                         check: Callable, first_call: bool = True) -> None:
        """The pattern of workloads 3 to 5: make() builds the traced/compiled callable (lazy
        compilers compile at its first call), which takes no arguments. make() plus the first
        call are timed once as `<workload>_first_call` (unless first_call is False); then
        check(first_result, fn) must pass (it raises otherwise) before fn() is measured."""
        def body():
            holder = {}

            def first():
                holder["fn"] = make()
                holder["out"] = holder["fn"]()

            seconds = time_once(first)
            fn = holder["fn"]
            check(holder["out"], fn)
            if first_call:
                self.add_once(f"{workload}_first_call", variant, seconds)
            self.add(workload, variant, measure(self.plan, fn))

        self.run((workload, f"{workload}_first_call") if first_call else workload, variant, body)

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


def train_init(args: argparse.Namespace) -> dict:
    """The train step's starting point, numpy f32 arrays in Keras's layout: "l1/kernel",
    "l1/recurrent_kernel", "l1/bias", the same for "l2", "out/kernel", "out/bias", "x"
    [batch, steps, features], "y" [batch, 1]; and "losses", kiln's first losses from these
    (None when drawn here: without --train-init, Keras's initializers from numpy's generator)."""
    import numpy as np
    if args.train_init:
        with np.load(args.train_init) as data:
            init = {name: data[name].astype(np.float32) for name in data.files}
        if len(init["losses"]) < CHECKED_STEPS:
            raise ValueError(f"{args.train_init} holds {len(init['losses'])} losses, not "
                             f"{CHECKED_STEPS}")
        return init
    rng = np.random.default_rng(5)

    def glorot(fan_in, fan_out):
        limit = math.sqrt(6 / (fan_in + fan_out))
        return rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32)

    def orthogonal(rows, cols):
        q, r = np.linalg.qr(rng.normal(size=(cols, rows)))
        return (q * np.sign(np.diag(r))).T.astype(np.float32)

    init = {"losses": None,
            "x": rng.normal(0, 1, (TRAIN_BATCH, TRAIN_STEPS, TRAIN_FEATURES)).astype(np.float32),
            "y": (rng.uniform(size=(TRAIN_BATCH, 1)) > 0.5).astype(np.float32)}
    inputs = TRAIN_FEATURES
    for name, units in zip(("l1", "l2"), TRAIN_UNITS):
        init[f"{name}/kernel"] = glorot(inputs, 4 * units)
        init[f"{name}/recurrent_kernel"] = orthogonal(units, 4 * units)
        bias = np.zeros(4 * units, np.float32)
        bias[units:2 * units] = 1  # unit forget bias
        init[f"{name}/bias"] = bias
        inputs = units
    init["out/kernel"] = glorot(inputs, 1)
    init["out/bias"] = np.zeros(1, np.float32)
    return init


def train_check(init: dict, variant: str) -> Callable:
    """The check of a train step for Report.first_and_cached: the first CHECKED_STEPS losses
    (the first call's, then more steps) are finite, decrease, and match kiln's when known."""
    def check(first_loss, step):
        losses = [float(first_loss)] + [float(step()) for _ in range(CHECKED_STEPS - 1)]
        if not all(math.isfinite(x) for x in losses) or not losses[-1] < losses[0]:
            raise ValueError(f"train step {variant}: losses {losses} are not finite and decreasing")
        want = init["losses"]
        if want is not None:
            errs = [abs(a - float(b)) for a, b in zip(losses, want)]
            err = max(errs)
            if not (errs[0] <= FIRST_LOSS_TOLERANCE and err <= LOSS_TOLERANCE):
                raise ValueError(f"train step {variant}: losses {losses} differ from kiln's "
                                 f"{[float(b) for b in want[:CHECKED_STEPS]]} by {err:.2g}")
    return check
