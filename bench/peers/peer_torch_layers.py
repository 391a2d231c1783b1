#!/usr/bin/env python3
"""PyTorch side of bench/compare's layers family (see layers.py): workload 11 with
torch.nn.functional.conv2d in PyTorch's own layout (NCHW, "PyTorch eager") and in
channels_last memory format ("PyTorch channels_last"), workload 12 with scaled_dot_product_attention
and matmul projections, eager. "train" rows run the forward and backward (autograd) of sum(y * r).
Prints JSON (see common.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import layers  # noqa: E402

args = layers.parse_args(__doc__)
common.limit_threads(args.threads)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(args.threads)
torch.set_num_interop_threads(args.threads)

report = common.Report("torch", args)
report.info = {"version": torch.__version__, "num_threads": torch.get_num_threads(),
               "variants": {"PyTorch eager": "NCHW tensors, eager",
                            "PyTorch channels_last": "NCHW shapes in channels_last memory"}}
data = layers.arrays(args, channels_last=False)


def conv_workloads(variant, memory_format):
    x = torch.from_numpy(data["x"]).contiguous(memory_format=memory_format)
    w = torch.from_numpy(data["w"]).contiguous(memory_format=memory_format)
    r = torch.from_numpy(data["r"]).contiguous(memory_format=memory_format)

    def forward():
        with torch.no_grad():
            return F.conv2d(x, w, padding=1)

    def train():
        xg = x.detach().requires_grad_()
        wg = w.detach().requires_grad_()
        (F.conv2d(xg, wg, padding=1) * r).sum().backward()
        return xg.grad, wg.grad

    layers.measure(report, "conv2d_forward", variant, forward)
    layers.measure(report, "conv2d_train", variant, train)


conv_workloads("PyTorch eager", torch.contiguous_format)
conv_workloads("PyTorch channels_last", torch.channels_last)

a = torch.from_numpy(data["a"])
ps = [torch.from_numpy(p) for p in data["p"]]
ra = torch.from_numpy(data["ra"])
head = layers.WIDTH // layers.HEADS


def block(x, p):
    b = x.shape[0]

    def split(t):
        return t.reshape(b, layers.SEQ, layers.HEADS, head).transpose(1, 2)

    out = F.scaled_dot_product_attention(split(x @ p[0]), split(x @ p[1]), split(x @ p[2]))
    return out.transpose(1, 2).reshape(b, layers.SEQ, layers.WIDTH) @ p[3]


def attention_forward():
    with torch.no_grad():
        return block(a, ps)


def attention_train():
    x = a.detach().requires_grad_()
    p = [t.detach().requires_grad_() for t in ps]
    (block(x, p) * ra).sum().backward()
    return x.grad


layers.measure(report, "attention_forward", "PyTorch eager", attention_forward)
layers.measure(report, "attention_train", "PyTorch eager", attention_train)
report.emit()
