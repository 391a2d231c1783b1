"""Shared parts of the sizes family's peers (issue 18; kiln's side is bench/bench_lstm_sizes.cpp,
bench/bench_gemm.cpp and bench/bench_mlp.cpp): sizes, the inputs and initial weights, the checks
against kiln, and the loops every peer_*_sizes.py runs.

Workload 7 ("lstm_forward", "lstm_train"): one LSTM layer, batch 64, 128 features, hidden in
HIDDEN, T in LENGTHS; the last h, and a train step (MSE of the last h against y, its gradient and
plain SGD with learning rate 0.1). The same for one GRU layer ("gru_forward", "gru_train"; the
reset-after form of Keras and PyTorch) at T in GRU_LENGTHS. Workload 9 ("mlp_train"):
Dense(1024, relu) -> Dense(1024, relu) -> Dense(10), batch 256, 1024 features, softmax
cross-entropy of the logits against one-hot labels, SGD 0.1; "mlp_adam_train" the same with Adam
(learning rate 0.001, betas 0.9 and 0.999, epsilon 1e-12; see ADAM_EPSILON). Workload 8 (GEMM) is
kiln_bench_gemm's; a peer may add "gemm" rows of its own matmul at GEMM_SHAPES.

    python bench/peers/peer_torch_sizes.py [--quick] [--threads 2] [--lstm-init PATH]
                                           [--mlp-init PATH]

--lstm-init and --mlp-init name the .npz files that `kiln_bench_lstm_sizes --save-init` and
`kiln_bench_mlp --save-init` write (bench/compare passes them): kiln's weights (Keras layout:
LSTM kernel [128, 4 h], recurrent_kernel [h, 4 h], bias [4 h], gates i, f, c, o; GRU kernel
[128, 3 h], recurrent_kernel [h, 3 h], bias [2, 3 h] (input, recurrent), gates z, r, h; Dense
kernels [in, out]), inputs and results, which every peer must reproduce before it is timed. Without
them the peer draws its own (the sizes of --quick or not) and only checks that losses are finite.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Callable

import common

BATCH, FEATURES, LEARNING_RATE = 64, 128, 0.1
# The MLP's Adam row (betas 0.9, 0.999). Keras (and kiln) add epsilon to sqrt(v), PyTorch to
# sqrt(v) / sqrt(1 - beta2^t): with Keras's 1e-7 the steps of elements with gradients near 1e-6
# differ (losses 4e-4 apart after one step), with 1e-12 they agree to rounding.
ADAM_LEARNING_RATE, ADAM_EPSILON = 0.001, 1e-12
MLP_OPTIMIZERS = ("sgd", "adam")
HIDDEN, LENGTHS, GRU_LENGTHS = (256, 512), (50, 200), (50,)
QUICK_HIDDEN, QUICK_LENGTHS, QUICK_GRU_LENGTHS = (16, 32), (3, 8), (3,)
MLP = {"batch": 256, "features": 1024, "width": 1024, "classes": 10}
QUICK_MLP = {"batch": 16, "features": 32, "width": 64, "classes": 10}
GEMM_SHAPES = ((32, 20, 80), (64, 256, 1024), (1024, 1024, 1024), (4096, 4096, 1024))  # M, N, K
QUICK_GEMM_SHAPES = ((32, 20, 80), (64, 256, 1024), (256, 192, 128))
FORWARD_TOLERANCE = 1e-4  # absolute, per element of the last h
LSTM_LOSS_TOLERANCE = (1e-5, 1e-4)  # relative: the first loss, the loss after one update
MLP_LOSS_TOLERANCE = (1e-5, 1e-4, 1e-4)  # relative: the first three losses
SAMPLE_BUDGET, MIN_SAMPLES = 1.0, 3  # seconds of samples per measurement, about (as kiln's)


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true",
                        help="small sizes, one call per measurement (a smoke test)")
    parser.add_argument("--threads", type=int, default=2,
                        help="threads the framework may use (default 2)")
    parser.add_argument("--lstm-init", metavar="PATH",
                        help="kiln's LSTM weights, inputs and results (.npz from "
                             "kiln_bench_lstm_sizes --save-init)")
    parser.add_argument("--mlp-init", metavar="PATH",
                        help="kiln's MLP weights, x, y and losses (.npz from kiln_bench_mlp "
                             "--save-init)")
    return parser.parse_args()


def plan_for(seconds_per_call: float, quick: bool) -> common.TimingPlan:
    """As kiln's: 21 samples of >= 30 ms for short calls, at least 3 for long ones."""
    if quick:
        return common.TimingPlan.quick()
    samples = max(MIN_SAMPLES, min(21, int(SAMPLE_BUDGET / max(seconds_per_call, 1e-9))))
    return common.TimingPlan(0.1, 0.03, samples)


