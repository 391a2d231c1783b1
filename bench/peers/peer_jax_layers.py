#!/usr/bin/env python3
"""JAX side of bench/compare's layers family (see layers.py): jax.jit of workload 11 with
lax.conv_general_dilated in NHWC/HWIO (TensorFlow's layout, as kiln's default) and of workload
12 with einsum projections and jax.nn.softmax; "train" rows are jax.jit of jax.grad of
sum(y * r). Prints JSON (see common.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import layers  # noqa: E402

args = layers.parse_args(__doc__)
common.limit_threads(args.threads)
common.limit_jax_threads(args.threads)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

report = common.Report("jax", args)
report.info = {"version": jax.__version__, "variants": {"jax.jit": "jax.jit, NHWC"}}
data = layers.arrays(args, channels_last=True)
x, w, r = (jnp.asarray(data[k]) for k in ("x", "w", "r"))


def conv(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


conv_forward = jax.jit(conv)
conv_grad = jax.jit(jax.grad(lambda x, w: jnp.sum(conv(x, w) * r), argnums=(0, 1)))
layers.measure(report, "conv2d_forward", "jax.jit",
               lambda: conv_forward(x, w).block_until_ready())
layers.measure(report, "conv2d_train", "jax.jit",
               lambda: jax.block_until_ready(conv_grad(x, w)))

a, ra = jnp.asarray(data["a"]), jnp.asarray(data["ra"])
ps = tuple(jnp.asarray(p) for p in data["p"])
head = layers.WIDTH // layers.HEADS


def block(x, p):
    b = x.shape[0]

    def split(t):
        return t.reshape(b, layers.SEQ, layers.HEADS, head).transpose(0, 2, 1, 3)

    q, k, v = split(x @ p[0]), split(x @ p[1]), split(x @ p[2])
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(jnp.float32(head))
    out = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)
    return out.transpose(0, 2, 1, 3).reshape(b, layers.SEQ, layers.WIDTH) @ p[3]


attention_forward = jax.jit(block)
attention_grad = jax.jit(jax.grad(lambda x, p: jnp.sum(block(x, p) * ra), argnums=(0, 1)))
layers.measure(report, "attention_forward", "jax.jit",
               lambda: attention_forward(a, ps).block_until_ready())
layers.measure(report, "attention_train", "jax.jit",
               lambda: jax.block_until_ready(attention_grad(a, ps)))
report.emit()
