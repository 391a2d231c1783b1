"""The sizes family of bench/compare (issue 18), workloads 7-9: kiln_bench_lstm_sizes (LSTM,
hidden 256 and 512, T = 50 and 200, and GRU at the same hidden sizes, T = 50; forward and train
step), kiln_bench_gemm (f32 GEMM at four
shapes, kiln against OpenBLAS, libxsmm, oneDNN and BLIS called directly) and kiln_bench_mlp (an
MLP train step with SGD, and with Adam), against bench/peers/peer_*_sizes.py. Imported by
bench/compare and bench/plot_sizes.py; only the Python standard library is used.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable

PEER_SCRIPTS = {"torch": "peer_torch_sizes.py", "tensorflow": "peer_tensorflow_sizes.py",
                "jax": "peer_jax_sizes.py"}  # peer (as bench/compare's PEERS): script
PEER_VARIANTS = ["PyTorch eager", "torch.compile", "tf.function", "tf.function XLA", "jax.jit"]
LSTM_WORKLOADS = (("forward", "forward"), ("train", "train step"))
CELLS = (("lstm", "LSTM"), ("gru", "GRU"))  # workload 7's recurrent layers: key, label
LSTM_TARGET = 1.2  # kiln at least this many times faster than each peer, per row (GRU alike)
GEMM_TARGET = 0.9  # kiln at least this fraction of the fastest library's GFLOP/s
KILN_GEMM = {"kiln_eager", "kiln_function"}
# Workload 9's rows: the peers' workload, the label, and where kiln_bench_mlp's JSON has kiln's
# figures (its top level for SGD, "adam" for Adam).
MLP_ROWS = (("mlp_train", "MLP train step", ()), ("mlp_adam_train", "MLP train step, Adam",
                                                  ("adam",)))


def mlp_figures(result: dict, path: tuple) -> dict:
    """kiln_bench_mlp's figures of one optimizer ({} when missing)."""
    figures = result.get("kiln", {}).get("mlp", {})
    for key in path:
        figures = figures.get(key, {})
    return figures


def run(build_dir: Path, repo: Path, python: str | None, peer_errors: dict, env: dict,
        quick: bool, timeout: float, run_json: Callable, log: Callable, rounds: int = 1) -> dict:
    """Runs kiln's three programs (two write the peers' weights and inputs to scratch .npz
    files), then each available peer's sizes script, `rounds` times in turn. peer_errors: peer
    -> why it cannot run. Returns {"kiln": {"lstm", "gemm", "mlp"}, "peers": {peer: JSON}}: with
    several rounds, each row's best figure over the rounds (merge_rounds), every round's own
    results under "rounds"."""
    results = []
    for i in range(rounds):
        if rounds > 1:
            log(f"sizes: round {i + 1} of {rounds}")
        results.append(_run_round(build_dir, repo, python, peer_errors, env, quick, timeout,
                                  run_json, log))
    if rounds == 1:
        return results[0]
    merged = merge_rounds(results)
    merged["rounds"] = results
    return merged


def _row_key(row: dict) -> tuple:
    return tuple(row.get(k) for k in ("cell", "workload", "variant", "hidden", "T", "m", "n", "k"))


def _best_rows(lists: list[list[dict]], key: Callable = _row_key) -> list[dict]:
    """Every row of the lists, once per key (in the order keys first appear), as its fastest
    version in any list: the highest gflops where rows have it, else the lowest median_s."""
    best = {}
    for rows in lists:
        for row in rows:
            held = best.get(key(row))
            if held is None:
                best[key(row)] = row
            elif "gflops" in row or "gflops" in held:
                if row.get("gflops", 0) > held.get("gflops", 0):
                    best[key(row)] = row
            elif row.get("median_s", float("inf")) < held.get("median_s", float("inf")):
                best[key(row)] = row
    return list(best.values())  # a replaced value keeps its key's first place


