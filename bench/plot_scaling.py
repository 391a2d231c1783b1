#!/usr/bin/env python3
"""Draws docs/images/lstm-scaling.png from the sequence-length scaling figures of a bench/compare
run (bench/results/latest.json): the cached call's median against T, log-log, for the forward
pass and the train step of every kiln form and peer; and kiln's train-step peak memory against T.

    ~/.cache/kiln/peers-venv/bin/python bench/plot_scaling.py [RESULTS] [--output PNG]

matplotlib comes with the peers' virtual environment (scripts/peers-env.sh).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

import compare_scaling  # noqa: E402  (bench/, next to this file)
import plot_common  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def curve(form: dict, workload: str, value) -> tuple[list, list]:
    points = sorted((t, value(r)) for (w, t), r in form["rows"].items()
                    if w == workload and "median_s" in r and value(r) is not None)
    return [t for t, _ in points], [v for _, v in points]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="?", default=str(REPO / "bench/results/latest.json"))
    parser.add_argument("--output", default=str(REPO / "docs/images/lstm-scaling.png"))
    args = parser.parse_args()
    results = json.loads(Path(args.results).read_text())
    if "scaling" not in results:
        sys.exit(f"plot_scaling: {args.results} holds no scaling figures (run bench/compare "
                 "without --only core)")
    forms = [f for f in compare_scaling.series(results["scaling"]) if f["rows"]]

    lengths = sorted({t for f in forms for (_, t) in f["rows"]})
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    styles = {True: {"linestyle": "-", "linewidth": 2.2}, False: {"linestyle": "--"}}
    for ax, (workload, label) in zip(axes, compare_scaling.WORKLOADS):
        for form in forms:
            ts, seconds = curve(form, workload, lambda r: r["median_s"])
            if ts:
                ax.plot(ts, [s * 1e3 for s in seconds], marker="o", label=form["name"],
                        **styles[form["kiln"]])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("sequence length T")
        ax.set_ylabel("cached call, ms (median)")
        ax.set_title(f"LSTM(256) {label}, batch 64")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    ax = axes[2]
    for form in forms:
        if form["kiln"]:
            ts, peaks = curve(form, "train", lambda r: r.get("peak_bytes"))
            if ts:
                ax.plot(ts, [p / (1 << 20) for p in peaks], marker="o", label=form["name"],
                        **styles[True])
    ax.set_xlabel("sequence length T")
    ax.set_ylabel("MiB above live before the step")
    ax.set_title("kiln train step peak memory")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    for ax in axes[:2]:
        ax.set_xticks(lengths, [str(t) for t in lengths])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    plot_common.finish(fig, results, "Sequence-length scaling (issue 17)", args.output, "plot_scaling")
    return 0


if __name__ == "__main__":
    sys.exit(main())
