#!/usr/bin/env python3
"""Checks kiln's ONNX models with the real tools: the onnx package's checker (full check, with
shape inference) and onnxruntime, whose outputs must equal kiln's within 1e-5.

Usage: check_onnx.py <folder>, where test/test_onnx.cpp wrote manifest.json: a list of
{"model": "x.onnx", "runs": [{"inputs": ["a.npy", ...], "outputs": ["b.npy", ...]}]}.
Exits non-zero on any failure.
"""
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime

TOLERANCE = 1e-5


def main(folder):
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    failures = 0
    for entry in manifest:
        path = os.path.join(folder, entry["model"])
        model = onnx.load(path)
        onnx.checker.check_model(model, full_check=True)
        assert model.opset_import[0].version == 17, model.opset_import
        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        for run in entry["runs"]:
            feeds = {n: np.load(os.path.join(folder, p)) for n, p in zip(names, run["inputs"])}
            got = session.run(None, feeds)
            for k, (out, want_path) in enumerate(zip(got, run["outputs"])):
                want = np.load(os.path.join(folder, want_path))
                diff = float(np.max(np.abs(out.astype(np.float64) - want))) if want.size else 0.0
                ok = out.dtype == want.dtype and out.shape == want.shape and diff <= TOLERANCE
                print(f"{entry['model']} {run['inputs'][0]} output {k}: {out.dtype} {out.shape}, "
                      f"max |onnxruntime - kiln| = {diff:.2e} {'ok' if ok else 'FAILED'}")
                failures += 0 if ok else 1
    print(f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}: "
          f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
