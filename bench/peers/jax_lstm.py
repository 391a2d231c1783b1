"""The LSTM and GRU the JAX peers time (peer_jax_scaling.py, peer_jax_sizes.py): lax.scan over
time with the input projection of all steps in one matmul (as Keras and kiln do), Keras's gate
layouts (LSTM i, f, c, o; GRU z, r, h in its reset_after form, bias [2, 3 units]); parameters
(kernel, recurrent_kernel, bias). Import after common.limit_jax_threads."""

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


def gru_last_h(params, xs):
    """The last h of the GRU over xs [batch, time, features]."""
    kernel, recurrent_kernel, bias = params
    units = recurrent_kernel.shape[0]
    xs_proj = jnp.swapaxes(xs @ kernel + bias[0], 0, 1)  # [time, batch, 3 units]
    zero = jnp.zeros((xs.shape[0], units), xs.dtype)

    def cell(h, x_proj):
        x_z, x_r, x_h = jnp.split(x_proj, 3, axis=-1)
        h_z, h_r, h_h = jnp.split(h @ recurrent_kernel + bias[1], 3, axis=-1)
        z = jax.nn.sigmoid(x_z + h_z)
        r = jax.nn.sigmoid(x_r + h_r)
        n = jnp.tanh(x_h + r * h_h)
        return z * h + (1 - z) * n, None

    h, _ = jax.lax.scan(cell, zero, xs_proj)
    return h


def gru_mse_of_last_h(params, xs, y):
    return jnp.mean(jnp.square(gru_last_h(params, xs) - y))
