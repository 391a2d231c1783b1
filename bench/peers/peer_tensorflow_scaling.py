#!/usr/bin/env python3
"""TensorFlow side of bench/compare's sequence-length scaling (see scaling.py): Keras 3's
keras.layers.LSTM(256) under tf.function with an input_signature whose time dim is None, so one
trace serves every T (the layer's recurrence is then a tf.while_loop); train step with a
GradientTape, Keras's MeanSquaredError and SGD. Prints JSON (see common.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import scaling  # noqa: E402

args = scaling.parse_args(__doc__)
common.limit_threads(args.threads)

import tensorflow as tf  # noqa: E402

common.limit_tensorflow_threads(tf, args.threads)
import keras  # noqa: E402

report = common.Report("tensorflow", args)
report.info = {"version": tf.__version__, "keras": keras.__version__,
               "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
               "variants": {"Keras tf.function": "keras.layers.LSTM in tf.function, "
                            "input_signature [64, None, 128]: one trace for every T"}}
data = scaling.load(args)
x_spec = tf.TensorSpec([scaling.BATCH, None, scaling.FEATURES], tf.float32)
initial = [data["kernel"], data["recurrent_kernel"], data["bias"]]


def make_model():
    model = keras.Sequential([keras.Input((None, scaling.FEATURES), batch_size=scaling.BATCH),
                              keras.layers.LSTM(scaling.UNITS)])
    model.set_weights(initial)
    return model


def make_forward():
    model = make_model()
    traced = tf.function(lambda x: model(x, training=False), input_signature=[x_spec])

    def forward(x):
        return traced(x)
    forward.traces = traced.experimental_get_tracing_count
    return forward


def make_train():
    model = make_model()
    opt = keras.optimizers.SGD(scaling.LEARNING_RATE)
    loss_fn = keras.losses.MeanSquaredError()

    @tf.function(input_signature=[x_spec, tf.TensorSpec([scaling.BATCH, scaling.UNITS])])
    def traced(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    def step(x, y):
        return traced(x, y)
    step.traces = traced.experimental_get_tracing_count
    return step, lambda: model.set_weights(initial)


scaling.run(report, "Keras tf.function", data, make_forward, make_train, tf.constant)
report.emit()
