"""The layers family of bench/compare (issue 23, workloads 11 and 12): kiln_bench_layers against
bench/peers/peer_torch_layers.py and peer_jax_layers.py (bench/peers/layers.py describes the
workloads). The target: for each workload, kiln within 10% of the fastest peer variant, or
faster (kiln / fastest <= 1.1). kiln's row is its channels-last form (kiln's default layout);
its channels-first form is shown next to it. Imported by bench/compare; only the Python
standard library is used.

kiln_bench_layers --json [--quick] prints {"conv_batch", "attention_batch", "rows":
[{"workload", "variant": "kiln", "median_s", ...}]}.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

PROGRAM = "kiln_bench_layers"
PEER_SCRIPTS = {"torch": "peer_torch_layers.py", "jax": "peer_jax_layers.py"}
WORKLOADS = {"conv2d_forward": "11. conv2d 3x3 64ch 56x56 b32, forward",
             "conv2d_train": "11. conv2d, forward + backward",
             "attention_forward": "12. attention s512 d512 h8 b8, forward",
             "attention_train": "12. attention, forward + backward"}
TARGET = 1.1  # kiln / fastest peer variant


def run(build_dir: Path, repo: Path, python: str | None, peer_errors: dict, env: dict,
        quick: bool, timeout: float, run_json: Callable, log: Callable) -> dict:
    """Runs kiln_bench_layers, then each available peer's layers script."""
    flags = ["--quick"] if quick else []
    program = build_dir / "bench" / PROGRAM
    if program.exists():
        log(f"{PROGRAM}{' --quick' if quick else ''}")
        kiln = run_json([str(program), "--json", *flags], env, timeout)
    else:
        kiln = {"error": f"not built: {program}"}
    peers = {}
    for name, script in PEER_SCRIPTS.items():
        if name in peer_errors or python is None:
            peers[name] = {"error": peer_errors.get(name, "no peers venv")}
            continue
        log(f"{name} layers{' --quick' if quick else ''}")
        peers[name] = run_json([python, str(repo / "bench" / "peers" / script), "--threads",
                                env.get("KILN_NUM_THREADS", "2"), *flags], env, timeout)
        for error in peers[name].get("errors", []):
            log(f"{name} {error['workload']} {error['variant']}: {error['error']}")
    return {"kiln": kiln, "peers": peers}


def kiln_times(result: dict) -> dict:
    """workload -> kiln's median seconds (channels-last rows, and the _nchw ones)."""
    return {r["workload"]: r["median_s"] for r in result.get("kiln", {}).get("rows", [])}


def peer_times(result: dict) -> dict:
    """workload -> {variant: median seconds}."""
    times: dict = {}
    for data in result.get("peers", {}).values():
        for r in data.get("results", []):
            times.setdefault(r["workload"], {})[r["variant"]] = r["median_s"]
    return times


def _time(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _ratio(ratio: float) -> str:
    digits = max(0, 1 - math.floor(math.log10(ratio))) if ratio > 0 else 2
    return f"{ratio:.{digits}f}"


def table(result: dict) -> list[list[str]]:
    """Rows [workload, kiln, kiln NCHW, peer variant, its time, kiln / it]."""
    kiln, peers = kiln_times(result), peer_times(result)
    lines = []
    for workload, label in WORKLOADS.items():
        k = kiln.get(workload)
        nchw = kiln.get(f"{workload}_nchw")
        variants = sorted(peers.get(workload, {}).items(), key=lambda item: item[1])
        if not variants:
            lines.append([label, _time(k) if k else "n/a", _time(nchw) if nchw else "", "n/a",
                          "", ""])
        for i, (variant, seconds) in enumerate(variants):
            lines.append([label if i == 0 else "", (_time(k) if k else "n/a") if i == 0 else "",
                          (_time(nchw) if nchw else "") if i == 0 else "", variant,
                          _time(seconds), _ratio(k / seconds) if k else "n/a"])
    return lines


HEADER = ["workload", "kiln (NHWC)", "kiln NCHW", "peer", "peer time", "kiln/peer"]


def print_tables(result: dict, markdown: bool) -> None:
    kiln = result.get("kiln", {})
    print("kiln/peer below 1: kiln is faster\n")
    lines = table(result)
    if markdown:
        print("| " + " | ".join(HEADER) + " |")
        print("|---|---:|---:|---|---:|---:|")
        for line in lines:
            print("| " + " | ".join(line) + " |")
    else:
        widths = [max(len(HEADER[i]), *(len(l[i]) for l in lines)) for i in range(len(HEADER))]
        print("  ".join(h.ljust(widths[i]) for i, h in enumerate(HEADER)))
        for line in lines:
            print("  ".join(c.ljust(widths[i]) for i, c in enumerate(line)).rstrip())
    if "error" in kiln:
        print(f"\n{PROGRAM}: n/a ({kiln['error']})")
    for name, data in result.get("peers", {}).items():
        if "error" in data:
            print(f"{name}: n/a ({data['error']})")


def checks(result: dict) -> list[dict]:
    """For each workload: kiln (its faster layout) within TARGET of the fastest peer variant."""
    kiln, peers = kiln_times(result), peer_times(result)
    out = []
    for workload, label in WORKLOADS.items():
        mine = [s for s in (kiln.get(workload), kiln.get(f"{workload}_nchw")) if s]
        theirs = peers.get(workload, {})
        if not mine or not theirs:
            out.append({"claim": f"{label}: kiln within {TARGET}x of the fastest peer",
                        "held": False, "figure": "n/a: not measured"})
            continue
        best_variant, best = min(theirs.items(), key=lambda item: item[1])
        ratio = min(mine) / best
        out.append({"claim": f"{label}: kiln within {TARGET}x of the fastest peer",
                    "held": ratio <= TARGET,
                    "figure": f"kiln {_time(min(mine))}, {best_variant} {_time(best)}: "
                              f"kiln/peer {_ratio(ratio)}"})
    return out
