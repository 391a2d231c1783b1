"""PyTorch's side of kiln_bench_optimizer: Adam (fused=True: one kernel per parameter group)
and SGD with momentum (foreach) applied to fixed gradients, on the same two sets of variables,
two threads. Prints the median and 10th-percentile time of one step.

Usage: python bench/peers/torch_optimizer_update.py  (in the peers' virtual environment)
"""
import time

import torch

MODELS = {
    "mlp": [(1024, 1024), (1024,), (1024, 1024), (1024,), (1024, 10), (10,)],
    "large": [(4096, 1024)] * 4,
}


def main():
    torch.set_num_threads(2)
    for model, shapes in MODELS.items():
        for rule in ("adam", "momentum"):
            params = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
            for p in params:
                p.grad = torch.randn(p.shape)
            if rule == "adam":
                opt = torch.optim.Adam(params, lr=1e-3, fused=True)
            else:
                opt = torch.optim.SGD(params, lr=1e-2, momentum=0.9, foreach=True)
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
                  f"{times[len(times) // 2] * 1e3:8.3f} ms, p10 {times[len(times) // 10] * 1e3:8.3f} ms")


if __name__ == "__main__":
    main()