def merge_rounds(results: list[dict]) -> dict:
    """One result from several rounds of run(): per row and per engine (kiln, each peer
    variant, each GEMM library) the best figure any round measured. The machines this runs on
    change speed by up to a third within minutes (other tenants' memory traffic), and a round
    measures kiln and each peer minutes apart: the best of each over interleaved rounds compares
    them in their fast phases alike."""
    kiln = {}
    for key in ("lstm", "gemm", "mlp"):
        runs = [r["kiln"][key] for r in results if "error" not in r["kiln"].get(key, {"error": 1})]
        if not runs:
            kiln[key] = results[0]["kiln"].get(key, {})
            continue
        merged = dict(runs[0])
        if key == "lstm":
            merged["rows"] = _best_rows([run.get("rows", []) for run in runs])
        elif key == "gemm":
            shapes = []
            for shape in runs[0].get("shapes", []):
                same = [s["libraries"] for run in runs for s in run.get("shapes", [])
                        if (s["m"], s["n"], s["k"]) == (shape["m"], shape["n"], shape["k"])]
                shapes.append(dict(shape, libraries=_best_rows(same, key=lambda lib: lib["key"])))
            merged["shapes"] = shapes
        else:
            for _, _, path in MLP_ROWS:  # each optimizer's figures (a copy, not runs[0]'s)
                target, figures = merged, runs
                for k in path:
                    target[k] = dict(target.get(k, {}))
                    target, figures = target[k], [f.get(k, {}) for f in figures]
                for form in ("traced", "eager"):
                    timed = [f[form] for f in figures if form in f]
                    if timed:
                        target[form] = min(timed, key=lambda t: t["median_s"])
        kiln[key] = merged
    peers = {}
    for name in results[0]["peers"]:
        runs = [r["peers"][name] for r in results if "error" not in r["peers"].get(name, {})]
        if not runs:
            peers[name] = results[0]["peers"][name]
            continue
        merged = dict(runs[0])
        merged["results"] = _best_rows([run.get("results", []) for run in runs])
        # A variant that failed in some round but ran in another counts as measured.
        measured = {_row_key(row)[1:3] for row in merged["results"]}
        merged["errors"] = [e for e in runs[0].get("errors", [])
                            if (e.get("workload"), e.get("variant")) not in measured]
        peers[name] = merged
    return {"kiln": kiln, "peers": peers}


def _run_round(build_dir: Path, repo: Path, python: str | None, peer_errors: dict, env: dict,
               quick: bool, timeout: float, run_json: Callable, log: Callable) -> dict:
    """One round of run()."""
    flags = ["--quick"] if quick else []
    kiln = {}
    with tempfile.TemporaryDirectory(prefix="kiln-sizes-") as scratch:
        inits = {"lstm": Path(scratch) / "lstm_init.npz", "mlp": Path(scratch) / "mlp_init.npz"}
        for key, program in (("lstm", "kiln_bench_lstm_sizes"), ("gemm", "kiln_bench_gemm"),
                             ("mlp", "kiln_bench_mlp")):
            log(f"{program}{' --quick' if quick else ''}")
            save = ["--save-init", str(inits[key])] if key in inits else []
            kiln[key] = run_json([str(build_dir / "bench" / program), "--json", *flags, *save],
                                 env, timeout)
            if "error" in kiln[key]:
                log(f"{program} failed: {kiln[key]['error']}")
        init_args = [arg for key in ("lstm", "mlp") if inits[key].exists()
                     for arg in (f"--{key}-init", str(inits[key]))]
        peers = {}
        for name, script in PEER_SCRIPTS.items():
            if name in peer_errors or python is None:
                peers[name] = {"error": peer_errors.get(name, "no peers venv")}
                continue
            log(f"{name} sizes{' --quick' if quick else ''}")
            peers[name] = run_json([python, str(repo / "bench" / "peers" / script), "--threads",
                                    env.get("KILN_NUM_THREADS", "2"), *flags, *init_args], env,
                                   timeout)
            if "error" in peers[name]:
                log(f"{name} sizes: n/a: {peers[name]['error']}")
            for error in peers[name].get("errors", []):
                log(f"{name} {error['workload']} {error['variant']}: {error['error']}")
    return {"kiln": kiln, "peers": peers}


