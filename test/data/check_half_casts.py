#!/usr/bin/env python3
"""Checks kiln's conversions to f16 and bf16 against NumPy's and ml_dtypes'.

Usage: check_half_casts.py <folder>, where test/test_dtypes.cpp wrote source_f32.npy,
source_f64.npy and source_i64.npy, and kiln's casts of each to f16 and bf16
(<source>_to_f16.npy, <source>_to_bf16.npy; bf16 as 2-byte void, as ml_dtypes saves it).
Every result must have the same bits as NumPy's astype (which rounds f64 and i64 to f16 once),
NaN for NaN. Exits non-zero otherwise.
"""
import os
import sys

import ml_dtypes
import numpy as np


def check(folder, source, target, dtype):
    x = np.load(os.path.join(folder, f"source_{source}.npy"))
    got = np.load(os.path.join(folder, f"{source}_to_{target}.npy")).view(np.uint16)
    want = x.astype(dtype).view(np.uint16)
    got_nan = np.isnan(got.view(dtype).astype(np.float32))
    want_nan = np.isnan(want.view(dtype).astype(np.float32))
    bad = np.flatnonzero((got != want) & ~(got_nan & want_nan))
    if got_nan.tolist() != want_nan.tolist() or bad.size:
        i = bad[0] if bad.size else int(np.flatnonzero(got_nan != want_nan)[0])
        raise SystemExit(f"{source} -> {target}: element {i} = {x[i]!r} gave bits "
                         f"{got[i]:#06x}, NumPy gives {want[i]:#06x} ({bad.size} differ)")
    print(f"{source} -> {target}: {x.size} values agree with NumPy")


def main(folder):
    for source in ["f32", "f64", "i64"]:
        check(folder, source, "f16", np.float16)
    # ml_dtypes converts f64 and i64 to bfloat16 through f32, rounding twice, so only f32 is
    # compared here (test_dtypes.cpp checks single rounding from f64 and i64 on known values).
    check(folder, "f32", "bf16", ml_dtypes.bfloat16)


if __name__ == "__main__":
    main(sys.argv[1])
