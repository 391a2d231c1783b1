#!/usr/bin/env python3
"""TensorFlow side of bench/compare: kiln's workloads in TF eager, tf.function (graph mode
with Grappler) and tf.function(jit_compile=True) (XLA). Prints JSON (see common.py)."""

import functools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

args = common.parse_args(__doc__)
common.limit_threads(args.threads)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

common.limit_tensorflow_threads(tf, args.threads)

report = common.Report("tensorflow", args)
report.info = {"version": tf.__version__,
               "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
               "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
               "variants": {"tf.function": "graph mode (Grappler), no XLA",
                            "tf.function XLA": "tf.function(jit_compile=True)"}}
plan = report.plan


# 1. Tiny eager op: a 4-element f32 add.
def tiny_add():
    a = tf.constant([1.0, 2.0, 3.0, 4.0])
    b = tf.constant([0.5, 0.5, 0.5, 0.5])
    common.check_close("add", tf.add(a, b).numpy(), [1.5, 2.5, 3.5, 4.5], 0)
    report.add("add4", "TF eager", common.measure(plan, lambda: tf.add(a, b)))


report.run("add4", "TF eager", tiny_add)

# 2. tanh(a*b+c)*0.5 over 4M floats, traced, with and without XLA.
chain_a, chain_b, chain_c = (tf.constant(x) for x in common.chain_inputs())


def chain(variant, jit):
    def body():
        fn = tf.function(lambda x, y, z: tf.tanh(x * y + z) * 0.5, jit_compile=jit)
        common.check_chain(float(fn(chain_a, chain_b, chain_c)[-1]))
        timing = common.measure(plan, lambda: fn(chain_a, chain_b, chain_c))
        report.add("chain", variant, timing, gbs=common.CHAIN_BYTES / timing["median_s"] * 1e-9)

    report.run("chain", variant, body)


chain("tf.function XLA", True)
chain("tf.function", False)


def copy():
    # TF has no in-place copy into a preallocated tensor; the copy reference is numpy's
    # (one thread) on the same machine in the same process.
    src = np.ones(common.CHAIN_N, np.float32)
    dst = np.empty_like(src)
    timing = common.measure(plan, lambda: np.copyto(dst, src))
    report.add("copy", "numpy copyto", timing, gbs=common.COPY_BYTES / timing["median_s"] * 1e-9)


report.run("copy", "numpy copyto", copy)


# 3. Unrolled 5-step RNN and LSTM (batch 32, input 10, hidden 20), the equations of
# bench/bench_function.cpp; weights are tf.Variables captured by the function.
def rnn(w, u, b, xs):
    h = tf.zeros((common.BATCH, common.HIDDEN))
    for x in tf.unstack(xs, axis=1):
        h = tf.tanh(tf.matmul(x, w) + tf.matmul(h, u) + b)
    return h


def lstm(w, u, b, xs):
    h = tf.zeros((common.BATCH, common.HIDDEN))
    c = tf.zeros((common.BATCH, common.HIDDEN))
    for x in tf.unstack(xs, axis=1):
        z = tf.split(tf.matmul(x, w) + tf.matmul(h, u) + b, 4, axis=1)
        i, f, g, o = tf.sigmoid(z[0]), tf.sigmoid(z[1]), tf.tanh(z[2]), tf.sigmoid(z[3])
        c = f * c + i * g
        h = o * tf.tanh(c)
    return h


xs_np = common.inputs()
xs = tf.constant(xs_np)


def recurrent(workload, body, gates, seed, reference):
    w_np, u_np, b_np = common.weights(gates, seed)
    w, u, b = (tf.Variable(v) for v in (w_np, u_np, b_np))
    want = reference(w_np, u_np, b_np, xs_np)

    def eager(x):
        return body(w, u, b, x)

    makers = {
        "tf.function": lambda: tf.function(eager),
        "tf.function XLA": lambda: tf.function(eager, jit_compile=True),
    }
    for variant, make in makers.items():
        report.first_and_cached(
            workload, variant, lambda make=make: functools.partial(make(), xs),
            lambda out, fn, variant=variant: common.check_close(f"{workload} {variant}",
                                                                out.numpy(), want))


# The RNN first, so the LSTM's first call is a new function's in a warmed-up process.
recurrent("rnn", rnn, 1, 11, common.reference_rnn)
recurrent("lstm", lstm, 4, 21, common.reference_lstm)


# 4. and 5. The train step of bench/bench_train.cpp with Keras layers (the layout kiln follows),
# a GradientTape and Keras's Adam.
def train_step():
    import keras

    init = common.train_init(args)
    x, y = tf.constant(init["x"]), tf.constant(init["y"])
    units1, units2 = common.TRAIN_UNITS

    def model_and_optimizer():
        model = keras.Sequential([
            keras.Input((common.TRAIN_STEPS, common.TRAIN_FEATURES),
                        batch_size=common.TRAIN_BATCH),
            keras.layers.LSTM(units1, return_sequences=True),
            keras.layers.LSTM(units2),
            keras.layers.Dense(1, activation="sigmoid"),
        ])
        model.set_weights([init[f"{layer}/{name}"] for layer in ("l1", "l2")
                           for name in ("kernel", "recurrent_kernel", "bias")]
                          + [init["out/kernel"], init["out/bias"]])
        opt = keras.optimizers.Adam(common.LEARNING_RATE, beta_1=common.BETA1,
                                    beta_2=common.BETA2, epsilon=common.EPSILON)
        return model, opt

    def step_of(model, opt):
        loss_fn = keras.losses.BinaryCrossentropy()

        def step():
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        return step

    makers = {
        "TF eager": step_of,
        "tf.function": lambda model, opt: tf.function(step_of(model, opt)),
        "tf.function XLA": lambda model, opt: tf.function(step_of(model, opt), jit_compile=True),
    }
    for variant, make in makers.items():
        model, opt = model_and_optimizer()
        report.first_and_cached("train_step", variant,
                                lambda make=make, model=model, opt=opt: make(model, opt),
                                common.train_check(init, variant),
                                first_call=variant != "TF eager")


train_step()

report.emit()
