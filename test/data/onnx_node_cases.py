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
   "unsupported": null | "reason"}    # why kiln cannot read this case's tensors

A case whose tensors kiln cannot read (a dtype kiln lacks: strings, complex, float8, 4-bit and
2-bit integers, ...; sequences, optionals) is still listed, with "unsupported" saying
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
        if name not in KILN_DTYPES.values():
            return f"dtype {name}"
    if type_proto is not None and not type_proto.HasField("tensor_type"):
        return "non-tensor value (" + type_proto.WhichOneof("value") + ")"
    if isinstance(value, onnx.TensorProto):
        name = ONNX_TYPE_NAMES.get(value.data_type, f"type {value.data_type}")
        if name not in KILN_DTYPES.values():
            return f"dtype {name}"
        return None
    if isinstance(value, (list, tuple)):
        return "sequence value"
    if value is None:
        return "optional value"
    if not isinstance(value, np.ndarray):
        value = np.asarray(value)
    if value.dtype not in KILN_DTYPES:
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
        np.save(os.path.join(case_dir, file), np.array(array, order="C"))
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

        def write(values, names, types, prefix):
            files = []
            present = iter(values)
            for i, name in enumerate(names):
                if name == "":
                    files.append(None)
                    continue
                value = next(present, None)
                reason = dtype_reason(value, types.get(name))
                if reason:
                    reasons.append(f"{prefix} {i}: {reason}")
                    files.append(None)
                    continue
                file = f"{prefix}_{i}.npy"
                # np.array keeps rank 0 (np.ascontiguousarray would make it 1-D).
                np.save(os.path.join(case_dir, file), np.array(as_array(value), order="C"))
                files.append(f"{rel_dir}/{file}")
            return files

        inputs = write(inputs_data, list(node.input), input_types, "input")
        outputs = write(outputs_data, list(node.output), output_types, "output")
        # Trailing omitted optional inputs/outputs are the same as absent ones.
        while inputs and inputs[-1] is None and node.input[len(inputs) - 1] == "":
            inputs.pop()
        while outputs and outputs[-1] is None and node.output[len(outputs) - 1] == "":
            outputs.pop()

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
