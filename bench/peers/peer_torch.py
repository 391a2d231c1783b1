#!/usr/bin/env python3
"""PyTorch side of bench/compare: kiln's workloads in eager PyTorch, TorchScript
(torch.jit.trace, which unrolls the 5 steps as kiln's trace does) and torch.compile
(the default Inductor back end, which compiles C++ for the CPU). Prints JSON (see common.py)."""

import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

args = common.parse_args(__doc__)
common.limit_threads(args.threads)
# A fresh Inductor cache, so the first-call figure is a real compile and not a hit on the
# on-disk cache of an earlier run.
cache_dir = tempfile.mkdtemp(prefix="kiln-peers-inductor-")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(args.threads)
torch.set_num_interop_threads(args.threads)

report = common.Report("torch", args)
report.info = {"version": torch.__version__, "num_threads": torch.get_num_threads(),
               "num_interop_threads": torch.get_num_interop_threads(),
               "variants": {"TorchScript": "torch.jit.trace (unrolled)",
                            "torch.compile": "default mode, Inductor CPU back end"}}
plan = report.plan


# 1. Tiny eager op: a 4-element f32 add.
def tiny_add():
    a = torch.tensor([1.0, 2.0, 3.0, 4.0])
    b = torch.tensor([0.5, 0.5, 0.5, 0.5])
    common.check_close("add", torch.add(a, b).numpy(), [1.5, 2.5, 3.5, 4.5], 0)
    report.add("add4", "PyTorch eager", common.measure(plan, lambda: torch.add(a, b)))


report.run("add4", "PyTorch eager", tiny_add)


# 2. tanh(a*b+c)*0.5 over 4M floats, compiled; a copy of 4M floats measured in the same process.
def chain():
    a, b, c = (torch.from_numpy(x) for x in common.chain_inputs())
    fn = torch.compile(lambda x, y, z: torch.tanh(x * y + z) * 0.5)
    common.check_chain(float(fn(a, b, c)[-1]))
    timing = common.measure(plan, lambda: fn(a, b, c))
    report.add("chain", "torch.compile", timing, gbs=common.CHAIN_BYTES / timing["median_s"] * 1e-9)


def copy():
    src = torch.ones(common.CHAIN_N)
    dst = torch.empty(common.CHAIN_N)
    timing = common.measure(plan, lambda: dst.copy_(src))
    report.add("copy", "torch copy_", timing, gbs=common.COPY_BYTES / timing["median_s"] * 1e-9)


report.run("chain", "torch.compile", chain)
report.run("copy", "torch copy_", copy)


# 3. Unrolled 5-step RNN and LSTM (batch 32, input 10, hidden 20), the equations of
# bench/bench_function.cpp. Weights are captured tensors that need no gradient.
def rnn(w, u, b, xs):
    h = torch.zeros(common.BATCH, common.HIDDEN)
    for x in torch.unbind(xs, 1):
        h = torch.tanh(torch.matmul(x, w) + torch.matmul(h, u) + b)
    return h


def lstm(w, u, b, xs):
    h = torch.zeros(common.BATCH, common.HIDDEN)
    c = torch.zeros(common.BATCH, common.HIDDEN)
    for x in torch.unbind(xs, 1):
        z = torch.split(torch.matmul(x, w) + torch.matmul(h, u) + b, common.HIDDEN, 1)
        i, f, g, o = torch.sigmoid(z[0]), torch.sigmoid(z[1]), torch.tanh(z[2]), torch.sigmoid(z[3])
        c = f * c + i * g
        h = o * torch.tanh(c)
    return h


xs_np = common.inputs()
xs = torch.from_numpy(xs_np)


def recurrent(workload, body, gates, seed, reference):
    w_np, u_np, b_np = common.weights(gates, seed)
    w, u, b = (torch.from_numpy(v) for v in (w_np, u_np, b_np))
    want = reference(w_np, u_np, b_np, xs_np)

    def eager(x):
        return body(w, u, b, x)

    makers = {
        "PyTorch eager": lambda: eager,
        "TorchScript": lambda: torch.jit.trace(eager, (xs,)),
        "torch.compile": lambda: torch.compile(eager),
    }
    for variant, make in makers.items():
        def run_variant(variant=variant, make=make):
            holder = {}

            def first():
                holder["fn"] = make()
                holder["out"] = holder["fn"](xs)

            first_call = common.time_once(first)
            fn = holder["fn"]
            common.check_close(f"{workload} {variant}", holder["out"].numpy(), want)
            if variant != "PyTorch eager":
                report.add(f"{workload}_first_call", variant,
                           {"median_s": first_call, "p10_s": first_call, "p90_s": first_call,
                            "calls_per_sample": 1, "samples": 1})
            report.add(workload, variant, common.measure(plan, lambda: fn(xs)))

        report.run(workload, variant, run_variant)


# The RNN comes first, so the LSTM's first call is a new function's in a warmed-up process
# (no one-time framework start-up in it), as in kiln_bench_function.
with torch.no_grad():
    recurrent("rnn", rnn, 1, 11, common.reference_rnn)
    recurrent("lstm", lstm, 4, 21, common.reference_lstm)

shutil.rmtree(cache_dir, ignore_errors=True)
report.emit()
