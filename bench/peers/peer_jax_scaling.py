#!/usr/bin/env python3
"""JAX side of bench/compare's sequence-length scaling (see scaling.py): the LSTM as
jax.lax.scan over time (the input projection of all steps in one matmul, as Keras and kiln do)
under jax.jit, which compiles once per input shape, so each T's first call compiles; train step
with jax.value_and_grad and SGD written out, the parameters donated. Prints JSON (see
common.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import scaling  # noqa: E402

args = scaling.parse_args(__doc__)
common.limit_threads(args.threads)
common.limit_jax_threads(args.threads)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import jax_lstm  # noqa: E402

report = common.Report("jax", args)
report.info = {"version": jax.__version__, "xla_flags": os.environ["XLA_FLAGS"],
               "variants": {"jax.lax.scan": "jax.jit of a lax.scan LSTM; compiles per T"}}
data = scaling.load(args)


last_h = jax_lstm.last_h


loss_of = jax_lstm.mse_of_last_h


def sgd_step(params, xs, y):
    loss, grads = jax.value_and_grad(loss_of)(params, xs, y)
    params = jax.tree_util.tree_map(lambda p, g: p - scaling.LEARNING_RATE * g, params, grads)
    return params, loss


def initial_params():
    return tuple(jnp.asarray(data[name]) for name in ("kernel", "recurrent_kernel", "bias"))


def compiled_entries(fn):
    """How many shapes fn has compiled (jax's per-function cache), when this jax tells."""
    return (lambda: fn._cache_size()) if hasattr(fn, "_cache_size") else (lambda: None)


def make_forward():
    params = initial_params()
    jitted = jax.jit(last_h)

    def forward(x):
        return jitted(params, x).block_until_ready()
    forward.traces = compiled_entries(jitted)
    return forward


def make_train():
    state = {"params": initial_params()}
    jitted = jax.jit(sgd_step, donate_argnums=(0,))

    def step(x, y):
        state["params"], loss = jitted(state["params"], x, y)
        return loss.block_until_ready()

    def restore():
        state["params"] = initial_params()
    step.traces = compiled_entries(jitted)
    return step, restore


scaling.run(report, "jax.lax.scan", data, make_forward, make_train, jax.device_put)
report.emit()
