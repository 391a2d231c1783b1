#!/usr/bin/env python3
"""Writes the interop fixtures that test/test_io_interop.cpp loads.

Run with the private environment (scripts/python-env.sh makes it):
    $(bash scripts/python-env.sh) test/data/make_fixtures.py test/data
Every value is derived from arange so the C++ test can hard-code it.
"""
import io
import os
import sys
import zipfile

import numpy as np
import safetensors
import safetensors.numpy


def npy_bytes(array, version=None):
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, version=version, allow_pickle=False)
    return buffer.getvalue()


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def spec(dtype, shape, array):
    """A raw tensor for safetensors.serialize_file (API of safetensors >= 0.6 or older)."""
    if hasattr(safetensors, "TensorSpec"):
        return safetensors.TensorSpec(dtype=dtype, shape=shape, data_ptr=array.ctypes.data,
                                      data_len=array.nbytes)
    return {"dtype": dtype, "shape": shape, "data": array.tobytes()}


def main(out):
    os.makedirs(out, exist_ok=True)
    arrays = {
        "f32": np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5,   # [-2.5 .. 2.5]
        "f64": np.arange(4, dtype=np.float64) * 0.25,                # [0, .25, .5, .75]
        "i32": np.arange(-3, 3, dtype=np.int32).reshape(3, 2),       # [-3 .. 2]
        "i64": np.arange(3, dtype=np.int64) * 10**12,                # [0, 1e12, 2e12]
        "bool": np.arange(5) % 2 == 0,                               # [T F T F T]
        "scalar": np.array(3.5, dtype=np.float32),                   # rank 0
        "empty": np.zeros((0, 3), dtype=np.float64),                 # zero-size
    }
    for name, a in arrays.items():
        np.save(os.path.join(out, f"np_{name}.npy"), a)
    # Variants NumPy can write: half, big-endian, Fortran order, format versions 2.0 and 3.0.
    np.save(os.path.join(out, "np_f16.npy"),
            np.array([0.5, -2.0, 65504.0, 2.0**-24, np.inf], dtype=np.float16))
    np.save(os.path.join(out, "np_f32_big_endian.npy"),
            (np.arange(4) + 0.5).astype(">f4"))                      # [.5 1.5 2.5 3.5]
    np.save(os.path.join(out, "np_i64_big_endian.npy"), (np.arange(3) - 1).astype(">i8"))
    np.save(os.path.join(out, "np_f64_fortran.npy"),
            np.asfortranarray(np.arange(24, dtype=np.float64).reshape(2, 3, 4)))
    write(os.path.join(out, "np_i32_v2.npy"), npy_bytes(np.arange(4, dtype=np.int32), (2, 0)))
    write(os.path.join(out, "np_f32_v3.npy"), npy_bytes(np.arange(3, dtype=np.float32), (3, 0)))

    # One archive mixing stored and deflated members, plus NumPy's own savez variants.
    with zipfile.ZipFile(os.path.join(out, "np_mixed.npz"), "w") as z:
        z.writestr(zipfile.ZipInfo("stored.npy", (1980, 1, 1, 0, 0, 0)),
                   npy_bytes(np.arange(6, dtype=np.float32).reshape(2, 3)),
                   compress_type=zipfile.ZIP_STORED)
        z.writestr(zipfile.ZipInfo("deflated.npy", (1980, 1, 1, 0, 0, 0)),
                   npy_bytes(np.arange(100, dtype=np.int64)),
                   compress_type=zipfile.ZIP_DEFLATED)
        z.writestr(zipfile.ZipInfo("layer1/kernel.npy", (1980, 1, 1, 0, 0, 0)),
                   npy_bytes(np.arange(4, dtype=np.float64).reshape(2, 2)),
                   compress_type=zipfile.ZIP_DEFLATED)
        z.writestr(zipfile.ZipInfo("fortran.npy", (1980, 1, 1, 0, 0, 0)),
                   npy_bytes(np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3))),
                   compress_type=zipfile.ZIP_DEFLATED)
        z.writestr(zipfile.ZipInfo("half.npy", (1980, 1, 1, 0, 0, 0)),
                   npy_bytes(np.array([1.5, -0.25], dtype=">f2")),
                   compress_type=zipfile.ZIP_STORED)
    np.savez(os.path.join(out, "np_savez.npz"), a=arrays["f32"], b=arrays["bool"])
    np.savez_compressed(os.path.join(out, "np_savez_compressed.npz"), a=arrays["f32"],
                        c=arrays["i64"], s=arrays["scalar"])

    # safetensors with metadata, every kiln dtype, and F16/BF16 tensors that load as f32.
    safetensors.numpy.save_file(
        {k: v for k, v in arrays.items()},
        os.path.join(out, "st_all.safetensors"),
        metadata={"format": "np", "source": "make_fixtures.py"})
    half = np.array([1.0, -0.5, 65504.0, 2.0**-24, -np.inf, 0.0], dtype=np.float16).reshape(2, 3)
    # bfloat16: the upper 16 bits of these float32 values (exact in bf16).
    bf16_values = np.array([1.0, -3.5, 0.15625, 256.0], dtype=np.float32)
    bf16 = (bf16_values.view(np.uint32) >> 16).astype(np.uint16)
    weights = np.arange(4, dtype=np.float32)
    safetensors.serialize_file(
        {"half": spec("float16", half.shape, half), "brain": spec("bfloat16", (4,), bf16),
         "weights": spec("float32", (4,), weights)},
        os.path.join(out, "st_half.safetensors"),
        metadata={"dtype_note": "half and bfloat16"})


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