def load_recurrent(args: argparse.Namespace, cell: str) -> dict:
    """One cell's data ("lstm" or "gru"), numpy f32 arrays: "hidden" and "lengths" (lists), per
    hidden size h "kernel" {h: ...}, "recurrent_kernel", "bias", "y"; "x" {T: [64, T, 128]};
    "forward" {(h, T): last h} and "losses" {(h, T): [2]} (None without --lstm-init, whose GRU
    arrays carry a "gru_" prefix)."""
    import numpy as np
    prefix = "" if cell == "lstm" else f"{cell}_"
    if args.lstm_init:
        with np.load(args.lstm_init) as d:
            hidden = [int(h) for h in d["hidden"]]
            lengths = [int(t) for t in d[f"{prefix}lengths"]]
            out = {"hidden": hidden, "lengths": lengths,
                   "x": {t: d[f"x_{t}"].astype(np.float32) for t in lengths},
                   "forward": {(h, t): d[f"{prefix}forward_{h}_{t}"] for h in hidden
                               for t in lengths},
                   "losses": {(h, t): d[f"{prefix}losses_{h}_{t}"] for h in hidden
                              for t in lengths},
                   "y": {h: d[f"y_{h}"].astype(np.float32) for h in hidden}}
            for name in ("kernel", "recurrent_kernel", "bias"):
                out[name] = {h: d[f"{prefix}{name}_{h}"].astype(np.float32) for h in hidden}
        return out
    hidden = list(QUICK_HIDDEN if args.quick else HIDDEN)
    if cell == "lstm":
        lengths = list(QUICK_LENGTHS if args.quick else LENGTHS)
    else:
        lengths = list(QUICK_GRU_LENGTHS if args.quick else GRU_LENGTHS)
    gates = 4 if cell == "lstm" else 3
    rng = np.random.default_rng(18 if cell == "lstm" else 20)
    bias_shape = (lambda h: (4 * h,)) if cell == "lstm" else (lambda h: (2, 3 * h))
    return {"hidden": hidden, "lengths": lengths,
            "kernel": {h: rng.normal(0, 0.1, (FEATURES, gates * h)).astype(np.float32)
                       for h in hidden},
            "recurrent_kernel": {h: rng.normal(0, 0.05, (h, gates * h)).astype(np.float32)
                                 for h in hidden},
            "bias": {h: np.zeros(bias_shape(h), np.float32) for h in hidden},
            "y": {h: rng.uniform(-0.5, 0.5, (BATCH, h)).astype(np.float32) for h in hidden},
            "x": {t: rng.normal(0, 1, (BATCH, t, FEATURES)).astype(np.float32) for t in lengths},
            "forward": None, "losses": None}



def load_mlp(args: argparse.Namespace) -> dict:
    """numpy f32 arrays "l0/kernel", "l0/bias", ... "l2/bias", "x", "y" (one-hot), "losses" and
    "adam_losses" (kiln's first three with SGD and with Adam; None without --mlp-init)."""
    import numpy as np
    if args.mlp_init:
        with np.load(args.mlp_init) as d:
            return {name: d[name].astype(np.float32) for name in d.files}
    sizes = QUICK_MLP if args.quick else MLP
    rng = np.random.default_rng(19)
    out = {"losses": None, "adam_losses": None,
           "x": rng.normal(0, 1, (sizes["batch"], sizes["features"])).astype(np.float32),
           "y": np.eye(sizes["classes"], dtype=np.float32)[
               rng.integers(0, sizes["classes"], sizes["batch"])]}
    fan_in = sizes["features"]
    for i, units in enumerate((sizes["width"], sizes["width"], sizes["classes"])):
        limit = math.sqrt(6 / (fan_in + units))
        out[f"l{i}/kernel"] = rng.uniform(-limit, limit, (fan_in, units)).astype(np.float32)
        out[f"l{i}/bias"] = np.zeros(units, np.float32)
        fan_in = units
    return out