def peer_rows(result: dict, workload: str) -> dict:
    """variant -> [rows of that workload], and variant -> error, over every peer."""
    rows, errors = {}, {}
    for peer, data in result.get("peers", {}).items():
        if "error" in data:
            errors[peer] = data["error"]
            continue
        for r in data.get("results", []):
            if r["workload"] == workload:
                rows.setdefault(r["variant"], []).append(r)
        for e in data.get("errors", []):
            if e["workload"] == workload:
                errors[e["variant"]] = e["error"]
    return {"rows": rows, "errors": errors}


def recurrent_series(result: dict, cell: str) -> dict:
    """{(workload, hidden, T): {form: seconds}} of one cell ("lstm" or "gru") for kiln and every
    peer variant (peer workloads "<cell>_forward" and "<cell>_train")."""
    out = {}
    for r in result.get("kiln", {}).get("lstm", {}).get("rows", []):
        if r.get("cell", "lstm") == cell:
            out.setdefault((r["workload"], r["hidden"], r["T"]), {})["kiln"] = r["median_s"]
    for workload, _ in LSTM_WORKLOADS:
        for variant, rows in peer_rows(result, f"{cell}_{workload}")["rows"].items():
            for r in rows:
                out.setdefault((workload, r["hidden"], r["T"]), {})[variant] = r["median_s"]
    return out


def lstm_series(result: dict) -> dict:
    """recurrent_series of the LSTM (bench/plot_sizes.py draws these)."""
    return recurrent_series(result, "lstm")


def _time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"


OWNER = {"PyTorch eager": "torch", "torch.compile": "torch", "tf.function": "tensorflow",
         "tf.function XLA": "tensorflow", "jax.jit": "jax"}  # variant: the peer that runs it


def _why(result: dict, workload: str, variant: str) -> str:
    """Why a peer variant has no figure: its own error, its peer's, or "not measured"."""
    errors = peer_rows(result, workload)["errors"]
    return errors.get(variant) or errors.get(OWNER[variant]) or "not measured"


def time_table(result: dict) -> list[list[str]]:
    """Rows [workload, kiln, peer, peer time, kiln/peer, kiln is] of workloads 7 and 9."""
    lines = []

    def add(label, kiln_s, peers, workload):
        for i, variant in enumerate(PEER_VARIANTS):
            cells = [label if i == 0 else "", (_time(kiln_s) if kiln_s else "n/a") if i == 0
                     else "", variant]
            peer_s = peers.get(variant)
            if peer_s is None:
                lines.append(cells + [f"n/a ({_why(result, workload, variant)})", "", ""])
                continue
            lines.append(cells + [_time(peer_s), *_ratio_cells(kiln_s, peer_s)])

    for cell, name in CELLS:
        series = recurrent_series(result, cell)
        for workload, label in LSTM_WORKLOADS:
            for (w, hidden, length), forms in sorted(series.items()):
                if w == workload:
                    add(f"7. {name}({hidden}) {label}, T={length}", forms.get("kiln"), forms,
                        f"{cell}_{workload}")
    for workload, label, path in MLP_ROWS:
        kiln_s = mlp_figures(result, path).get("traced", {}).get("median_s")
        peers = {v: rows[0]["median_s"] for v, rows in peer_rows(result, workload)["rows"].items()}
        add(f"9. {label}", kiln_s, peers, workload)
    # Eager against eager: the same steps op by op (kiln's optimizer update still compiles).
    for workload, label, path in MLP_ROWS:
        eager_s = mlp_figures(result, path).get("eager", {}).get("median_s")
        torch_rows = peer_rows(result, workload)["rows"].get("PyTorch eager")
        if eager_s and torch_rows:
            torch_s = torch_rows[0]["median_s"]
            lines.append([f"9. {label}, kiln eager", _time(eager_s), "PyTorch eager",
                          _time(torch_s), *_ratio_cells(eager_s, torch_s)])
    return lines


