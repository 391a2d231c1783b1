#!/usr/bin/env python3
"""PyTorch side of bench/compare: kiln's workloads in eager PyTorch, TorchScript
(torch.jit.trace, which unrolls the 5 steps as kiln's trace does) and torch.compile
(the default Inductor back end, which compiles C++ for the CPU). Prints JSON (see common.py)."""

import functools
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
                            "torch.compile": "default mode, Inductor CPU back end",
                            "TorchScript train step": "torch.jit.script of the model (forward); "
                            "backward by autograd, update by torch.optim.Adam",
                            "torch.compile train step": "the whole step (forward, backward, "
                            "optimizer.step) in torch.compile"}}
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
        report.first_and_cached(
            workload, variant, lambda make=make: functools.partial(make(), xs),
            lambda out, fn, variant=variant: common.check_close(f"{workload} {variant}",
                                                                out.numpy(), want),
            first_call=variant != "PyTorch eager")


# The RNN comes first, so the LSTM's first call is a new function's in a warmed-up process
# (no one-time framework start-up in it), as in kiln_bench_function.
with torch.no_grad():
    recurrent("rnn", rnn, 1, 11, common.reference_rnn)
    recurrent("lstm", lstm, 4, 21, common.reference_lstm)


# 4. and 5. The train step of bench/bench_train.cpp with torch.nn.LSTM (gates i, f, g, o: Keras's
# order). Keras's LSTM has one bias, torch's two (bias_ih + bias_hh): bias_ih takes Keras's and
# bias_hh stays zero and frozen, else Adam would move the sum twice as fast.
class TrainNet(torch.nn.Module):
    def __init__(self, init):
        super().__init__()
        units1, units2 = common.TRAIN_UNITS
        self.l1 = torch.nn.LSTM(common.TRAIN_FEATURES, units1, batch_first=True)
        self.l2 = torch.nn.LSTM(units1, units2, batch_first=True)
        self.out = torch.nn.Linear(units2, 1)
        with torch.no_grad():
            for name, layer in (("l1", self.l1), ("l2", self.l2)):
                layer.weight_ih_l0.copy_(torch.from_numpy(init[f"{name}/kernel"].T))
                layer.weight_hh_l0.copy_(torch.from_numpy(init[f"{name}/recurrent_kernel"].T))
                layer.bias_ih_l0.copy_(torch.from_numpy(init[f"{name}/bias"]))
                layer.bias_hh_l0.zero_()
                layer.bias_hh_l0.requires_grad_(False)
            self.out.weight.copy_(torch.from_numpy(init["out/kernel"].T))
            self.out.bias.copy_(torch.from_numpy(init["out/bias"]))

    def forward(self, x):
        sequence, _ = self.l1(x)
        _, (h, _) = self.l2(sequence)
        return torch.sigmoid(self.out(h[0]))


def train_step():
    init = common.train_init(args)
    x, y = torch.from_numpy(init["x"]), torch.from_numpy(init["y"])

    def step_of(model, opt):
        def step():
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.binary_cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss.detach()
        return step

    makers = {
        "PyTorch eager": step_of,
        "TorchScript": lambda model, opt: step_of(torch.jit.script(model), opt),
        "torch.compile": lambda model, opt: torch.compile(step_of(model, opt)),
    }
    for variant, make in makers.items():
        model = TrainNet(init)
        opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad],
                               lr=common.LEARNING_RATE, betas=(common.BETA1, common.BETA2),
                               eps=common.EPSILON)
        report.first_and_cached("train_step", variant,
                                lambda make=make, model=model, opt=opt: make(model, opt),
                                common.train_check(init, variant),
                                first_call=variant != "PyTorch eager")


train_step()

shutil.rmtree(cache_dir, ignore_errors=True)
report.emit()