def check_losses(what: str, losses: list[float], want, tolerances) -> None:
    if not all(math.isfinite(x) for x in losses):
        raise ValueError(f"{what}: losses {losses}")
    if want is None:
        return
    want = [float(x) for x in want]
    for got, ref, tolerance in zip(losses, want, tolerances):
        if not abs(got - ref) <= tolerance * max(1.0, abs(ref)):
            raise ValueError(f"{what}: losses {losses} differ from kiln's {want}")


def run_recurrent(report: common.Report, variant: str, data: dict,
                  make_forward: Callable[[int], Callable], make_train: Callable[[int], tuple],
                  convert: Callable = lambda array: array, cell: str = "lstm") -> None:
    """Measures one peer variant of one cell (data from load_recurrent(args, cell); workloads
    "<cell>_forward" and "<cell>_train") at every (hidden, T). make_forward(h) returns fn(x) ->
    the last h (computed); make_train(h) returns (step, restore): step(x, y) -> the loss before
    its update (float() works), restore() puts the initial weights back (each T starts from
    them). The makers build the model outside the timings and wrap it lazily (tf.function, jax.jit,
    torch.compile), so the first call at the first T includes tracing and compiling."""
    import numpy as np
    quick = report.args.quick

    def forward_rows():
        for h in data["hidden"]:
            fn = make_forward(h)
            for t in data["lengths"]:
                x = convert(data["x"][t])
                start = time.perf_counter()
                out = np.asarray(fn(x))
                first = time.perf_counter() - start
                if data["forward"] is not None:
                    common.check_close(f"{cell} forward {variant} {h}x{t}", out,
                                       data["forward"][(h, t)], FORWARD_TOLERANCE)
                one = common.time_once(lambda: fn(x))
                report.add(f"{cell}_forward", variant,
                           common.measure(plan_for(one, quick), lambda: fn(x)),
                           hidden=h, T=t, first_call_s=first)

    def train_rows():
        for h in data["hidden"]:
            step, restore = make_train(h)
            y = convert(data["y"][h])
            for t in data["lengths"]:
                x = convert(data["x"][t])
                restore()
                start = time.perf_counter()
                losses = [float(step(x, y))]
                first = time.perf_counter() - start
                start = time.perf_counter()
                losses.append(float(step(x, y)))
                one = time.perf_counter() - start
                check_losses(f"{cell} train {variant} {h}x{t}", losses,
                             None if data["losses"] is None else data["losses"][(h, t)],
                             LSTM_LOSS_TOLERANCE)
                report.add(f"{cell}_train", variant,
                           common.measure(plan_for(one, quick), lambda: step(x, y)),
                           hidden=h, T=t, first_call_s=first, losses=losses)

    report.run(f"{cell}_forward", variant, forward_rows)
    report.run(f"{cell}_train", variant, train_rows)


def run_mlp(report: common.Report, variant: str, data: dict, make_step: Callable[[str], Callable],
            convert: Callable = lambda array: array) -> None:
    """Measures one variant's MLP train step with each optimizer in MLP_OPTIMIZERS ("mlp_train"
    with SGD, "mlp_adam_train" with Adam): make_step(optimizer) returns step(x, y) -> the loss
    before its update; its first three losses must match kiln's before the step is timed."""
    for optimizer in MLP_OPTIMIZERS:
        _run_mlp(report, variant, data, lambda: make_step(optimizer), convert, optimizer)


def _run_mlp(report: common.Report, variant: str, data: dict, make_step: Callable[[], Callable],
             convert: Callable, optimizer: str) -> None:
    workload = "mlp_train" if optimizer == "sgd" else f"mlp_{optimizer}_train"
    kiln_losses = data["losses" if optimizer == "sgd" else f"{optimizer}_losses"]

    def body():
        step = make_step()
        x, y = convert(data["x"]), convert(data["y"])
        start = time.perf_counter()
        losses = [float(step(x, y))]
        first = time.perf_counter() - start
        losses += [float(step(x, y)) for _ in range(len(MLP_LOSS_TOLERANCE) - 1)]
        check_losses(f"{workload} {variant}", losses, kiln_losses, MLP_LOSS_TOLERANCE)
        if not losses[-1] < losses[0]:
            raise ValueError(f"{workload} {variant}: losses {losses} do not decrease")
        report.add(workload, variant, common.measure(report.plan, lambda: step(x, y)),
                   first_call_s=first, losses=losses)

    report.run(workload, variant, body)
