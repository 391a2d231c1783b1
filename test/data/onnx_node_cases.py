#!/usr/bin/env python3
"""Converts ONNX's own backend node tests into files kiln reads (issue 23's conformance test).

Usage: onnx_node_cases.py OUTDIR

Generates the node test cases with the `onnx` package (onnx.backend.test.case.node: the same
generators `backend-test-tools generate-data` runs; the wheel ships them but not their data),
keeps the single-node ones (the "_expanded" function bodies and other multi-node graphs are
dropped) and writes, for each case, its inputs and expected outputs as .npy files under
OUTDIR/<case>/ plus OUTDIR/manifest.json, a list of:

  {"name", "op_type", "domain", "opset", "rtol", "atol",
   "attributes": {name: value},       # int, float, string, list of them, or
                                      # {"tensor": "<case>/attr_<name>.npy"},
                                      # {"float": "inf" | "-inf" | "nan"} for non-finite floats,
                                      # {"unsupported": "<attribute type>"} (graphs, ...)
   "inputs": ["<case>/input_0.npy" | null (omitted optional input)],
   "outputs": ["<case>/output_0.npy" | null (omitted optional output)],
   "input_dtypes", "output_dtypes": [null | kiln dtype name],
                                      # for each file: null when the .npy has the tensor's dtype;
                                      # else the kiln dtype (an 8-, 4- or 2-bit one, which .npy
                                      # cannot name) and the file holds its carrier: the raw
                                      # bytes as u8 for 8-bit floats (kiln::bitcast), the exact
                                      # values as f32, i8 or u8 for the others (kiln::cast)
   "unsupported": null | "reason"}    # why kiln cannot read this case's tensors

A case whose tensors kiln cannot read (a dtype kiln lacks: strings, complex, float8e8m0, ...;
sequences, optionals) is still listed, with "unsupported" saying
why and no files for its tensors. The summary line on stderr gives the counts.
"""

import json
import math
import os
import sys
import warnings

import numpy as np

import ml_dtypes  # onnx's own dependency: its numpy_helper returns bfloat16 arrays of it

# NumPy dtypes kiln's load_npy reads as the same dtype (bfloat16 as ml_dtypes saves it, '<V2').
KILN_DTYPES = {
    np.dtype("float32"): "f32",
    np.dtype("float64"): "f64",
    np.dtype("int32"): "i32",
    np.dtype("int64"): "i64",
    np.dtype("bool"): "bool",
    np.dtype("int8"): "i8",
    np.dtype("uint8"): "u8",
    np.dtype("float16"): "f16",
    np.dtype(ml_dtypes.bfloat16): "bf16",
    np.dtype("int16"): "i16",
    np.dtype("uint16"): "u16",
    np.dtype("uint32"): "u32",
    np.dtype("uint64"): "u64",
}

# The dtypes .npy cannot name (ml_dtypes saves them all as 1-byte void): kiln dtype name and the
# carrier written instead ("bytes": the raw bytes as u8; otherwise a NumPy dtype holding the
# exact values).
NARROW_DTYPES = {
    np.dtype(ml_dtypes.float8_e4m3fn): ("f8e4m3fn", "bytes"),
    np.dtype(ml_dtypes.float8_e4m3fnuz): ("f8e4m3fnuz", "bytes"),
    np.dtype(ml_dtypes.float8_e5m2): ("f8e5m2", "bytes"),
    np.dtype(ml_dtypes.float8_e5m2fnuz): ("f8e5m2fnuz", "bytes"),
    np.dtype(ml_dtypes.float4_e2m1fn): ("f4e2m1fn", np.float32),
    np.dtype(ml_dtypes.int4): ("i4", np.int8),
    np.dtype(ml_dtypes.uint4): ("u4", np.uint8),
    np.dtype(ml_dtypes.int2): ("i2", np.int8),
    np.dtype(ml_dtypes.uint2): ("u2", np.uint8),
}
NARROW_ONNX_NAMES = {"float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz",
                     "float4e2m1", "i4", "u4", "i2", "u2"}

# ONNX tensor element types by number, for the reason strings of types NumPy cannot hold.
ONNX_TYPE_NAMES = {
    1: "f32", 2: "u8", 3: "i8", 4: "u16", 5: "i16", 6: "i32", 7: "i64", 8: "string",
    9: "bool", 10: "f16", 11: "f64", 12: "u32", 13: "u64", 14: "complex64", 15: "complex128",
    16: "bf16", 17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2",
    20: "float8e5m2fnuz", 21: "u4", 22: "i4", 23: "float4e2m1", 24: "float8e8m0", 25: "u2",
    26: "i2",
}


def dtype_reason(value, type_proto=None):
    """Why kiln cannot hold `value` (an input or output of a case), or None if it can."""
    import onnx

    if type_proto is not None and type_proto.HasField("tensor_type"):
        elem = type_proto.tensor_type.elem_type
        name = ONNX_TYPE_NAMES.get(elem, f"type {elem}")
        if name not in KILN_DTYPES.values() and name not in NARROW_ONNX_NAMES:
            return f"dtype {name}"
    if type_proto is not None and not type_proto.HasField("tensor_type"):
        return "non-tensor value (" + type_proto.WhichOneof("value") + ")"
    if isinstance(value, onnx.TensorProto):
        name = ONNX_TYPE_NAMES.get(value.data_type, f"type {value.data_type}")
        if name not in KILN_DTYPES.values() and name not in NARROW_ONNX_NAMES:
            return f"dtype {name}"
        return None
    if isinstance(value, (list, tuple)):
        return "sequence value"
    if value is None:
        return "optional value"
    if not isinstance(value, np.ndarray):
        value = np.asarray(value)
    if value.dtype not in KILN_DTYPES and value.dtype not in NARROW_DTYPES:
        kind = {"U": "string", "S": "string", "O": "string"}.get(value.dtype.kind)
        return "dtype " + (kind or NUMPY_NAMES.get(value.dtype.name, value.dtype.name))
    return None


