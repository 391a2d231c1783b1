#!/usr/bin/env bash
# Creates (once) a private Python environment with NumPy, safetensors, onnx, onnxruntime,
# tensorboard and TensorFlow (CPU), used to make the interop fixtures (test/data/make_fixtures.py), by the interop
# test that checks NumPy and safetensors read kiln's files, by the ONNX test
# (test/data/check_onnx.py: the onnx checker and onnxruntime on kiln's exported models) and by
# the summary test (test/data/check_tensorboard.py: TensorBoard's EventAccumulator on kiln's
# event files) and by the quantization test (test/data/check_fake_quant.py: TensorFlow's fake
# quantization ops on the inputs kiln quantized). The folder is $KILN_VENV, default .venv-kiln in the repo.
# Prints the environment's python path as the last line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${KILN_VENV:-$root/.venv-kiln}
python=${PYTHON:-python3}
if ! "$venv/bin/python" -c 'import numpy, safetensors, onnx, onnxruntime, tensorboard, tensorflow' >/dev/null 2>&1; then
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    'numpy>=1.21' 'safetensors>=0.4' 'onnx>=1.14' 'onnxruntime>=1.16' \
    'tensorboard>=2.14' 'tensorflow-cpu>=2.14' >&2
fi
echo "$venv/bin/python"
