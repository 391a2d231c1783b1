#!/usr/bin/env bash
# Creates (once) a private Python environment with NumPy and safetensors, used to make the
# interop fixtures (test/data/make_fixtures.py) and by the interop test that checks NumPy and
# safetensors read kiln's files. The folder is $KILN_VENV, default .venv-kiln in the repo.
# Prints the environment's python path as the last line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${KILN_VENV:-$root/.venv-kiln}
python=${PYTHON:-python3}
if ! "$venv/bin/python" -c 'import numpy, safetensors' >/dev/null 2>&1; then
  "$python" -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    'numpy>=1.21' 'safetensors>=0.4' >&2
fi
echo "$venv/bin/python"
