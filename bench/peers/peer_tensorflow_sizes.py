#!/usr/bin/env python3
"""TensorFlow side of bench/compare's sizes family (see sizes.py): Keras 3 models under tf.function,
with and without jit_compile=True (XLA). Workload 7: keras.layers.LSTM(h) and keras.layers.GRU(h)
(reset_after, the default; each recurrence a tf.while_loop), train step with a GradientTape,
Keras's MeanSquaredError and SGD; workload 9: Sequential of Dense layers,
CategoricalCrossentropy(from_logits=True), SGD or Adam. Each function traces (and with XLA
compiles) once per input shape. Prints JSON (see common.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import sizes  # noqa: E402

args = sizes.parse_args(__doc__)
common.limit_threads(args.threads)

import tensorflow as tf  # noqa: E402

common.limit_tensorflow_threads(tf, args.threads)
import keras  # noqa: E402

report = common.Report("tensorflow", args)
report.info = {"version": tf.__version__, "keras": keras.__version__,
               "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
               "variants": {"tf.function": "Keras model in tf.function (graph mode, Grappler)",
                            "tf.function XLA": "the same in tf.function(jit_compile=True)"}}
lstm_data = sizes.load_recurrent(args, "lstm")
gru_data = sizes.load_recurrent(args, "gru")
mlp_data = sizes.load_mlp(args)


def train_step_of(model, loss_fn, jit, optimizer="sgd"):
    opt = (keras.optimizers.SGD(sizes.LEARNING_RATE) if optimizer == "sgd" else
           keras.optimizers.Adam(sizes.ADAM_LEARNING_RATE, epsilon=sizes.ADAM_EPSILON))

    @tf.function(jit_compile=jit)
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return step


def recurrent_makers(jit, layer_type, data):
    """make_forward and make_train of one cell (keras.layers.LSTM or GRU) holding data's
    weights."""
    def make_model(h):
        model = keras.Sequential([keras.Input((None, sizes.FEATURES), batch_size=sizes.BATCH),
                                  layer_type(h)])
        initial = [data[name][h] for name in ("kernel", "recurrent_kernel", "bias")]
        model.set_weights(initial)
        return model, lambda: model.set_weights(initial)

    def make_forward(h):
        model, _ = make_model(h)
        return tf.function(lambda x: model(x, training=False), jit_compile=jit)

    def make_train(h):
        model, restore = make_model(h)
        return train_step_of(model, keras.losses.MeanSquaredError(), jit), restore
    return make_forward, make_train


def mlp_maker(jit):
    def make_step(optimizer):
        width, classes = mlp_data["l0/kernel"].shape[1], mlp_data["l2/kernel"].shape[1]
        model = keras.Sequential([keras.Input((mlp_data["l0/kernel"].shape[0],)),
                                  keras.layers.Dense(width, activation="relu"),
                                  keras.layers.Dense(width, activation="relu"),
                                  keras.layers.Dense(classes)])
        model.set_weights([mlp_data[f"l{i}/{name}"] for i in range(3)
                           for name in ("kernel", "bias")])
        return train_step_of(model, keras.losses.CategoricalCrossentropy(from_logits=True), jit,
                             optimizer)
    return make_step


for variant, jit in (("tf.function", False), ("tf.function XLA", True)):
    sizes.run_recurrent(report, variant, lstm_data,
                        *recurrent_makers(jit, keras.layers.LSTM, lstm_data), tf.constant)
    sizes.run_recurrent(report, variant, gru_data,
                        *recurrent_makers(jit, keras.layers.GRU, gru_data), tf.constant,
                        cell="gru")
    sizes.run_mlp(report, variant, mlp_data, mlp_maker(jit), tf.constant)
report.emit()