def _ratio_cells(kiln_s: float | None, peer_s: float) -> list[str]:
    """[kiln/peer, "N.NNx faster" or "slower"] ("n/a" and "" without a kiln figure)."""
    if not kiln_s:
        return ["n/a", ""]
    ratio = kiln_s / peer_s
    return [f"{ratio:.2f}", f"{1 / ratio:.2f}x faster" if ratio <= 1 else f"{ratio:.2f}x slower"]


def gemm_table(result: dict) -> list[list[str]]:
    """Rows [M x N x K, library, GFLOP/s, kiln eager / this, kiln function / this]."""
    lines = []
    torch_rows = {(r["m"], r["n"], r["k"]): r for r in peer_rows(result, "gemm")["rows"].get(
        "torch.matmul", [])}
    for shape in result.get("kiln", {}).get("gemm", {}).get("shapes", []):
        key = (shape["m"], shape["n"], shape["k"])
        libs = {lib["key"]: lib for lib in shape["libraries"]}
        eager = libs.get("kiln_eager", {}).get("gflops")
        function = libs.get("kiln_function", {}).get("gflops")
        entries = [(lib["label"], lib.get("gflops"), lib.get("skipped"))
                   for lib in shape["libraries"]]
        if key in torch_rows:
            entries.append(("torch.matmul (peer)", torch_rows[key]["gflops"], None))
        for i, (label, gflops, skipped) in enumerate(entries):
            name = f"8. GEMM {key[0]}x{key[1]}x{key[2]}" if i == 0 else ""
            if gflops is None:
                lines.append([name, label, f"n/a ({skipped})", "", ""])
                continue
            lines.append([name, label, f"{gflops:.1f}",
                          f"{eager / gflops:.2f}" if eager else "",
                          f"{function / gflops:.2f}" if function else ""])
    return lines


TIME_HEADER = ["workload", "kiln", "peer", "peer time", "kiln/peer", "kiln is"]
GEMM_HEADER = ["shape (M x N x K)", "library", "GFLOP/s", "kiln eager / this",
               "kiln function / this"]


def _print(header: list[str], lines: list[list[str]], markdown: bool, left: set) -> None:
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "|".join("---" if i in left else "---:" for i in range(len(header))) + "|")
        for line in lines:
            print("| " + " | ".join(c.replace("|", "\\|") for c in line) + " |")
        return
    widths = [max(len(header[i]), *(len(l[i]) for l in lines if len(l[i]) < 40))
              for i in range(len(header))]
    print("  ".join(h.ljust(widths[i]) if i in left else h.rjust(widths[i])
                    for i, h in enumerate(header)))
    print("-" * (sum(widths) + 2 * len(widths)))
    for line in lines:
        print("  ".join(c.ljust(widths[i]) if i in left or len(c) >= 40 else c.rjust(widths[i])
                        for i, c in enumerate(line)).rstrip())


