"""Shared parts of the sequence-length scaling peers (issue 17; kiln's side is
bench/bench_scaling.cpp): sizes, the inputs and initial weights, the checks against kiln, and the
loop over the lengths that every peer_*_scaling.py runs.

One LSTM(256) layer, batch 64, 128 features, T in LENGTHS (QUICK_LENGTHS with --quick). Two
workloads per T: "scaling_forward" (the last h) and "scaling_train" (MSE of the last h against y,
its gradient and a plain SGD update, learning rate LEARNING_RATE). Per T a peer reports the
cached call's median, the first call at that T (the first T's includes building the
traced/compiled callable) and, where the framework counts them, its traces or compiled entries.

    python bench/peers/peer_torch_scaling.py [--quick] [--threads 2] [--scaling-init PATH]

--scaling-init names the .npz that `kiln_bench_scaling --save-init PATH` writes (bench/compare
passes it): kiln's weights (Keras layout: kernel [128, 1024], recurrent_kernel [256, 1024], bias
[1024]; gates i, f, c, o), x_<T> [64, T, 128], y [64, 256], and kiln's forward output and first
two train losses per T, which every peer must reproduce. Without it the peer draws its own and
only checks that the losses are finite.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Callable

import common

BATCH, FEATURES, UNITS = 64, 128, 256
LENGTHS, QUICK_LENGTHS = (5, 50, 200, 1000), (3, 8)
LEARNING_RATE = 0.1
FORWARD_TOLERANCE = 1e-4  # absolute, per element of the last h
LOSS_TOLERANCE = (1e-5, 1e-4)  # relative, first and second loss (the second after one update)
SAMPLE_BUDGET = 2.0  # seconds of samples per measurement, about (as kiln_bench_scaling)


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true",
                        help=f"T = {', '.join(map(str, QUICK_LENGTHS))}, one call per measurement")
    parser.add_argument("--threads", type=int, default=2,
                        help="threads the framework may use (default 2)")
    parser.add_argument("--scaling-init", metavar="PATH",
                        help="kiln's weights, inputs and results (.npz from kiln_bench_scaling "
                             "--save-init)")
    return parser.parse_args()


def load(args: argparse.Namespace) -> dict:
    """numpy f32 arrays: "kernel", "recurrent_kernel", "bias", "y", "x" {T: array}, and when
    kiln's run is known "forward" {T: [64, 256]} and "losses" {T: [2]} (else None)."""
    import numpy as np
    lengths = QUICK_LENGTHS if args.quick else LENGTHS
    if args.scaling_init:
        with np.load(args.scaling_init) as f:
            data = {name: f[name].astype(np.float32) for name in f.files}
        return {"kernel": data["kernel"], "recurrent_kernel": data["recurrent_kernel"],
                "bias": data["bias"], "y": data["y"],
                "x": {t: data[f"x_{t}"] for t in lengths},
                "forward": {t: data[f"forward_{t}"] for t in lengths},
                "losses": {t: data[f"losses_{t}"] for t in lengths}}
    rng = np.random.default_rng(17)
    return {"kernel": rng.normal(0, 0.1, (FEATURES, 4 * UNITS)).astype(np.float32),
            "recurrent_kernel": rng.normal(0, 0.06, (UNITS, 4 * UNITS)).astype(np.float32),
            "bias": np.zeros(4 * UNITS, np.float32),
            "y": rng.uniform(-0.5, 0.5, (BATCH, UNITS)).astype(np.float32),
            "x": {t: rng.normal(0, 1, (BATCH, t, FEATURES)).astype(np.float32) for t in lengths},
            "forward": None, "losses": None}


def plan_for(seconds_per_call: float, quick: bool) -> common.TimingPlan:
    """As kiln_bench_scaling's: 21 samples of >= 30 ms for short calls, at least 5 for long."""
    if quick:
        return common.TimingPlan.quick()
    samples = max(5, min(21, int(SAMPLE_BUDGET / max(seconds_per_call, 1e-9))))
    return common.TimingPlan(0.1, 0.03, samples)


def check_forward(data: dict, variant: str, length: int, out) -> None:
    if data["forward"] is not None:
        common.check_close(f"scaling forward {variant} T={length}", out, data["forward"][length],
                           FORWARD_TOLERANCE)


def check_losses(data: dict, variant: str, length: int, losses: list[float]) -> None:
    if not all(math.isfinite(x) for x in losses):
        raise ValueError(f"scaling train {variant} T={length}: losses {losses}")
    if data["losses"] is None:
        return
    want = [float(x) for x in data["losses"][length]]
    for got, ref, tolerance in zip(losses, want, LOSS_TOLERANCE):
        if not abs(got - ref) <= tolerance * max(1.0, abs(ref)):
            raise ValueError(f"scaling train {variant} T={length}: losses {losses} differ from "
                             f"kiln's {want}")


def run(report: common.Report, variant: str, data: dict,
        make_forward: Callable[[], Callable], make_train: Callable[[], tuple],
        convert: Callable = lambda array: array) -> None:
    """Measures one peer variant over every length. x and y are convert()ed (numpy to the
    framework's tensors) once per T, outside the timings. make_forward() returns fn(x) -> the last
    h (computed: it waits for the result); make_train() returns (step, restore): step(x, y) ->
    the loss (before the update it makes; float() of it works), restore() puts the initial
    weights back (each T starts from them). The makers build the model (untimed: kiln's layer
    too exists before its first call) and wrap it lazily (tf.function, jax.jit), so the first
    T's first call includes tracing and compiling. A callable with an attribute `traces` (a
    function of no arguments) reports, after each T, the framework's count of traces or
    compiled entries."""
    import numpy as np
    quick = report.args.quick
    lengths = sorted(data["x"])
    y = convert(data["y"])

    def traces(fn):
        return fn.traces() if hasattr(fn, "traces") else None

    def forward_rows():
        fn = None
        for length in lengths:
            x = convert(data["x"][length])
            if fn is None:
                fn = make_forward()
            start = time.perf_counter()
            out = fn(x)
            first = time.perf_counter() - start
            check_forward(data, variant, length, np.asarray(out))
            one = common.time_once(lambda: fn(x))
            report.add("scaling_forward", variant, common.measure(plan_for(one, quick),
                                                                  lambda: fn(x)),
                       T=length, first_call_s=first, traces=traces(fn))

    def train_rows():
        step = restore = None
        for length in lengths:
            x = convert(data["x"][length])
            if step is None:
                step, restore = make_train()
            else:
                restore()
            start = time.perf_counter()
            losses = [float(step(x, y))]
            first = time.perf_counter() - start
            start = time.perf_counter()
            losses.append(float(step(x, y)))
            one = time.perf_counter() - start
            check_losses(data, variant, length, losses)
            report.add("scaling_train", variant, common.measure(plan_for(one, quick),
                                                                lambda: step(x, y)),
                       T=length, first_call_s=first, traces=traces(step), losses=losses)

    report.run("scaling_forward", variant, forward_rows)
    report.run("scaling_train", variant, train_rows)
