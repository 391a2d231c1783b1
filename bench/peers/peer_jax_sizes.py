#!/usr/bin/env python3
"""JAX side of bench/compare's sizes family (see sizes.py): workload 7 as jax.jit of a lax.scan
LSTM and GRU (the input projection of all steps in one matmul, as Keras and kiln do; as
peer_jax_scaling.py), train step with jax.value_and_grad and SGD written out, the parameters
donated; workload 9, the MLP written out (softmax cross-entropy via log_softmax) under jax.jit
the same way, with SGD or Adam (Keras's form, written out). Prints JSON (see common.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import sizes  # noqa: E402

args = sizes.parse_args(__doc__)
common.limit_threads(args.threads)
common.limit_jax_threads(args.threads)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import jax_lstm  # noqa: E402

report = common.Report("jax", args)
report.info = {"version": jax.__version__, "xla_flags": os.environ["XLA_FLAGS"],
               "variants": {"jax.jit": "jax.jit of lax.scan LSTM and GRU / the MLP; compiles "
                                       "per shape"}}
lstm_data = sizes.load_recurrent(args, "lstm")
gru_data = sizes.load_recurrent(args, "gru")
mlp_data = sizes.load_mlp(args)


def sgd(loss_of):
    def step(params, x, y):
        loss, grads = jax.value_and_grad(loss_of)(params, x, y)
        return jax.tree_util.tree_map(lambda p, g: p - sizes.LEARNING_RATE * g, params, grads), loss
    return jax.jit(step, donate_argnums=(0,))


def adam(loss_of):
    """Adam as Keras and kiln write it: m += (g - m)(1 - b1), v += (g^2 - v)(1 - b2),
    p -= lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + epsilon); the state donated."""
    b1, b2 = 0.9, 0.999

    def step(state, x, y):
        params, m, v, t = state
        loss, grads = jax.value_and_grad(loss_of)(params, x, y)
        t = t + 1
        rate = sizes.ADAM_LEARNING_RATE * jnp.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        tree = jax.tree_util.tree_map
        m = tree(lambda m, g: m + (g - m) * (1 - b1), m, grads)
        v = tree(lambda v, g: v + (g * g - v) * (1 - b2), v, grads)
        params = tree(lambda p, m, v: p - rate * m / (jnp.sqrt(v) + sizes.ADAM_EPSILON),
                      params, m, v)
        return (params, m, v, t), loss
    return jax.jit(step, donate_argnums=(0,))


def recurrent_makers(data, last_h, mse_of_last_h):
    """make_forward and make_train of one cell (jax_lstm's LSTM or GRU) holding data's weights."""
    def params(h):
        return tuple(jnp.asarray(data[name][h]) for name in ("kernel", "recurrent_kernel", "bias"))

    def make_forward(h):
        fixed = params(h)
        jitted = jax.jit(last_h)
        return lambda x: jitted(fixed, x).block_until_ready()

    def make_train(h):
        state = {}
        jitted = sgd(mse_of_last_h)

        def step(x, y):
            state["params"], loss = jitted(state["params"], x, y)
            return loss.block_until_ready()

        def restore():
            state["params"] = params(h)
        return step, restore
    return make_forward, make_train


def mlp_loss(params, x, y):
    for i, (kernel, bias) in enumerate(params):
        x = x @ kernel + bias
        if i + 1 < len(params):
            x = jax.nn.relu(x)
    return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(x, axis=-1), axis=-1))


def make_mlp_step(optimizer):
    params = tuple((jnp.asarray(mlp_data[f"l{i}/kernel"]), jnp.asarray(mlp_data[f"l{i}/bias"]))
                   for i in range(3))
    if optimizer == "sgd":
        state = {"s": params}
        jitted = sgd(mlp_loss)
    else:
        def zeros():  # m and v each their own buffers: the state is donated
            return jax.tree_util.tree_map(jnp.zeros_like, params)
        state = {"s": (params, zeros(), zeros(), jnp.float32(0))}
        jitted = adam(mlp_loss)

    def step(x, y):
        state["s"], loss = jitted(state["s"], x, y)
        return loss.block_until_ready()
    return step


sizes.run_recurrent(report, "jax.jit", lstm_data,
                    *recurrent_makers(lstm_data, jax_lstm.last_h, jax_lstm.mse_of_last_h),
                    jax.device_put)
sizes.run_recurrent(report, "jax.jit", gru_data,
                    *recurrent_makers(gru_data, jax_lstm.gru_last_h, jax_lstm.gru_mse_of_last_h),
                    jax.device_put, cell="gru")
sizes.run_mlp(report, "jax.jit", mlp_data, make_mlp_step, jax.device_put)
report.emit()