def print_tables(result: dict, markdown: bool) -> None:
    lstm = result.get("kiln", {}).get("lstm", {})
    mlp = result.get("kiln", {}).get("mlp", {})
    width = mlp.get("width", "?")
    print(f"LSTM and GRU: batch {lstm.get('batch', 64)}, {lstm.get('features', 128)} features; "
          f"MLP: {mlp.get('features', '?')} -> {width} -> {width} -> {mlp.get('classes', '?')}, "
          f"batch {mlp.get('batch', '?')}; kiln/peer below 1: kiln is faster\n")
    _print(TIME_HEADER, time_table(result), markdown, {0, 2})
    for _, label, path in MLP_ROWS:
        figures = mlp_figures(result, path)
        if "eager" in figures:
            print(f"\nkiln eager {label}: {_time(figures['eager']['median_s'])}; first losses "
                  f"{', '.join(f'{x:.6f}' for x in figures.get('losses', []))} (every peer "
                  "matched them)")
    print("\nGEMM f32, row-major C = A B, GFLOP/s of the median call; kiln / this above 1: kiln "
          "is faster\n")
    _print(GEMM_HEADER, gemm_table(result), markdown, {0, 1})


def checks(result: dict) -> list[dict]:
    """Issue 18's targets, each held or not, with the figures that decide."""
    out = []
    series = [(name, key, forms) for cell, name in CELLS
              for key, forms in sorted(recurrent_series(result, cell).items())]
    for name, (workload, hidden, length), forms in series:
        kiln_s = forms.get("kiln")
        peers = {v: s for v, s in forms.items() if v != "kiln"}
        if not kiln_s or not peers:
            continue
        ratios = {v: s / kiln_s for v, s in peers.items()}  # peer time / kiln time
        out.append({"claim": f"7. {name}({hidden}) {workload} T={length}: kiln at least "
                             f"{LSTM_TARGET}x faster than each peer",
                    "held": all(r >= LSTM_TARGET for r in ratios.values())
                    and len(peers) == len(PEER_VARIANTS),
                    "figure": "peer/kiln " + ", ".join(f"{v} {ratios[v]:.2f}"
                                                       for v in PEER_VARIANTS if v in ratios)
                    + ("" if len(peers) == len(PEER_VARIANTS) else " (some peers missing)")})
    for shape in result.get("kiln", {}).get("gemm", {}).get("shapes", []):
        libs = [lib for lib in shape["libraries"] if "gflops" in lib]
        others = [lib for lib in libs if lib["key"] not in KILN_GEMM]
        if not others:
            continue
        best = max(others, key=lambda lib: lib["gflops"])
        name = f"{shape['m']}x{shape['n']}x{shape['k']}"
        for lib in libs:
            if lib["key"] in KILN_GEMM:
                fraction = lib["gflops"] / best["gflops"]
                out.append({"claim": f"8. GEMM {name}: {lib['label']} at least "
                                     f"{GEMM_TARGET:.0%} of the fastest library",
                            "held": fraction >= GEMM_TARGET,
                            "figure": f"{lib['gflops']:.1f} GFLOP/s = {fraction:.0%} of "
                                      f"{best['label']}'s {best['gflops']:.1f}"})
    for workload, label, path in MLP_ROWS:
        figures = mlp_figures(result, path)
        peers = {v: rows[0]["median_s"] for v, rows in peer_rows(result, workload)["rows"].items()}
        if "traced" not in figures or not peers:
            continue
        kiln_s = figures["traced"]["median_s"]
        out.append({"claim": f"9. {label}: kiln faster than every peer",
                    "held": all(s > kiln_s for s in peers.values())
                    and len(peers) == len(PEER_VARIANTS),
                    "figure": "peer/kiln " + ", ".join(f"{v} {peers[v] / kiln_s:.2f}"
                                                       for v in PEER_VARIANTS if v in peers)})
    return out


def checks_by_round(result: dict) -> list[dict]:
    """checks() of the best figures, each with "rounds_held": in how many of a --rounds run's
    rounds the same claim held on that round's own figures (absent for a single round)."""
    out = checks(result)
    rounds = result.get("rounds")
    if not rounds:
        return out
    held = {}
    for r in rounds:
        for c in checks(r):
            held[c["claim"]] = held.get(c["claim"], 0) + (1 if c["held"] else 0)
    for c in out:
        c["rounds_held"] = held.get(c["claim"], 0)
    return out
