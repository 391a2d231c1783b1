"""Shared parts of the embedding family's peers (issue 21, workload 10; kiln's side is
kiln_bench_embedding): the sizes, the data every peer trains on, and the timing loop that
peer_torch_embedding.py and peer_tensorflow_embedding.py run.

Workload 10 ("embedding_train"): a table of ROWS x DIM f32 embeddings (uniform in
[-INIT_RANGE, INIT_RANGE]) and a dense weight w [DIM, 1]. One step looks up BATCH ids, predicts
pred = emb @ w, takes loss = mean((pred - y)^2), its gradients (the table's names at most BATCH
rows) and an Adam update (learning rate 1e-3, beta1 0.9, beta2 0.999, epsilon 1e-7) of the table
and w. The ids and targets are BATCHES batches drawn before the timing with a fixed seed; the
steps cycle through them. Every peer starts from the same numpy-drawn table and w (kiln draws
its own: the values need not match, the work does).

    python bench/peers/peer_torch_embedding.py [--quick] [--threads 2]

--quick takes kiln_bench_embedding --quick's sizes (QUICK_SIZES) and times WARMUP_QUICK warm-up
steps and STEPS_QUICK timed ones: a smoke test, not a measurement. Each row names its sizes.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Callable

import common

WORKLOAD = "embedding_train"
ROWS, DIM, BATCH, BATCHES = 1_000_000, 64, 4096, 8
QUICK_SIZES = {"rows": 10_000, "dim": 16, "batch": 256}  # as kiln_bench_embedding --quick
INIT_RANGE = 0.05  # the table: uniform in [-INIT_RANGE, INIT_RANGE], as kiln's Embedding
W_RANGE = 0.1  # w: uniform in [-W_RANGE, W_RANGE] (not zeros: the table's gradient is dpred w^T)
LEARNING_RATE, BETA1, BETA2, EPSILON = 1e-3, 0.9, 0.999, 1e-7
WARMUP, STEPS = 3, 20  # steps before the timing, steps timed (one sample each)
WARMUP_QUICK, STEPS_QUICK = 1, 2
SEED = 21
FIRST_LOSS_TOLERANCE = 1e-5  # relative: the first loss against numpy's, before any update


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true",
                        help=f"kiln's quick sizes, {WARMUP_QUICK} warm-up step and "
                             f"{STEPS_QUICK} timed (a smoke test, not a measurement)")
    parser.add_argument("--threads", type=int, default=2,
                        help="threads the framework may use (default 2)")
    return parser.parse_args()


def sizes(args: argparse.Namespace) -> dict:
    """{"rows", "dim", "batch"}: the workload's, or with --quick kiln's quick ones."""
    return dict(QUICK_SIZES) if args.quick else {"rows": ROWS, "dim": DIM, "batch": BATCH}


def make_data(args: argparse.Namespace) -> dict:
    """The sizes (see sizes()) and numpy arrays: "table" [rows, dim] f32, "w" [dim, 1] f32,
    "ids" [BATCHES, batch] int64 in [0, rows), "y" [BATCHES, batch, 1] f32 uniform in [0, 1),
    and "first_loss", the loss of the first step (batch 0) before any update, in f64."""
    import numpy as np
    size = sizes(args)
    rows, dim, batch = size["rows"], size["dim"], size["batch"]
    rng = np.random.default_rng(SEED)
    table = rng.random((rows, dim), dtype=np.float32)
    table *= 2 * INIT_RANGE
    table -= INIT_RANGE
    w = rng.uniform(-W_RANGE, W_RANGE, (dim, 1)).astype(np.float32)
    ids = rng.integers(0, rows, (BATCHES, batch), dtype=np.int64)
    y = rng.random((BATCHES, batch, 1), dtype=np.float32)
    pred = table[ids[0]].astype(np.float64) @ w.astype(np.float64)
    first_loss = float(np.mean((pred - y[0]) ** 2))
    return {**size, "table": table, "w": w, "ids": ids, "y": y, "first_loss": first_loss}


def run_train(report: common.Report, variant: str, data: dict,
              make_step: Callable[[], Callable[[int], object]]) -> None:
    """Measures one variant: make_step() builds the model and optimizer from data and returns
    step(i), one train step on batch i % BATCHES that returns the loss before its update
    (float() of it waits for the step). The first step's loss must match numpy's; then the
    warm-up steps, then each timed step is one sample; the row holds their median."""
    def body():
        quick = report.args.quick
        warmup, steps = (WARMUP_QUICK, STEPS_QUICK) if quick else (WARMUP, STEPS)
        step = make_step()
        clock = time.perf_counter
        start = clock()
        losses = [float(step(0))]
        first = clock() - start
        want = data["first_loss"]
        if not abs(losses[0] - want) <= FIRST_LOSS_TOLERANCE * max(1.0, abs(want)):
            raise ValueError(f"{variant}: first loss {losses[0]} is not numpy's {want}")
        for i in range(1, warmup):
            losses.append(float(step(i)))
        samples = []
        for i in range(warmup, warmup + steps):
            start = clock()
            losses.append(float(step(i)))
            samples.append(clock() - start)
        if not all(math.isfinite(x) for x in losses):
            raise ValueError(f"{variant}: losses {losses}")
        samples.sort()

        def percentile(q: float) -> float:
            return samples[int(q * (len(samples) - 1) + 0.5)]

        median = (samples[(len(samples) - 1) // 2] + samples[len(samples) // 2]) / 2
        report.add(WORKLOAD, variant, {"median_s": median, "p10_s": percentile(0.1),
                                       "p90_s": percentile(0.9), "calls_per_sample": 1,
                                       "samples": len(samples)},
                   rows=data["rows"], dim=data["dim"], batch=data["batch"],
                   warmup_steps=warmup, first_call_s=first, losses=losses[:4])

    report.run(WORKLOAD, variant, body)
