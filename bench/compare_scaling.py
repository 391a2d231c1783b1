"""The sequence-length scaling family of bench/compare (issue 17): kiln_bench_scaling against
bench/peers/peer_*_scaling.py, one LSTM(256) layer, batch 64, 128 features, T = 5, 50, 200, 1000,
forward and train step. Imported by bench/compare; only the Python standard library is used.

The kiln forms are the rows of bench_scaling.cpp's variant table, each with a key and a label in
its JSON; every form found there is shown (a new form, e.g. a checkpointed scan, needs nothing
here). The reference of the ratio column is the form with key REFERENCE.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable

PEER_SCRIPTS = {  # peer (as bench/compare's PEERS): script in bench/peers, the variant it runs
    "torch": ("peer_torch_scaling.py", "PyTorch eager"),
    "tensorflow": ("peer_tensorflow_scaling.py", "Keras tf.function"),
    "jax": ("peer_jax_scaling.py", "jax.lax.scan"),
}
BATCH, FEATURES, UNITS = 64, 128, 256  # as bench_scaling.cpp and bench/peers/scaling.py
REFERENCE = "scan"  # the kiln form the ratio column divides by
CHECKPOINTED = "scan_checkpoint"  # the form the checkpointing claim compares with REFERENCE
WORKLOADS = (("forward", "forward"), ("train", "train step"))


def run(build_dir: Path, repo: Path, python: str | None, peer_errors: dict, env: dict,
        quick: bool, timeout: float, run_json: Callable, log: Callable) -> dict:
    """Runs kiln_bench_scaling (which writes the peers' weights, inputs and its results to a
    scratch .npz) and then each available peer's scaling script. peer_errors: peer -> why it
    cannot run (not selected, missing), for the peers that do not. Returns {"kiln", "peers"}."""
    flags = ["--quick"] if quick else []
    with tempfile.TemporaryDirectory(prefix="kiln-scaling-") as scratch:
        init = Path(scratch) / "scaling_init.npz"
        log(f"kiln_bench_scaling{' --quick' if quick else ''}")
        kiln = run_json([str(build_dir / "bench" / "kiln_bench_scaling"), "--json", *flags,
                         "--save-init", str(init)], env, timeout)
        if "error" in kiln:
            log(f"kiln_bench_scaling failed: {kiln['error']}")
        init_args = ["--scaling-init", str(init)] if init.exists() else []
        peers = {}
        for name, (script, _) in PEER_SCRIPTS.items():
            if name in peer_errors:
                peers[name] = {"error": peer_errors[name]}
                continue
            if python is None:
                peers[name] = {"error": "no peers venv"}
                continue
            log(f"{name} scaling{' --quick' if quick else ''}")
            peers[name] = run_json([python, str(repo / "bench" / "peers" / script), "--threads",
                                    env.get("KILN_NUM_THREADS", "2"), *flags, *init_args], env,
                                   timeout)
            if "error" in peers[name]:
                log(f"{name} scaling: n/a: {peers[name]['error']}")
            for error in peers[name].get("errors", []):
                log(f"{name} {error['workload']} {error['variant']}: {error['error']}")
    return {"kiln": kiln, "peers": peers}


def series(result: dict) -> list[dict]:
    """Every form, kiln's then the peers': {"name", "kiln", "rows": {(workload, T): row}, "error"}.
    A kiln row has median_s, first_call_s, tracing_count, nodes, peak_bytes (train) or skipped;
    a peer row median_s, first_call_s and traces (None when the framework does not count)."""
    out = []
    kiln = result.get("kiln", {})
    for v in kiln.get("variants", []):
        out.append({"name": v["label"], "key": v["key"], "kiln": True, "error": None,
                    "rows": {(r["workload"], r["T"]): r for r in v["rows"]}})
    if "error" in kiln:
        out.append({"name": "kiln", "key": "kiln", "kiln": True, "error": kiln["error"],
                    "rows": {}})
    for peer, data in result.get("peers", {}).items():
        if "error" in data:
            name = PEER_SCRIPTS[peer][1] if peer in PEER_SCRIPTS else peer
            out.append({"name": name, "key": name, "kiln": False, "error": data["error"],
                        "rows": {}})
            continue
        variants = {}
        for r in data.get("results", []):
            workload = r["workload"].removeprefix("scaling_")
            variants.setdefault(r["variant"], {})[(workload, r["T"])] = r
        for e in data.get("errors", []):
            variants.setdefault(e["variant"], {})
        for variant, rows in variants.items():
            errors = [e["error"] for e in data.get("errors", []) if e["variant"] == variant]
            out.append({"name": variant, "key": variant, "kiln": False,
                        "error": "; ".join(errors) or None, "rows": rows})
    return out


def _time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _mib(count: int) -> str:
    return f"{count / (1 << 20):.1f} MiB"


def table(result: dict) -> list[list[str]]:
    """The rows of the printed table (see print_table's header)."""
    forms = series(result)
    reference = next((f for f in forms if f["kiln"] and f["key"] == REFERENCE), None)
    lengths = result.get("kiln", {}).get("lengths") or sorted(
        {t for f in forms for (_, t) in f["rows"]})
    lines = []
    errors_shown = set()
    for workload, label in WORKLOADS:
        for length in lengths:
            ref = reference["rows"].get((workload, length)) if reference else None
            for form in forms:
                row = form["rows"].get((workload, length))
                cells = [label, str(length), form["name"]]
                if row is None or "skipped" in row:
                    why = row["skipped"] if row else (form["error"] or "not measured")
                    shown = (form["name"], why) in errors_shown
                    errors_shown.add((form["name"], why))
                    lines.append(cells + ["n/a" if shown else f"n/a ({why})"] + [""] * 6)
                    continue
                median = row["median_s"]
                traces = row.get("tracing_count", row.get("traces"))
                ratio = (ref["median_s"] / median if ref and "median_s" in ref and median > 0
                         else None)
                lines.append(cells + [
                    _time(median), _time(median / length), _time(row["first_call_s"]),
                    "-" if traces is None else str(traces),
                    str(row["nodes"]) if "nodes" in row else "-",
                    _mib(row["peak_bytes"]) if form["kiln"] and workload == "train" else "-",
                    f"{ratio:.2f}" if ratio is not None else "-"])
    return lines


HEADER = ["workload", "T", "form", "cached call", "per step", "first call", "traces",
          "graph nodes", "train peak", "kiln scan / this"]


def print_table(result: dict, markdown: bool) -> None:
    lines = table(result)
    if markdown:
        print("| " + " | ".join(HEADER) + " |")
        print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
        for line in lines:
            print("| " + " | ".join(c.replace("|", "\\|") for c in line) + " |")
        return
    widths = [max(len(HEADER[i]), *(len(l[i]) for l in lines if len(l[i]) < 40))
              for i in range(len(HEADER))]
    print("  ".join(h.ljust(widths[i]) if i in (0, 2) else h.rjust(widths[i])
                    for i, h in enumerate(HEADER)))
    print("-" * (sum(widths) + 2 * len(widths)))
    for line in lines:
        if not line[4]:  # n/a with its reason
            print("  ".join([line[0].ljust(widths[0]), line[1].rjust(widths[1]),
                             line[2].ljust(widths[2]), line[3]]))
            continue
        print("  ".join(c.ljust(widths[i]) if i in (0, 2) else c.rjust(widths[i])
                        for i, c in enumerate(line)))


def checks(result: dict) -> list[dict]:
    """Issue 17's claims about the scan form, each held or not, with the figures that decide."""
    out = []
    reference = next((f for f in series(result) if f["kiln"] and f["key"] == REFERENCE), None)
    if reference is None:
        return out
    for workload, label in WORKLOADS:
        rows = sorted((t, r) for (w, t), r in reference["rows"].items()
                      if w == workload and "median_s" in r)
        if not rows:
            continue
        traces = {r["tracing_count"] for _, r in rows}
        nodes = {r["nodes"] for _, r in rows}
        out.append({"claim": f"{label}: one trace for every T", "held": traces == {1},
                    "figure": f"tracing_count {sorted(traces)}"})
        out.append({"claim": f"{label}: the same graph for every T", "held": len(nodes) == 1,
                    "figure": f"nodes {sorted(nodes)}"})
        later = rows[1:]
        if later:
            added = [r.get("plan_bytes_added", 0) for _, r in later]
            out.append({"claim": f"{label}: a new T builds a new plan only (no retrace, one "
                                 "concrete function)",
                        "held": all(r.get("cache_size") == 1 for _, r in rows) and traces == {1}
                        and all(b > 0 for b in added),
                        "figure": "graph and plan bytes added by the first call at T=" + ", ".join(
                            f"{t}: {r.get('plan_bytes_added', 0) / 1024:.1f} KiB"
                            for t, r in later)})
        if later:
            # A new T costs a plan for the new dim binding (no retrace, no compile: a few ms) and
            # the first touch of the memory that length needs (page faults, linear in T), on top
            # of the run itself: at most one more cached call's time.
            ratios = [(t, r["first_call_s"] / r["median_s"]) for t, r in later if t >= 50]
            if ratios:
                out.append({"claim": f"{label}: first call at a new T within 2x of the cached "
                                     "call from T = 50 on (the trace is paid once, at the first T)",
                            "held": all(q <= 2 for _, q in ratios),
                            "figure": ", ".join(f"T={t}: {q:.2f}x" for t, q in ratios)})
        per_step = [r["median_s"] / t for t, r in rows if t >= 50]
        if len(per_step) > 1:
            spread = max(per_step) / min(per_step)
            out.append({"claim": f"{label}: time per step flat from T = 50 on (within 1.5x)",
                        "held": spread <= 1.5,
                        "figure": ", ".join(f"T={t}: {_time(r['median_s'] / t)}"
                                            for t, r in rows)})
    train = sorted((t, r["peak_bytes"]) for (w, t), r in reference["rows"].items()
                   if w == "train" and "peak_bytes" in r)
    if len(train) > 2:
        # Least squares line bytes = a + b T; linear when no point is off it by more than 5% of
        # the largest figure.
        n = len(train)
        mean_t = sum(t for t, _ in train) / n
        mean_b = sum(b for _, b in train) / n
        slope = (sum((t - mean_t) * (b - mean_b) for t, b in train)
                 / sum((t - mean_t) ** 2 for t, _ in train))
        worst = max(abs(b - (mean_b + slope * (t - mean_t))) for t, b in train)
        out.append({"claim": "train step peak memory linear in T (within 5% of the largest)",
                    "held": worst <= 0.05 * train[-1][1],
                    "figure": f"{slope / 1024:.0f} KiB per step; " + ", ".join(
                        f"T={t}: {_mib(b)}" for t, b in train)})
    remat = next((f for f in series(result) if f["kiln"] and f["key"] == CHECKPOINTED), None)
    if remat is not None:
        # The figure is at T = 1000; a --quick run stops far below any segment length.
        longest = 1000
        plain = reference["rows"].get(("train", longest), {})
        kept = remat["rows"].get(("train", longest), {})
        if "peak_bytes" in plain and "peak_bytes" in kept and "median_s" in kept:
            lower = plain["peak_bytes"] / kept["peak_bytes"]
            slower = kept["median_s"] / plain["median_s"]
            out.append({"claim": f"checkpointed train step at T = {longest}: at least 3x lower "
                                 "peak at no more than 1.4x the time",
                        "held": lower >= 3 and slower <= 1.4,
                        "figure": f"peak {_mib(kept['peak_bytes'])} against "
                                  f"{_mib(plain['peak_bytes'])} ({lower:.1f}x lower), time "
                                  f"{slower:.2f}x"})
    return out
