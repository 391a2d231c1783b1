#!/usr/bin/env bash
# Creates (once) the private Python virtual environment that bench/compare runs the peer
# frameworks in, and installs each peer that is missing: PyTorch (the CPU-only build when its
# wheel index answers, else PyPI's), TensorFlow (CPU), JAX and numpy; and matplotlib, for
# bench/plot_scaling.py. Idempotent: a second run only checks that each one imports.
#
#   scripts/peers-env.sh            # create/complete the venv, print its python's path last
#   scripts/peers-env.sh --check    # install nothing; report what is there (exit 1 if a peer is missing)
#
# The venv lives outside the repository: $KILN_PEERS_VENV, else ~/.cache/kiln/peers-venv.
# Nothing in kiln itself uses Python; this is for the side-by-side benchmark only.
set -uo pipefail

venv=${KILN_PEERS_VENV:-$HOME/.cache/kiln/peers-venv}
python=${KILN_PEERS_PYTHON:-python3}
# The official CPU-only PyTorch wheels (no CUDA libraries); PyPI's torch is the fallback.
torch_cpu_index=https://download.pytorch.org/whl/cpu
check_only=0

case "${1:-}" in
  --check) check_only=1 ;;
  "") ;;
  -h | --help)
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "usage: $0 [--check]" >&2
    exit 2
    ;;
esac

log() { echo "peers-env: $*" >&2; }

if [ ! -x "$venv/bin/python" ]; then
  if [ $check_only -eq 1 ]; then
    log "no virtual environment at $venv"
    exit 1
  fi
  log "creating $venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv" || { log "could not create a venv with $python"; exit 1; }
  "$venv/bin/python" -m pip install -q --upgrade pip >&2 || log "pip upgrade failed (continuing)"
fi
vpy="$venv/bin/python"
pip() { "$vpy" -m pip "$@"; }

# One line per peer: "name version", or "name missing (why)"; one process imports them all.
probe() {
  TF_CPP_MIN_LOG_LEVEL=3 "$vpy" - 2>/dev/null <<'EOF'
import importlib
for name in ("numpy", "torch", "tensorflow", "jax", "matplotlib"):
    try:
        print(name, importlib.import_module(name).__version__, flush=True)
    except Exception as error:  # a missing or broken peer is reported, not fatal
        why = str(error).splitlines()[0] if str(error) else ""
        print(f"{name} missing ({type(error).__name__}: {why})", flush=True)
EOF
}
# The peers that probe output $1 does not show with a version (all of them if the probe crashed).
missing_in() {
  local name
  for name in numpy torch tensorflow jax matplotlib; do
    grep -qE "^$name [0-9]" <<<"$1" || echo "$name"
  done
}

report=$(probe)
mapfile -t missing < <(missing_in "$report")

if [ $check_only -eq 0 ] && [ ${#missing[@]} -gt 0 ]; then
  log "installing: ${missing[*]}"
  wants() { [[ " ${missing[*]} " == *" $1 "* ]]; }
  torch_installed=0
  # PyTorch first, from the CPU-only index when it answers (a short timeout, no retries).
  if wants torch; then
    pip_log=$(mktemp)
    if pip install -q --timeout 15 --retries 0 --index-url "$torch_cpu_index" torch >"$pip_log" 2>&1; then
      log "torch installed from the CPU-only wheel index"
      torch_installed=1
    else
      log "the CPU-only wheel index did not serve torch ($(grep -m1 -E 'ERROR|Error' "$pip_log" || echo 'no answer'))"
      log "installing torch from PyPI instead (its Linux wheel brings CUDA libraries, unused here)"
    fi
    rm -f "$pip_log"
  fi
  # Everything else in one resolver run, so the versions agree with each other (and with a torch
  # installed above). TensorFlow: the CPU-only package where it exists for this Python.
  specs=()
  wants numpy && specs+=(numpy)
  wants torch && [ $torch_installed -eq 0 ] && specs+=(torch)
  if wants tensorflow; then
    # `pip index versions` lists only releases with a wheel for this Python and platform.
    if pip index versions tensorflow-cpu >/dev/null 2>&1; then
      specs+=(tensorflow-cpu)
    else
      specs+=(tensorflow)
    fi
  fi
  wants jax && specs+=("jax[cpu]")
  wants matplotlib && specs+=(matplotlib)
  if [ ${#specs[@]} -gt 0 ] && ! pip install -q "${specs[@]}" >&2; then
    # One peer that cannot be installed must not keep the others out: try them one at a time.
    log "installing ${specs[*]} together failed; trying one at a time"
    for spec in "${specs[@]}"; do
      pip install -q "$spec" >&2 && continue
      if [ "$spec" = tensorflow-cpu ] && pip install -q tensorflow >&2; then continue; fi
      log "could not install $spec"
    done
  fi
  report=$(probe)
  mapfile -t missing < <(missing_in "$report")
fi

# Report: one line per peer with its version (or why it is missing), then the python to use.
sed 's/^/peers-env: /' <<<"$report" >&2
echo "$vpy"
[ ${#missing[@]} -eq 0 ]
