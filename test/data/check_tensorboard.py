#!/usr/bin/env python3
"""Reads kiln's TensorBoard event files with TensorBoard's own EventAccumulator and compares what
it finds with what kiln wrote (expected.json, written by test_summary.cpp).

Usage: check_tensorboard.py DIR        (DIR/run holds the event file, DIR/expected.json the
                                        values: test_summary.cpp)
       check_tensorboard.py --fit DIR  (DIR is the TensorBoard callback's log_dir, with train/
                                        and validation/ runs: test_callbacks.cpp)
Exits 1 with a message per difference.
"""
import json
import math
import pathlib
import sys

from tensorboard.backend.event_processing import event_accumulator


def load(folder: pathlib.Path):
    acc = event_accumulator.EventAccumulator(
        str(folder),
        size_guidance={event_accumulator.SCALARS: 0, event_accumulator.HISTOGRAMS: 0,
                       event_accumulator.IMAGES: 0, event_accumulator.TENSORS: 0})
    acc.Reload()
    return acc


def check_fit(root: pathlib.Path) -> int:
    """The runs of a fit with the TensorBoard callback against the history kiln returned."""
    expected = json.loads((root / "expected.json").read_text())
    problems = []
    for run, want in expected["runs"].items():
        acc = load(root / run)
        tags = acc.Tags()
        for tag, points in want.get("scalars", {}).items():
            if tag not in tags["scalars"]:
                problems.append(f"{run}: scalar {tag} missing: {tags['scalars']}")
                continue
            got = [[e.step, e.value] for e in acc.Scalars(tag)]
            wanted = [[s, v] for s, v in points if not math.isnan(v)]
            if got != wanted:
                problems.append(f"{run}/{tag}: got {got}, expected {wanted}")
        for tag, steps in want.get("batch_steps", {}).items():
            got = [e.step for e in acc.Scalars(tag)] if tag in tags["scalars"] else []
            if got != steps:
                problems.append(f"{run}/{tag}: steps {got}, expected {steps}")
        for tag in want.get("histograms", []):
            if tag not in tags["histograms"]:
                problems.append(f"{run}: histogram {tag} missing: {tags['histograms']}")
                continue
            steps = [e.step for e in acc.Histograms(tag)]
            if steps != want["histogram_steps"]:
                problems.append(f"{run}/{tag}: histogram steps {steps}")
        if bool(tags["graph"]) != want.get("graph", False):
            problems.append(f"{run}: graph present {tags['graph']}, expected {want.get('graph')}")
        elif tags["graph"] and len(acc.Graph().node) == 0:
            problems.append(f"{run}: the graph has no nodes")
    for p in problems:
        print("check_tensorboard:", p)
    if not problems:
        print(f"check_tensorboard: ok (fit runs {', '.join(expected['runs'])})")
    return 1 if problems else 0


def main(root: pathlib.Path) -> int:
    expected = json.loads((root / "expected.json").read_text())
    acc = event_accumulator.EventAccumulator(
        str(root / "run"),
        size_guidance={event_accumulator.SCALARS: 0, event_accumulator.HISTOGRAMS: 0,
                       event_accumulator.IMAGES: 0, event_accumulator.TENSORS: 0})
    acc.Reload()
    problems = []

    def check(ok, message):
        if not ok:
            problems.append(message)

    tags = acc.Tags()
    for tag, points in expected["scalars"].items():
        check(tag in tags["scalars"], f"scalar tag {tag} missing: {tags['scalars']}")
        if tag not in tags["scalars"]:
            continue
        got = [(e.step, e.value) for e in acc.Scalars(tag)]
        want = [(s, v) for s, v in points]
        check(len(got) == len(want), f"{tag}: {len(got)} points, expected {len(want)}")
        for (gs, gv), (ws, wv) in zip(got, want):
            check(gs == ws and gv == wv, f"{tag}: got step {gs} value {gv}, expected {ws} {wv}")

    h = expected["histogram"]
    check(h["tag"] in tags["histograms"], f"histogram {h['tag']} missing: {tags['histograms']}")
    if h["tag"] in tags["histograms"]:
        events = acc.Histograms(h["tag"])
        check(len(events) == 1, f"{len(events)} histogram events")
        e = events[0]
        v = e.histogram_value
        check(e.step == h["step"], f"histogram step {e.step}")
        for key in ("min", "max", "num", "sum"):
            check(math.isclose(getattr(v, key), h[key], rel_tol=1e-12),
                  f"histogram {key}: {getattr(v, key)} vs {h[key]}")
        check(list(v.bucket_limit) == h["limits"], "histogram bucket limits differ")
        check(list(v.bucket) == h["counts"], "histogram bucket counts differ")
        check(sum(v.bucket) == h["num"], "histogram counts do not add up")

    t = expected["text"]
    check(t["tag"] in tags["tensors"], f"text {t['tag']} missing: {tags['tensors']}")
    if t["tag"] in tags["tensors"]:
        e = acc.Tensors(t["tag"])[0]
        check(e.step == t["step"], f"text step {e.step}")
        check(list(e.tensor_proto.string_val) == [t["value"].encode()],
              f"text value {e.tensor_proto.string_val}")
        plugin = acc.SummaryMetadata(t["tag"]).plugin_data.plugin_name
        check(plugin == "text", f"text plugin {plugin}")

    i = expected["image"]
    check(i["tag"] in tags["images"], f"image {i['tag']} missing: {tags['images']}")
    if i["tag"] in tags["images"]:
        e = acc.Images(i["tag"])[0]
        check((e.step, e.height, e.width) == (i["step"], i["height"], i["width"]),
              f"image step/size {e.step} {e.height}x{e.width}")
        check(e.encoded_image_string.startswith(b"\x89PNG\r\n\x1a\n"), "image is not a PNG")

    check(tags["graph"], "no graph")
    if tags["graph"]:
        graph = acc.Graph()
        check(len(graph.node) == expected["graph_nodes"],
              f"graph has {len(graph.node)} nodes, kiln wrote {expected['graph_nodes']}")
        names = {n.name for n in graph.node}
        check(len(names) == len(graph.node), "graph node names are not unique")
        for name in expected["graph_node_names"]:
            check(name in names, f"graph node {name} missing")
        for n in graph.node:
            for inp in n.input:
                check(inp in names, f"node {n.name} reads {inp}, which is not a node")
            for shape in n.attr["_output_shapes"].list.shape:
                check(all(d.size >= -1 for d in shape.dim), f"node {n.name} has shape {shape}")
        prefix = expected["graph_module"] + "/"
        grouped = [n.name for n in graph.node
                   if n.name.startswith(prefix) and n.op not in ("ReadVariable", "Assign")]
        check(grouped, f"no op grouped under {prefix}: {sorted(names)}")
        dynamic = [n.name for n in graph.node if n.op == "Placeholder"
                   and n.attr["_output_shapes"].list.shape[0].dim[0].size == -1]
        check(dynamic, "the dynamic batch dim of the inputs is not -1")

    for p in problems:
        print("check_tensorboard:", p)
    if not problems:
        print(f"check_tensorboard: ok ({sum(len(v) for v in tags.values() if isinstance(v, list))} "
              f"tags, graph of {expected['graph_nodes']} nodes)")
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--fit":
        sys.exit(check_fit(pathlib.Path(sys.argv[2])))
    sys.exit(main(pathlib.Path(sys.argv[1])))
