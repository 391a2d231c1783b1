"""PyTorch's side of kiln_bench_optimizer: Adam, SGD with momentum (plain and Nesterov),
RMSprop and Adagrad applied to fixed gradients, on the same two sets of variables, two threads,
each in its fastest form (fused=True where this PyTorch has it for the CPU, else foreach=True).
Prints the median and 10th-percentile time of one step.

Usage: python bench/peers/torch_optimizer_update.py  (in the peers' virtual environment)
"""
import time

import torch

MODELS = {
    "mlp": [(1024, 1024), (1024,), (1024, 1024), (1024,), (1024, 10), (10,)],
    "large": [(4096, 1024)] * 4,
}


RULES = {
    "adam": (torch.optim.Adam, dict(lr=1e-3, eps=1e-7)),
    "momentum": (torch.optim.SGD, dict(lr=1e-2, momentum=0.9)),
    "nesterov": (torch.optim.SGD, dict(lr=1e-2, momentum=0.9, nesterov=True)),
    "rmsprop": (torch.optim.RMSprop, dict(lr=1e-3, alpha=0.9, eps=1e-7)),
    "adagrad": (torch.optim.Adagrad, dict(lr=1e-3, initial_accumulator_value=0.1, eps=1e-7)),
}


def make(rule, params):
    """The optimizer in its fused form where PyTorch has one for the CPU, else foreach; and
    which."""
    cls, options = RULES[rule]
    try:
        opt = cls(params, fused=True, **options)
        opt.step()
        return opt, "fused"
    except (RuntimeError, TypeError, ValueError):
        return cls(params, foreach=True, **options), "foreach"


def main():
    torch.set_num_threads(2)
    for model, shapes in MODELS.items():
        for rule in RULES:
            params = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
            for p in params:
                p.grad = torch.randn(p.shape)
            opt, form = make(rule, params)
            for _ in range(3):
                opt.step()
            calls = 20 if model == "large" else 200
            times = []
            for _ in range(calls):
                start = time.perf_counter()
                opt.step()
                times.append(time.perf_counter() - start)
            times.sort()
            count = sum(p.numel() for p in params)
            print(f"{model:<6} {rule:<9} {count:>9} parameters: median "
                  f"{times[len(times) // 2] * 1e3:8.3f} ms, p10 {times[len(times) // 10] * 1e3:8.3f} ms"
                  f" ({form})")


if __name__ == "__main__":
    main()
