"""The LSTM the JAX peers time (peer_jax_scaling.py, peer_jax_sizes.py): lax.scan over time with
the input projection of all steps in one matmul (as Keras and kiln do), Keras's gate layout
i, f, c, o; parameters (kernel, recurrent_kernel, bias). Import after common.limit_jax_threads."""

import jax
import jax.numpy as jnp


def last_h(params, xs):
    """The last h of the LSTM over xs [batch, time, features]."""
    kernel, recurrent_kernel, bias = params
    units = recurrent_kernel.shape[0]
    zs = jnp.swapaxes(xs @ kernel + bias, 0, 1)  # [time, batch, 4 units]
    zero = jnp.zeros((xs.shape[0], units), xs.dtype)

    def cell(state, z):
        h, c = state
        i, f, g, o = jnp.split(z + h @ recurrent_kernel, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), None

    (h, _), _ = jax.lax.scan(cell, (zero, zero), zs)
    return h


def mse_of_last_h(params, xs, y):
    return jnp.mean(jnp.square(last_h(params, xs) - y))
