"""The embedding family of bench/compare (issue 21, workload 10): kiln_bench_embedding against
bench/peers/peer_torch_embedding.py and peer_tensorflow_embedding.py. One train step of a
1,000,000 x 64 f32 embedding table and a [64, 1] weight w: look up 4096 ids, pred = emb @ w,
mean squared error, backward, Adam (learning rate 1e-3). The table's gradient names at most 4096
rows, so a step need touch only those rows of the table and of Adam's two slots.

The targets: kiln's step at least TIME_TARGET times faster than each peer variant, and kiln's
peak memory during a step (above the live bytes before it: the table and its slots) at most
MEMORY_FACTOR times the bytes of the rows the step touches. Imported by bench/compare; only the
Python standard library is used.

kiln_bench_embedding --json [--quick] prints {"vocab", "dim", "batch", "rows": [{"workload":
"embedding_train", "median_s", "peak_extra_bytes", "touched_row_bytes", "table_bytes",
"slot_bytes"}], ...}. With --quick, kiln and the peers run 10,000 x 16, batch 256; a peer row
whose sizes are not kiln's is shown as not comparable.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

PROGRAM = "kiln_bench_embedding"
WORKLOAD = "embedding_train"
PEER_SCRIPTS = {"torch": "peer_torch_embedding.py",
                "tensorflow": "peer_tensorflow_embedding.py"}  # peer (as compare's PEERS): script
OWNER = {"PyTorch SparseAdam": "torch", "torch.compile": "torch",
         "Keras tf.function": "tensorflow", "Keras tf.function XLA": "tensorflow"}
PEER_VARIANTS = list(OWNER)  # in the table's order
# Variants a peer may fail to run (a sparse gradient its compiler does not take): their absence
# is shown, and does not fail the time target; the others must be measured.
OPTIONAL = {"torch.compile", "Keras tf.function XLA"}
ROWS, DIM, BATCH = 1_000_000, 64, 4096  # as bench/peers/embedding.py
TIME_TARGET = 1.2  # peer time / kiln time, for every measured peer variant
MEMORY_FACTOR = 2  # peak_extra_bytes <= this * touched_row_bytes
LABEL = "10. embedding train step"


def run(build_dir: Path, repo: Path, python: str | None, peer_errors: dict, env: dict,
        quick: bool, timeout: float, run_json: Callable, log: Callable) -> dict:
    """Runs kiln_bench_embedding (an error entry if it is not built), then each available peer's
    embedding script. peer_errors: peer -> why it cannot run (not selected, missing). Returns
    {"kiln": kiln's JSON, "peers": {peer: JSON}}."""
    flags = ["--quick"] if quick else []
    program = build_dir / "bench" / PROGRAM
    if program.exists():
        log(f"{PROGRAM}{' --quick' if quick else ''}")
        kiln = run_json([str(program), "--json", *flags], env, timeout)
    else:
        kiln = {"error": f"not built: {program}"}
    if "error" in kiln:
        log(f"{PROGRAM} failed: {kiln['error']}")
    peers = {}
    for name, script in PEER_SCRIPTS.items():
        if name in peer_errors or python is None:
            peers[name] = {"error": peer_errors.get(name, "no peers venv")}
            continue
        log(f"{name} embedding{' --quick' if quick else ''}")
        peers[name] = run_json([python, str(repo / "bench" / "peers" / script), "--threads",
                                env.get("KILN_NUM_THREADS", "2"), *flags], env, timeout)
        if "error" in peers[name]:
            log(f"{name} embedding: n/a: {peers[name]['error']}")
        for error in peers[name].get("errors", []):
            log(f"{name} {error['workload']} {error['variant']}: {error['error']}")
    return {"kiln": kiln, "peers": peers}


def kiln_row(result: dict) -> dict:
    """kiln's embedding_train row ({} when kiln_bench_embedding failed or has none)."""
    rows = result.get("kiln", {}).get("rows", [])
    return next((r for r in rows if r.get("workload") == WORKLOAD), {})


def kiln_sizes(result: dict) -> tuple | None:
    """(rows, dim, batch) of kiln's run; None when its JSON does not say (it failed)."""
    kiln = result.get("kiln", {})
    return (kiln["vocab"], kiln["dim"], kiln["batch"]) if "vocab" in kiln else None


def shown_sizes(result: dict) -> tuple:
    """The sizes the table is about: kiln's, else the first peer row's, else the workload's."""
    rows = [r for data in result.get("peers", {}).values() for r in data.get("results", [])
            if r["workload"] == WORKLOAD and "rows" in r]
    return kiln_sizes(result) or ((rows[0]["rows"], rows[0]["dim"], rows[0]["batch"]) if rows
                                  else (ROWS, DIM, BATCH))


def peer_times(result: dict) -> tuple[dict, dict]:
    """variant -> median seconds, and variant (or peer) -> why it has none. A variant that ran
    other sizes than kiln's (a --quick mismatch) has a reason, not a time."""
    times, errors = {}, {}
    for peer, data in result.get("peers", {}).items():
        if "error" in data:
            errors[peer] = data["error"]
            continue
        for r in data.get("results", []):
            if r["workload"] != WORKLOAD:
                continue
            ran = (r.get("rows", ROWS), r.get("dim", DIM), r.get("batch", BATCH))
            if kiln_sizes(result) in (None, ran):
                times[r["variant"]] = r["median_s"]
            else:
                errors[r["variant"]] = ("not comparable: ran {:,} x {}, batch {}".format(*ran)
                                        + f", {_time(r['median_s'])}")
        for e in data.get("errors", []):
            if e["workload"] == WORKLOAD:
                errors[e["variant"]] = e["error"]
    return times, errors


def _time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _mib(count: float) -> str:
    return f"{count / (1 << 20):.2f} MiB"


def _ratio(ratio: float) -> str:
    """Two significant digits, no exponent (as bench/compare's kiln/peer column)."""
    digits = max(0, 1 - math.floor(math.log10(ratio))) if ratio > 0 else 2
    return f"{ratio:.{digits}f}"


def _factor(factor: float) -> str:
    """Three significant digits, no exponent: 8440x, 9.36x."""
    return f"{factor:.0f}x" if factor >= 100 else f"{factor:.3g}x"


def time_table(result: dict) -> list[list[str]]:
    """Rows [workload, kiln, peer, peer time, kiln/peer, kiln is], one per peer variant."""
    kiln = kiln_row(result)
    kiln_s = kiln.get("median_s")
    times, errors = peer_times(result)
    lines = []
    for i, variant in enumerate(PEER_VARIANTS):
        kiln_cell = "" if i else (_time(kiln_s) if kiln_s else "n/a")
        cells = [LABEL if i == 0 else "", kiln_cell, variant]
        peer_s = times.get(variant)
        if peer_s is None:
            why = errors.get(variant) or errors.get(OWNER[variant]) or "not measured"
            lines.append(cells + [f"n/a ({why})", "", ""])
            continue
        ratio = kiln_s / peer_s if kiln_s else None
        speed = "" if ratio is None else (f"{_factor(1 / ratio)} faster" if ratio <= 1
                                          else f"{_factor(ratio)} slower")
        lines.append(cells + [_time(peer_s), _ratio(ratio) if ratio else "n/a", speed])
    return lines


def memory_table(result: dict) -> list[list[str]]:
    """Rows [what, bytes, / touched rows] of kiln's memory figures ([] without them)."""
    kiln = kiln_row(result)
    touched = kiln.get("touched_row_bytes")
    if "peak_extra_bytes" not in kiln or not touched:
        return []
    items = [("step's peak above the live bytes", kiln["peak_extra_bytes"]),
             ("rows touched (table, m, v)", touched),
             (f"target: at most {MEMORY_FACTOR}x touched rows", MEMORY_FACTOR * touched),
             ("table (live)", kiln.get("table_bytes")),
             ("Adam's slots m, v (live)", kiln.get("slot_bytes"))]
    return [[what, _mib(count), f"{count / touched:.2f}"] for what, count in items
            if count is not None]


TIME_HEADER = ["workload", "kiln", "peer", "peer time", "kiln/peer", "kiln is"]
MEMORY_HEADER = ["kiln memory", "size", "/ touched rows"]


def _print(header: list[str], lines: list[list[str]], markdown: bool, left: set) -> None:
    """A table as text (aligned columns) or Markdown. A line whose fifth cell is empty holds a
    reason in its fourth ("n/a (why)"): as text, that reason ends the line unaligned."""
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "|".join("---" if i in left else "---:" for i in range(len(header))) + "|")
        for line in lines:
            print("| " + " | ".join(c.replace("|", "\\|") for c in line) + " |")
        return

    def reason_at(line):  # the index of the cell holding a reason, or None
        return 3 if len(line) > 4 and not line[4] else None

    widths = [max([len(header[i])] + [len(l[i]) for l in lines if reason_at(l) != i])
              for i in range(len(header))]
    print("  ".join(h.ljust(widths[i]) if i in left else h.rjust(widths[i])
                    for i, h in enumerate(header)))
    print("-" * (sum(widths) + 2 * (len(widths) - 1)))
    for line in lines:
        at = reason_at(line)
        cells = [c.ljust(widths[i]) if i in left else c.rjust(widths[i])
                 for i, c in enumerate(line[:at])]
        print("  ".join(cells + ([line[at]] if at is not None else [])).rstrip())