NUMPY_NAMES = {"float16": "f16", "int16": "i16", "uint16": "u16", "uint32": "u32",
               "uint64": "u64", "complex64": "complex64", "complex128": "complex128"}


def as_array(value):
    import onnx
    from onnx import numpy_helper

    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    return np.asarray(value)


def save_tensor(path, array):
    """Saves array as .npy; returns None, or the kiln dtype name when a carrier was written."""
    array = np.array(array, order="C")  # np.array keeps rank 0
    narrow = NARROW_DTYPES.get(array.dtype)
    if narrow is None:
        np.save(path, array)
        return None
    name, carrier = narrow
    np.save(path, array.view(np.uint8) if carrier == "bytes" else array.astype(carrier))
    return name


def float_value(x):
    x = float(x)
    if math.isfinite(x):
        return x
    return {"float": "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}


def attribute_value(attr, case_dir, rel_dir):
    from onnx import AttributeProto, numpy_helper

    t = attr.type
    if t == AttributeProto.INT:
        return int(attr.i)
    if t == AttributeProto.FLOAT:
        return float_value(attr.f)
    if t == AttributeProto.STRING:
        return attr.s.decode("utf-8", errors="replace")
    if t == AttributeProto.INTS:
        return [int(v) for v in attr.ints]
    if t == AttributeProto.FLOATS:
        return [float_value(v) for v in attr.floats]
    if t == AttributeProto.STRINGS:
        return [s.decode("utf-8", errors="replace") for s in attr.strings]
    if t == AttributeProto.TENSOR:
        array = numpy_helper.to_array(attr.t)
        reason = dtype_reason(attr.t)
        if reason:
            return {"unsupported": f"tensor attribute of {reason}"}
        file = f"attr_{attr.name}.npy"
        if save_tensor(os.path.join(case_dir, file), array) is not None:
            return {"unsupported": "tensor attribute of an 8-, 4- or 2-bit dtype"}
        return {"tensor": f"{rel_dir}/{file}"}
    return {"unsupported": AttributeProto.AttributeType.Name(t).lower()}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)

    warnings.simplefilter("ignore")
    np.seterr(all="ignore")
    import onnx
    from onnx.backend.test.case import node as node_cases

    all_cases = node_cases.collect_testcases()
    manifest = []
    multi_node = 0
    for case in all_cases:
        graph = case.model.graph
        if len(graph.node) != 1:
            multi_node += 1
            continue
        node = graph.node[0]
        domain = node.domain or "ai.onnx"
        opset = next(
            (o.version for o in case.model.opset_import if (o.domain or "ai.onnx") == domain),
            None,
        )
        rel_dir = case.name
        case_dir = os.path.join(out_dir, rel_dir)
        os.makedirs(case_dir, exist_ok=True)

        inputs_data, outputs_data = case.data_sets[0]
        input_types = {vi.name: vi.type for vi in graph.input}
        output_types = {vi.name: vi.type for vi in graph.output}
        reasons = []

        def write(values, names, types, prefix, dtypes):
            files = []
            present = iter(values)
            for i, name in enumerate(names):
                if name == "":
                    files.append(None)
                    dtypes.append(None)
                    continue
                value = next(present, None)
                reason = dtype_reason(value, types.get(name))
                if reason:
                    reasons.append(f"{prefix} {i}: {reason}")
                    files.append(None)
                    dtypes.append(None)
                    continue
                file = f"{prefix}_{i}.npy"
                dtypes.append(save_tensor(os.path.join(case_dir, file), as_array(value)))
                files.append(f"{rel_dir}/{file}")
            return files

        input_dtypes, output_dtypes = [], []
        inputs = write(inputs_data, list(node.input), input_types, "input", input_dtypes)
        outputs = write(outputs_data, list(node.output), output_types, "output", output_dtypes)
        # Trailing omitted optional inputs/outputs are the same as absent ones.
        while inputs and inputs[-1] is None and node.input[len(inputs) - 1] == "":
            inputs.pop()
            input_dtypes.pop()
        while outputs and outputs[-1] is None and node.output[len(outputs) - 1] == "":
            outputs.pop()
            output_dtypes.pop()

        attributes = {a.name: attribute_value(a, case_dir, rel_dir) for a in node.attribute}
        manifest.append(
            {
                "name": case.name,
                "op_type": node.op_type,
                "domain": domain,
                "opset": opset,
                "rtol": case.rtol,
                "atol": case.atol,
                "attributes": attributes,
                "inputs": inputs,
                "outputs": outputs,
                "input_dtypes": input_dtypes,
                "output_dtypes": output_dtypes,
                "unsupported": "; ".join(reasons) if reasons else None,
            }
        )

    manifest.sort(key=lambda c: c["name"])
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    readable = sum(1 for c in manifest if c["unsupported"] is None)
    print(
        f"onnx {onnx.__version__}: {len(all_cases)} node cases, {len(manifest)} single-node "
        f"({multi_node} multi-node dropped), {readable} with every tensor in a kiln dtype",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
