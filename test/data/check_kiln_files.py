#!/usr/bin/env python3
"""Checks that NumPy and the reference safetensors package read the files kiln wrote.

Usage: check_kiln_files.py <folder>, where test/test_io_interop.cpp wrote:
  kiln_<dtype>_<k>.npy, kiln_stored.npz, kiln_compressed.npz, kiln_all.safetensors
with the values of io_test::sample (test/io_test_support.hpp). Exits non-zero on a mismatch.
"""
import os
import sys

import ml_dtypes
import numpy as np
import safetensors
import safetensors.numpy

SHAPES = [(), (0,), (5,), (2, 3), (0, 4), (2, 0, 3), (2, 3, 4), (1, 2, 1, 2, 1, 2, 1, 2)]
DTYPES = ["f32", "f64", "i32", "i64", "bool", "i8", "u8", "f16", "bf16", "i16", "u16", "u32", "u64"]


def sample(dtype, shape):
    """The values of io_test::sample."""
    i = np.arange(int(np.prod(shape, dtype=np.int64)))
    if dtype == "f32":
        v = (i.astype(np.float32) * np.float32(0.5) - np.float32(3)).astype("<f4")
    elif dtype == "f64":
        v = i.astype(np.float64) * 0.25 - 1.0 / 3.0
    elif dtype == "i32":
        v = (i - 7).astype("<i4")
    elif dtype == "i64":
        v = ((i - 2) * 100000000000).astype("<i8")
    elif dtype == "i8":
        v = ((37 * i - 128) % 256).astype(np.uint8).view(np.int8)
    elif dtype == "u8":
        v = ((251 - 13 * i) % 256).astype(np.uint8)
    elif dtype == "f16":
        v = (i.astype(np.float32) * np.float32(0.375) - np.float32(2)).astype(np.float16)
    elif dtype == "bf16":
        v = ((i.astype(np.float32) - np.float32(7.3)) * np.float32(1000)).astype(ml_dtypes.bfloat16)
    elif dtype == "i16":
        v = ((4099 * i - 32768) % 65536).astype(np.uint16).view(np.int16)
    elif dtype == "u16":
        v = ((65535 - 2731 * i) % 65536).astype(np.uint16)
    elif dtype == "u32":
        v = ((4000000000 - 123456789 * i) % 2**32).astype(np.uint32)
    elif dtype == "u64":
        v = np.array([(2**64 - 1 - 1000000000007 * int(k)) % 2**64 for k in i], dtype=np.uint64)
    else:
        v = i % 3 == 0
    return v.reshape(shape)


def expected():
    return {f"{d}/{k}": sample(d, s) for d in DTYPES for k, s in enumerate(SHAPES)}


def same(name, got, want):
    if want.dtype == ml_dtypes.bfloat16 and got.dtype == np.dtype("V2"):
        got = got.view(ml_dtypes.bfloat16)  # NumPy reads ml_dtypes' bfloat16 .npy as 2-byte void
    if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
        raise SystemExit(f"{name}: got {got.dtype} {got.shape} {got!r}, want {want.dtype} "
                         f"{want.shape} {want!r}")


def main(folder):
    want = expected()
    for name, array in want.items():
        path = os.path.join(folder, "kiln_" + name.replace("/", "_") + ".npy")
        same(path, np.load(path, allow_pickle=False), array)
    for archive in ["kiln_stored.npz", "kiln_compressed.npz"]:
        with np.load(os.path.join(folder, archive), allow_pickle=False) as z:
            if sorted(z.files) != sorted(want):
                raise SystemExit(f"{archive}: members {sorted(z.files)}")
            for name, array in want.items():
                same(f"{archive}:{name}", z[name], array)
    path = os.path.join(folder, "kiln_all.safetensors")
    loaded = safetensors.numpy.load_file(path)
    if sorted(loaded) != sorted(want):
        raise SystemExit(f"{path}: tensors {sorted(loaded)}")
    for name, array in want.items():
        same(f"{path}:{name}", loaded[name], array)
    with safetensors.safe_open(path, framework="np") as f:
        if f.metadata() != {"format": "np"}:
            raise SystemExit(f"{path}: metadata {f.metadata()}")
    # Same layout as the reference writer: byte-for-byte equal files.
    reference = safetensors.numpy.save(want, metadata={"format": "np"})
    with open(path, "rb") as f:
        if f.read() != reference:
            raise SystemExit(f"{path}: differs from safetensors.numpy.save's bytes")
    print("numpy and safetensors read kiln's files")


if __name__ == "__main__":
    main(sys.argv[1])
