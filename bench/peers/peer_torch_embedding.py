#!/usr/bin/env python3
"""PyTorch side of bench/compare's embedding family (see embedding.py): workload 10 with
torch.nn.Embedding(sparse=True), whose gradient is a sparse COO tensor of the looked-up rows,
updated by torch.optim.SparseAdam (m, v and the table only in those rows), and w by
torch.optim.Adam; eager ("PyTorch SparseAdam"). "torch.compile" compiles the forward and loss
(fullgraph; AOTAutograd compiles their backward), the optimizers staying eager; where the sparse
gradient does not compile, its entry in "errors" says why. Prints JSON (see common.py)."""

import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import embedding  # noqa: E402

args = embedding.parse_args(__doc__)
common.limit_threads(args.threads)
# A fresh Inductor cache: a compile is a real one, not a hit of an earlier run's.
cache_dir = tempfile.mkdtemp(prefix="kiln-peers-inductor-")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir

import torch  # noqa: E402

torch.set_num_threads(args.threads)
torch.set_num_interop_threads(args.threads)

report = common.Report("torch", args)
report.info = {"version": torch.__version__, "num_threads": torch.get_num_threads(),
               "variants": {"PyTorch SparseAdam": "nn.Embedding(sparse=True) + SparseAdam, w "
                            "with Adam, eager",
                            "torch.compile": "the same with the forward and loss in "
                            "torch.compile(fullgraph=True); optimizers eager"}}
data = embedding.make_data(args)
ids = [torch.from_numpy(data["ids"][i]) for i in range(embedding.BATCHES)]
ys = [torch.from_numpy(data["y"][i]) for i in range(embedding.BATCHES)]


def step_maker(compiled):
    def make_step():
        table = torch.nn.Embedding(data["rows"], data["dim"], sparse=True)
        with torch.no_grad():
            table.weight.copy_(torch.from_numpy(data["table"]))
        w = torch.nn.Parameter(torch.from_numpy(data["w"].copy()))
        betas = (embedding.BETA1, embedding.BETA2)
        sparse_opt = torch.optim.SparseAdam(table.parameters(), lr=embedding.LEARNING_RATE,
                                            betas=betas, eps=embedding.EPSILON)
        dense_opt = torch.optim.Adam([w], lr=embedding.LEARNING_RATE, betas=betas,
                                     eps=embedding.EPSILON)

        def loss_of(batch, y):
            pred = table(batch) @ w
            return torch.mean((pred - y) ** 2)
        forward = torch.compile(loss_of, fullgraph=True) if compiled else loss_of

        def step(i):
            b = i % embedding.BATCHES
            sparse_opt.zero_grad(set_to_none=True)
            dense_opt.zero_grad(set_to_none=True)
            loss = forward(ids[b], ys[b])
            loss.backward()
            sparse_opt.step()
            dense_opt.step()
            return loss.detach()
        return step
    return make_step


for variant, compiled in (("PyTorch SparseAdam", False), ("torch.compile", True)):
    embedding.run_train(report, variant, data, step_maker(compiled))

shutil.rmtree(cache_dir, ignore_errors=True)
report.emit()
