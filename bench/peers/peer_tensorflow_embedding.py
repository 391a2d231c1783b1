#!/usr/bin/env python3
"""TensorFlow side of bench/compare's embedding family (see embedding.py): workload 10 with
Keras 3 layers, keras.layers.Embedding and keras.layers.Dense(1, use_bias=False) as w, Keras's
MeanSquaredError and keras.optimizers.Adam, the whole step (GradientTape, apply_gradients) in
one tf.function ("Keras tf.function"), and the same with jit_compile=True ("Keras tf.function
XLA"). The table's gradient is a tf.IndexedSlices of the looked-up rows; Keras's Adam updates
its m, v and the table densely (every row moves, as the dense formula says). Prints JSON (see
common.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import embedding  # noqa: E402

args = embedding.parse_args(__doc__)
common.limit_threads(args.threads)

import tensorflow as tf  # noqa: E402

common.limit_tensorflow_threads(tf, args.threads)
import keras  # noqa: E402

report = common.Report("tensorflow", args)
report.info = {"version": tf.__version__, "keras": keras.__version__,
               "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
               "variants": {"Keras tf.function": "Embedding + Dense(1, no bias) + Adam, the "
                            "whole step in one tf.function (graph mode, Grappler)",
                            "Keras tf.function XLA": "the same in tf.function(jit_compile=True)"}}
data = embedding.make_data(args)
ids = [tf.constant(data["ids"][i]) for i in range(embedding.BATCHES)]
ys = [tf.constant(data["y"][i]) for i in range(embedding.BATCHES)]


def step_maker(jit):
    def make_step():
        table = keras.layers.Embedding(data["rows"], data["dim"])
        table.build((data["batch"],))
        table.embeddings.assign(data["table"])
        dense = keras.layers.Dense(1, use_bias=False)
        dense.build((data["batch"], data["dim"]))
        dense.kernel.assign(data["w"])
        variables = table.trainable_variables + dense.trainable_variables
        loss_fn = keras.losses.MeanSquaredError()
        opt = keras.optimizers.Adam(embedding.LEARNING_RATE, beta_1=embedding.BETA1,
                                    beta_2=embedding.BETA2, epsilon=embedding.EPSILON)

        @tf.function(jit_compile=jit)
        def train(batch, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, dense(table(batch)))
            grads = tape.gradient(loss, variables)
            opt.apply_gradients(zip(grads, variables))
            return loss

        def step(i):
            b = i % embedding.BATCHES
            return train(ids[b], ys[b])
        return step
    return make_step


for variant, jit in (("Keras tf.function", False), ("Keras tf.function XLA", True)):
    embedding.run_train(report, variant, data, step_maker(jit))
report.emit()
