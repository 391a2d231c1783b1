#!/usr/bin/env python3
"""PyTorch side of bench/compare's sizes family (see sizes.py): workload 7 with torch.nn.LSTM and
torch.nn.GRU, eager (forward under no_grad; its CPU kernel loops over time in C++) and
torch.compile of the same forward and of the whole train step (Dynamo does not trace into nn.LSTM
by default, so the recurrence itself stays the eager kernel there); workload 9, an nn.Sequential
MLP, eager and the whole step in torch.compile; and for workload 8, torch.matmul into a
preallocated output at each GEMM shape, as GFLOP/s. Prints JSON (see common.py)."""

import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import sizes  # noqa: E402

args = sizes.parse_args(__doc__)
common.limit_threads(args.threads)
# A fresh Inductor cache: first calls are real compiles, not hits of an earlier run's.
cache_dir = tempfile.mkdtemp(prefix="kiln-peers-inductor-")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(args.threads)
torch.set_num_interop_threads(args.threads)

report = common.Report("torch", args)
report.info = {"version": torch.__version__, "num_threads": torch.get_num_threads(),
               "variants": {"PyTorch eager": "torch.nn.LSTM / nn.GRU / nn.Sequential, eager",
                            "torch.compile": "torch.compile (Inductor) of the forward function "
                            "and of the whole train step (forward, backward, optimizer.step)",
                            "torch.matmul": "torch.matmul(a, b, out=c)"}}
lstm_data = sizes.load_recurrent(args, "lstm")
gru_data = sizes.load_recurrent(args, "gru")
mlp_data = sizes.load_mlp(args)


def make_lstm(h):
    """torch.nn.LSTM holding kiln's weights: Keras's one bias becomes bias_ih; bias_hh stays zero
    and frozen (else SGD would move the sum twice as fast)."""
    lstm = torch.nn.LSTM(sizes.FEATURES, h, batch_first=True)

    def restore():
        with torch.no_grad():
            lstm.weight_ih_l0.copy_(torch.from_numpy(lstm_data["kernel"][h].T))
            lstm.weight_hh_l0.copy_(torch.from_numpy(lstm_data["recurrent_kernel"][h].T))
            lstm.bias_ih_l0.copy_(torch.from_numpy(lstm_data["bias"][h]))
            lstm.bias_hh_l0.zero_()
        lstm.bias_hh_l0.requires_grad_(False)

    restore()
    return lstm, restore


def keras_gru_gates(array, h):
    """Keras's GRU gate blocks z, r, h (along the last axis) in PyTorch's order r, z, n."""
    return np.concatenate([array[..., h:2 * h], array[..., :h], array[..., 2 * h:]], axis=-1)


def make_gru(h):
    """torch.nn.GRU holding kiln's weights (Keras's reset_after form: its input and recurrent
    biases are PyTorch's bias_ih and bias_hh, the recurrent one inside r * (...) for n)."""
    gru = torch.nn.GRU(sizes.FEATURES, h, batch_first=True)

    def restore():
        with torch.no_grad():
            weights = {"weight_ih_l0": keras_gru_gates(gru_data["kernel"][h], h).T,
                       "weight_hh_l0": keras_gru_gates(gru_data["recurrent_kernel"][h], h).T,
                       "bias_ih_l0": keras_gru_gates(gru_data["bias"][h][0], h),
                       "bias_hh_l0": keras_gru_gates(gru_data["bias"][h][1], h)}
            for name, value in weights.items():
                getattr(gru, name).copy_(torch.from_numpy(np.ascontiguousarray(value)))

    restore()
    return gru, restore


def recurrent_makers(compiled, make_layer):
    """make_forward and make_train of one cell: make_layer(h) -> (module, restore), a module
    called as layer(x) -> (output, state) whose state is hn or (hn, cn)."""
    wrap = torch.compile if compiled else (lambda fn: fn)

    def last_of(state):
        hn = state[0] if isinstance(state, tuple) else state
        return hn[0]

    def make_forward(h):
        layer, _ = make_layer(h)

        def last_h(x):
            _, state = layer(x)
            return last_of(state)
        fn = wrap(last_h)

        def forward(x):
            with torch.no_grad():
                return fn(x)
        return forward

    def make_train(h):
        layer, restore = make_layer(h)
        opt = torch.optim.SGD([p for p in layer.parameters() if p.requires_grad],
                              lr=sizes.LEARNING_RATE)

        def step(x, y):
            opt.zero_grad(set_to_none=True)
            _, state = layer(x)
            loss = torch.nn.functional.mse_loss(last_of(state), y)
            loss.backward()
            opt.step()
            return loss.detach()
        return wrap(step), restore
    return make_forward, make_train


def mlp_maker(compiled):
    def make_step(optimizer):
        layers = [torch.nn.Linear(*mlp_data[f"l{i}/kernel"].shape) for i in range(3)]
        with torch.no_grad():
            for i, layer in enumerate(layers):
                layer.weight.copy_(torch.from_numpy(mlp_data[f"l{i}/kernel"].T))
                layer.bias.copy_(torch.from_numpy(mlp_data[f"l{i}/bias"]))
        model = torch.nn.Sequential(layers[0], torch.nn.ReLU(), layers[1], torch.nn.ReLU(),
                                    layers[2])
        if optimizer == "sgd":
            opt = torch.optim.SGD(model.parameters(), lr=sizes.LEARNING_RATE)
        else:  # eager: the fused kernel, PyTorch's fastest on CPU; compiled: Inductor's own
            opt = torch.optim.Adam(model.parameters(), lr=sizes.ADAM_LEARNING_RATE,
                                   eps=sizes.ADAM_EPSILON, fused=not compiled)

        def step(x, y):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)  # y: one-hot probabilities
            loss.backward()
            opt.step()
            return loss.detach()
        return torch.compile(step) if compiled else step
    return make_step


def gemm():
    rng = np.random.default_rng(8)
    for m, n, k in sizes.QUICK_GEMM_SHAPES if args.quick else sizes.GEMM_SHAPES:
        a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        c = torch.empty(m, n)
        torch.matmul(ta, tb, out=c)
        rows = rng.integers(0, m, min(m, 16))
        exact = a[rows].astype(np.float64) @ b.astype(np.float64)
        bound = 1e-5 * (np.abs(a[rows]).astype(np.float64) @ np.abs(b)) + 1e-6
        error = float(np.max(np.abs(c.numpy()[rows] - exact) / bound))
        if not error <= 1:
            raise ValueError(f"torch.matmul {m}x{n}x{k}: off the reference by {error:.3g}")
        one = common.time_once(lambda: torch.matmul(ta, tb, out=c))
        timing = common.measure(sizes.plan_for(one, args.quick),
                                lambda: torch.matmul(ta, tb, out=c))
        report.add("gemm", "torch.matmul", timing, m=m, n=n, k=k,
                   gflops=2.0 * m * n * k / timing["median_s"] * 1e-9)


for variant, compiled in (("PyTorch eager", False), ("torch.compile", True)):
    sizes.run_recurrent(report, variant, lstm_data, *recurrent_makers(compiled, make_lstm),
                        torch.from_numpy)
    sizes.run_recurrent(report, variant, gru_data, *recurrent_makers(compiled, make_gru),
                        torch.from_numpy, cell="gru")
    sizes.run_mlp(report, variant, mlp_data, mlp_maker(compiled), torch.from_numpy)
report.run("gemm", "torch.matmul", gemm)

shutil.rmtree(cache_dir, ignore_errors=True)
report.emit()