def print_tables(result: dict, markdown: bool) -> None:
    kiln = result.get("kiln", {})
    rows, dim, batch = shown_sizes(result)
    print(f"{rows:,} x {dim} f32 table, batch {batch} ids, pred = emb @ w [{dim}, 1], MSE, Adam "
          "1e-3; kiln/peer below 1: kiln is faster\n")
    _print(TIME_HEADER, time_table(result), markdown, {0, 2})
    if "error" in kiln:
        print(f"\n{PROGRAM}: n/a ({kiln['error']})")
    memory = memory_table(result)
    if memory:
        print()
        _print(MEMORY_HEADER, memory, markdown, {0})


def checks(result: dict) -> list[dict]:
    """Issue 21's targets, each held or not, with the figures that decide. Without kiln's row
    both are reported not held, with kiln's error."""
    kiln = kiln_row(result)
    if not kiln:
        why = result.get("kiln", {}).get("error", f"no {WORKLOAD} row")
        return [{"claim": f"{LABEL}: {PROGRAM} ran", "held": False, "figure": f"n/a: {why}"}]
    out = []
    times, _ = peer_times(result)
    kiln_s = kiln.get("median_s")
    if kiln_s:
        ratios = {v: s / kiln_s for v, s in times.items() if v in OWNER}  # peer / kiln
        missing = [v for v in PEER_VARIANTS if v not in ratios]
        required_missing = [v for v in missing if v not in OPTIONAL]
        figure = "peer/kiln " + (", ".join(f"{v} {_ratio(ratios[v])}" for v in PEER_VARIANTS
                                           if v in ratios) or "none measured")
        if missing:
            figure += f" (not measured: {', '.join(missing)})"
        out.append({"claim": f"{LABEL}: kiln at least {TIME_TARGET}x faster than each peer "
                             "variant",
                    "held": bool(ratios) and not required_missing
                    and all(r >= TIME_TARGET for r in ratios.values()),
                    "figure": figure})
    touched = kiln.get("touched_row_bytes")
    if "peak_extra_bytes" in kiln and touched:
        peak = kiln["peak_extra_bytes"]
        out.append({"claim": f"{LABEL}: peak memory above the live bytes at most "
                             f"{MEMORY_FACTOR}x the bytes of the rows it touches",
                    "held": peak <= MEMORY_FACTOR * touched,
                    "figure": f"{_mib(peak)} against {MEMORY_FACTOR} x {_mib(touched)} = "
                              f"{_mib(MEMORY_FACTOR * touched)} ({peak / touched:.2f}x the "
                              "touched rows)"})
    return out
