"""Shared parts of the layers family of bench/compare (issue 23, workloads 11 and 12), as
kiln's bench/bench_layers.cpp defines them:
  11. conv2d: x [32, 56, 56, 64] (NHWC) or [32, 64, 56, 56] (NCHW), a 3x3 kernel 64 -> 64,
      stride 1, padding same. forward: y; train: the gradients of sum(y * r) with respect to x
      and the kernel.
  12. attention: x [8, 512, 512], 8 heads of 64, q, k, v and output projections [512, 512];
      softmax(q k^T / 8) v per head. forward: the block's output; train: the gradients of
      sum(out * r) with respect to x and the four projections.
Each peer script prints JSON (see common.py); --quick runs kiln's quick sizes (batch 2 and 1).
"""

from __future__ import annotations

import argparse
import time

import common

CONV_BATCH, CONV_QUICK = 32, 2
ATTENTION_BATCH, ATTENTION_QUICK = 8, 1
SEQ, WIDTH, HEADS = 512, 512, 8
WORKLOADS = ("conv2d_forward", "conv2d_train", "attention_forward", "attention_train")


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="kiln's quick sizes, one call")
    parser.add_argument("--threads", type=int, default=2, help="threads (default 2)")
    return parser.parse_args()


def batches(args: argparse.Namespace) -> tuple[int, int]:
    return (CONV_QUICK, ATTENTION_QUICK) if args.quick else (CONV_BATCH, ATTENTION_BATCH)


def arrays(args: argparse.Namespace, channels_last: bool = True) -> dict:
    """numpy f32 inputs of both workloads (their values do not matter for the timing)."""
    import numpy as np
    conv_batch, attention_batch = batches(args)
    rng = np.random.default_rng(23)
    shape = (conv_batch, 56, 56, 64) if channels_last else (conv_batch, 64, 56, 56)
    kernel = (3, 3, 64, 64) if channels_last else (64, 64, 3, 3)
    f = np.float32
    return {"x": rng.standard_normal(shape, dtype=f), "w": rng.standard_normal(kernel, dtype=f) * f(0.05),
            "r": rng.standard_normal(shape, dtype=f),
            "a": rng.standard_normal((attention_batch, SEQ, WIDTH), dtype=f),
            "p": [rng.standard_normal((WIDTH, WIDTH), dtype=f) * f(0.04) for _ in range(4)],
            "ra": rng.standard_normal((attention_batch, SEQ, WIDTH), dtype=f)}


def timing_plan(args: argparse.Namespace) -> common.TimingPlan:
    """kiln_bench_layers' plan: 0.5 s warm-up, 11 samples of at least 0.2 s."""
    if args.quick:
        return common.TimingPlan.quick()
    return common.TimingPlan(warmup_seconds=0.5, sample_seconds=0.2, samples=11)


def measure(report: common.Report, workload: str, variant: str, fn) -> None:
    """Times fn() (which waits for its result) as one row."""
    def body():
        fn()
        report.add(workload, variant, common.measure(timing_plan(report.args), fn))
    report.run(workload, variant, body)
