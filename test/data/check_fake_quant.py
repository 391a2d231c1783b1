"""TensorFlow's fake quantization on the inputs kiln quantized (test_quantization.cpp).

Usage: check_fake_quant.py FOLDER. FOLDER holds manifest.json (a list of cases: kind "args",
"vars" or "per_channel", num_bits, narrow_range, and min/max for "args") and, per case i,
cases.npz arrays i_x, i_g (the output gradient), i_y, i_dx (kiln's output and input gradient)
and, for the vars forms, i_min, i_max, i_dmin, i_dmax. For each case this computes
tf.quantization.fake_quant_with_min_max_* and its gradients with tf.GradientTape and compares:
the input gradients exactly (straight copies of the output gradient or zeros); outputs to a few
float roundings of the range's magnitude (TensorFlow's CPU kernel evaluates level * scale +
nudged_min with a fused multiply-add where its build has one, kiln with a multiply and an add:
the same grid level, up to a few ulps apart), far below one grid step; the range gradients
(sums) to a relative 1e-5. NaN matches NaN (an empty range). Prints one line per case; exits
1 on any difference.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

EPS = float(np.finfo(np.float32).eps)


def compare(name, got, want, atol, rtol):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return f"{name}: shape {got.shape}, TensorFlow {want.shape}"
    close = np.isclose(got.ravel(), want.ravel(), rtol=rtol, atol=atol, equal_nan=True)
    if atol == 0 and rtol == 0:
        close = (got.ravel() == want.ravel()) | (np.isnan(got.ravel()) & np.isnan(want.ravel()))
    bad = np.flatnonzero(~close)
    if bad.size:
        i = bad[0]
        return (f"{name}: {bad.size} of {got.size} differ, first at {i}: kiln "
                f"{got.ravel()[i]!r}, TensorFlow {want.ravel()[i]!r}")
    return None


def check_case(i, case, arrays):
    x = tf.constant(arrays[f"{i}_x"])
    g = tf.constant(arrays[f"{i}_g"])
    opts = {"num_bits": case["num_bits"], "narrow_range": case["narrow_range"]}
    problems = []
    if case["kind"] == "args":
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.quantization.fake_quant_with_min_max_args(x, min=case["min"], max=case["max"],
                                                             **opts)
        dx = tape.gradient(y, x, output_gradients=g)
        magnitude = max(abs(case["min"]), abs(case["max"]), 1.0)
        results = [("y", y, 8 * EPS * magnitude, 0), ("dx", dx, 0, 0)]
    else:
        lo = tf.constant(arrays[f"{i}_min"])
        hi = tf.constant(arrays[f"{i}_max"])
        op = (tf.quantization.fake_quant_with_min_max_vars if case["kind"] == "vars"
              else tf.quantization.fake_quant_with_min_max_vars_per_channel)
        with tf.GradientTape() as tape:
            tape.watch([x, lo, hi])
            y = op(x, lo, hi, **opts)
        dx, dmin, dmax = tape.gradient(y, [x, lo, hi], output_gradients=g)
        magnitude = max(np.abs(arrays[f"{i}_min"]).max(), np.abs(arrays[f"{i}_max"]).max(), 1.0)
        results = [("y", y, 8 * EPS * magnitude, 0), ("dx", dx, 0, 0),
                   ("dmin", dmin, 1e-6, 1e-5), ("dmax", dmax, 1e-6, 1e-5)]
    for name, want, atol, rtol in results:
        problem = compare(name, arrays[f"{i}_{name}"], want.numpy(), atol, rtol)
        if problem:
            problems.append(problem)
    return problems


def main():
    folder = sys.argv[1]
    with open(os.path.join(folder, "manifest.json")) as f:
        cases = json.load(f)
    arrays = np.load(os.path.join(folder, "cases.npz"))
    failed = 0
    for i, case in enumerate(cases):
        problems = check_case(i, case, arrays)
        label = (f"case {i}: {case['kind']} num_bits={case['num_bits']} "
                 f"narrow_range={case['narrow_range']}")
        if problems:
            failed += 1
            print(f"{label}: DIFFERS: " + "; ".join(problems))
        else:
            print(f"{label}: matches TensorFlow {tf.__version__}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
