#!/usr/bin/env python3
"""PyTorch side of bench/compare's sequence-length scaling (see scaling.py): torch.nn.LSTM,
eager (its CPU kernel loops over the time steps in C++; there is nothing to trace), forward under
no_grad, train step with loss.backward() and torch.optim.SGD. Prints JSON (see common.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import scaling  # noqa: E402

args = scaling.parse_args(__doc__)
common.limit_threads(args.threads)

import torch  # noqa: E402

torch.set_num_threads(args.threads)
torch.set_num_interop_threads(args.threads)

report = common.Report("torch", args)
report.info = {"version": torch.__version__, "num_threads": torch.get_num_threads(),
               "variants": {"PyTorch eager": "torch.nn.LSTM (batch_first), eager"}}
data = scaling.load(args)


def make_lstm():
    """torch.nn.LSTM holding kiln's weights: Keras's one bias becomes bias_ih; bias_hh stays zero
    and frozen (else SGD would move the sum twice as fast)."""
    lstm = torch.nn.LSTM(scaling.FEATURES, scaling.UNITS, batch_first=True)

    def restore():
        with torch.no_grad():
            lstm.weight_ih_l0.copy_(torch.from_numpy(data["kernel"].T))
            lstm.weight_hh_l0.copy_(torch.from_numpy(data["recurrent_kernel"].T))
            lstm.bias_ih_l0.copy_(torch.from_numpy(data["bias"]))
            lstm.bias_hh_l0.zero_()
        lstm.bias_hh_l0.requires_grad_(False)

    restore()
    return lstm, restore


def make_forward():
    lstm, _ = make_lstm()

    def forward(x):
        with torch.no_grad():
            _, (h, _) = lstm(x)
        return h[0]
    return forward


def make_train():
    lstm, restore = make_lstm()
    opt = torch.optim.SGD([p for p in lstm.parameters() if p.requires_grad],
                          lr=scaling.LEARNING_RATE)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        _, (h, _) = lstm(x)
        loss = torch.nn.functional.mse_loss(h[0], y)
        loss.backward()
        opt.step()
        return loss.detach()
    return step, restore


scaling.run(report, "PyTorch eager", data, make_forward, make_train, torch.from_numpy)
report.emit()
