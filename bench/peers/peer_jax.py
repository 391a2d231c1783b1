#!/usr/bin/env python3
"""JAX side of bench/compare: kiln's workloads in eager JAX (op by op) and jax.jit (XLA),
every result waited for with block_until_ready. Prints JSON (see common.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

args = common.parse_args(__doc__)
common.limit_threads(args.threads)
common.limit_jax_threads(args.threads)

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

    def make():
        fn = jax.jit(body)
        return lambda: fn(params, xs).block_until_ready()

    report.first_and_cached(
        workload, "jax.jit", make,
        lambda out, fn: common.check_close(f"{workload} jax.jit", np.asarray(out), want))


# The RNN first, so the LSTM's first call is a new function's in a warmed-up process.
recurrent("rnn", rnn, 1, 11, common.reference_rnn)
recurrent("lstm", lstm, 4, 21, common.reference_lstm)


# 4. and 5. The train step of bench/bench_train.cpp: Keras-layout LSTMs as lax.scan over time,
# the input projection of all steps in one matmul (as Keras and kiln do), binary cross-entropy
# and Adam written out as Keras formulates them (optax is not in the venv), all in one jax.jit
# with the parameters and optimizer state donated (updated in place).
def lstm_layer(layer, xs, return_sequences):
    kernel, recurrent_kernel, bias = layer
    zs = jnp.swapaxes(xs @ kernel + bias, 0, 1)  # [time, batch, 4 units]
    zero = jnp.zeros((xs.shape[0], recurrent_kernel.shape[0]), xs.dtype)

    def cell(state, z):
        h, c = state
        i, f, g, o = jnp.split(z + h @ recurrent_kernel, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    (h, _), hs = jax.lax.scan(cell, (zero, zero), zs)
    return jnp.swapaxes(hs, 0, 1) if return_sequences else h


def train_loss(params, x, y):
    l1, l2, (kernel, bias) = params
    p = jax.nn.sigmoid(lstm_layer(l2, lstm_layer(l1, x, True), False) @ kernel + bias)
    p = jnp.clip(p, common.EPSILON, 1 - common.EPSILON)  # Keras's binary cross-entropy
    return -jnp.mean(y * jnp.log(p + common.EPSILON) + (1 - y) * jnp.log(1 - p + common.EPSILON))


def adam_train_step(params, m, v, t, x, y):
    loss, grads = jax.value_and_grad(train_loss)(params, x, y)
    t = t + 1
    m = jax.tree_util.tree_map(lambda m, g: m + (g - m) * (1 - common.BETA1), m, grads)
    v = jax.tree_util.tree_map(lambda v, g: v + (g * g - v) * (1 - common.BETA2), v, grads)
    rate = common.LEARNING_RATE * jnp.sqrt(1 - common.BETA2 ** t) / (1 - common.BETA1 ** t)
    params = jax.tree_util.tree_map(
        lambda p, m, v: p - rate * m / (jnp.sqrt(v) + common.EPSILON), params, m, v)
    return params, m, v, t, loss


def train_step():
    init = common.train_init(args)
    x, y = jax.device_put(init["x"]), jax.device_put(init["y"])

    def make():
        params = tuple(tuple(jnp.asarray(init[f"{layer}/{name}"]) for name in names)
                       for layer, names in (("l1", ("kernel", "recurrent_kernel", "bias")),
                                            ("l2", ("kernel", "recurrent_kernel", "bias")),
                                            ("out", ("kernel", "bias"))))
        def zeros():  # distinct buffers: donated arguments must not share one
            return jax.tree_util.tree_map(lambda p: jnp.zeros(p.shape, p.dtype), params)

        state = {"args": (params, zeros(), zeros(), jnp.zeros((), jnp.float32))}
        fn = jax.jit(adam_train_step, donate_argnums=(0, 1, 2, 3))

        def step():
            *state["args"], loss = fn(*state["args"], x, y)
            return loss.block_until_ready()
        return step

    report.first_and_cached("train_step", "jax.jit", make, common.train_check(init, "jax.jit"))


train_step()

report.emit()
