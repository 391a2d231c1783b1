#!/usr/bin/env python3
"""JAX side of bench/compare: kiln's workloads in eager JAX (op by op) and jax.jit (XLA),
every result waited for with block_until_ready. Prints JSON (see common.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

args = common.parse_args(__doc__)
common.limit_threads(args.threads)
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# XLA's CPU thread pool (Eigen) size; the machine's core count is the default otherwise.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           f" --xla_cpu_multi_thread_eigen=true"
                           f" intra_op_parallelism_threads={args.threads}").strip()

import numpy as np  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

report = common.Report("jax", args)
report.info = {"version": jax.__version__, "xla_flags": os.environ["XLA_FLAGS"],
               "devices": [str(d) for d in jax.devices()],
               "variants": {"JAX eager": "op by op, block_until_ready",
                            "jax.jit": "XLA CPU, weights passed as arguments"}}
plan = report.plan


# 1. Tiny eager op: a 4-element f32 add, waited for.
def tiny_add():
    a = jnp.array([1.0, 2.0, 3.0, 4.0], jnp.float32)
    b = jnp.array([0.5, 0.5, 0.5, 0.5], jnp.float32)
    common.check_close("add", np.asarray(jnp.add(a, b)), [1.5, 2.5, 3.5, 4.5], 0)
    report.add("add4", "JAX eager",
               common.measure(plan, lambda: jnp.add(a, b).block_until_ready()))


report.run("add4", "JAX eager", tiny_add)


# 2. tanh(a*b+c)*0.5 over 4M floats under jax.jit.
def chain():
    a, b, c = (jax.device_put(x) for x in common.chain_inputs())
    fn = jax.jit(lambda x, y, z: jnp.tanh(x * y + z) * 0.5)
    common.check_chain(float(fn(a, b, c)[-1]))
    timing = common.measure(plan, lambda: fn(a, b, c).block_until_ready())
    report.add("chain", "jax.jit", timing, gbs=common.CHAIN_BYTES / timing["median_s"] * 1e-9)


def copy():
    src = np.ones(common.CHAIN_N, np.float32)
    dst = np.empty_like(src)
    timing = common.measure(plan, lambda: np.copyto(dst, src))
    report.add("copy", "numpy copyto", timing, gbs=common.COPY_BYTES / timing["median_s"] * 1e-9)


report.run("chain", "jax.jit", chain)
report.run("copy", "numpy copyto", copy)


# 3. Unrolled 5-step RNN and LSTM (batch 32, input 10, hidden 20), the equations of
# bench/bench_function.cpp; the weights are arguments of the jitted function.
def rnn(params, xs):
    w, u, b = params
    h = jnp.zeros((common.BATCH, common.HIDDEN), jnp.float32)
    for t in range(common.STEPS):
        h = jnp.tanh(xs[:, t] @ w + h @ u + b)
    return h


def lstm(params, xs):
    w, u, b = params
    h = jnp.zeros((common.BATCH, common.HIDDEN), jnp.float32)
    c = jnp.zeros((common.BATCH, common.HIDDEN), jnp.float32)
    for t in range(common.STEPS):
        z = jnp.split(xs[:, t] @ w + h @ u + b, 4, axis=1)
        i, f, g, o = jax.nn.sigmoid(z[0]), jax.nn.sigmoid(z[1]), jnp.tanh(z[2]), jax.nn.sigmoid(z[3])
        c = f * c + i * g
        h = o * jnp.tanh(c)
    return h


xs_np = common.inputs()
xs = jax.device_put(xs_np)


def recurrent(workload, body, gates, seed, reference):
    w_np, u_np, b_np = common.weights(gates, seed)
    params = tuple(jax.device_put(v) for v in (w_np, u_np, b_np))
    want = reference(w_np, u_np, b_np, xs_np)

    def run_variant():
        holder = {}

        def first():
            holder["fn"] = jax.jit(body)
            holder["out"] = holder["fn"](params, xs).block_until_ready()

        first_call = common.time_once(first)
        fn = holder["fn"]
        common.check_close(f"{workload} jax.jit", np.asarray(holder["out"]), want)
        report.add(f"{workload}_first_call", "jax.jit",
                   {"median_s": first_call, "p10_s": first_call, "p90_s": first_call,
                    "calls_per_sample": 1, "samples": 1})
        report.add(workload, "jax.jit",
                   common.measure(plan, lambda: fn(params, xs).block_until_ready()))

    report.run(workload, "jax.jit", run_variant)


# The RNN first, so the LSTM's first call is a new function's in a warmed-up process.
recurrent("rnn", rnn, 1, 11, common.reference_rnn)
recurrent("lstm", lstm, 4, 21, common.reference_lstm)

report.emit()
