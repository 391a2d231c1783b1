#!/usr/bin/env python3
"""Draws docs/images/lstm-sizes.png from the sizes family of a bench/compare run
(bench/results/latest.json): workload 7's cached call (median) at each LSTM size (hidden, T) and
each GRU size, for the forward pass and the train step, kiln and every peer variant. Given several
runs' results, each point is the median of that point over the runs (on a machine whose speed comes
and goes, one run can catch kiln or a peer in a slow phase); a run of `bench/compare --rounds N` is
drawn from its best figures.

    ~/.cache/kiln/peers-venv/bin/python bench/plot_sizes.py [RESULTS...] [--output PNG]

matplotlib comes with the peers' virtual environment (scripts/peers-env.sh).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import compare_sizes  # noqa: E402  (bench/, next to this file)
import plot_common  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def median_series(all_series: list[dict]) -> dict:
    """{(workload, hidden, T): {form: seconds}}: each point's median over the runs that have it."""
    out = {}
    for key in {k for series in all_series for k in series}:
        for form in {f for series in all_series for f in series.get(key, {})}:
            values = [s[key][form] for s in all_series if form in s.get(key, {})]
            out.setdefault(key, {})[form] = statistics.median(values)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="*", default=[str(REPO / "bench/results/latest.json")])
    parser.add_argument("--output", default=str(REPO / "docs/images/lstm-sizes.png"))
    args = parser.parse_args()
    runs = []
    for path in args.results:
        results = json.loads(Path(path).read_text())
        if "sizes" not in results:
            sys.exit(f"plot_sizes: {path} holds no sizes figures (run bench/compare "
                     "--only sizes, or without --only)")
        runs.append(results)
    series = {cell: median_series([compare_sizes.recurrent_series(r["sizes"], cell)
                                   for r in runs])
              for cell, _ in compare_sizes.CELLS}
    results = dict(runs[-1])
    if len(runs) > 1:
        dates = sorted(r.get("date", "?") for r in runs)
        results["date"] = f"{dates[0]} to {dates[-1]}, medians of {len(runs)} runs"
        highest = max(r.get("machine", {}).get("load_start", [0])[0] for r in runs)
        results["machine"] = {**results.get("machine", {}),
                              "load_start": [f"{highest} (the highest)"]}
    elif "rounds" in results.get("sizes", {}):
        rounds = len(results["sizes"]["rounds"])
        results["date"] = f"{results.get('date', '?')}, best of {rounds} rounds (--rounds)"
    forms = ["kiln"] + compare_sizes.PEER_VARIANTS

    cells = [(cell, name) for cell, name in compare_sizes.CELLS if series[cell]]
    fig, grid = plt.subplots(len(cells), 2, figsize=(13, 4.8 * len(cells)), squeeze=False)
    for axes, (cell, name) in zip(grid, cells):
        for ax, (workload, label) in zip(axes, compare_sizes.LSTM_WORKLOADS):
            points_of = series[cell]
            sizes = sorted((h, t) for (w, h, t) in points_of if w == workload)
            for form in forms:
                points = [(i, points_of[(workload, h, t)][form]) for i, (h, t) in enumerate(sizes)
                          if form in points_of[(workload, h, t)]]
                if points:
                    style = ({"linestyle": "-", "linewidth": 2.4, "color": "black"}
                             if form == "kiln" else {"linestyle": "--"})
                    ax.plot([i for i, _ in points], [s * 1e3 for _, s in points], marker="o",
                            label=form, **style)
            ax.set_xticks(list(range(len(sizes))), [f"hidden {h}\nT = {t}" for h, t in sizes])
            ax.set_xlim(-0.5, max(len(sizes), 2) - 0.5)
            ax.set_yscale("log")
            ax.set_ylabel("cached call, ms (median)")
            ax.set_title(f"{name} {label}, batch 64, 128 features")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
    plot_common.finish(fig, results, "LSTM and GRU sizes (issue 18, workload 7)", args.output,
                       "plot_sizes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
