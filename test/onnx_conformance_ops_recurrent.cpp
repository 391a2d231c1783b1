// ONNX conformance mapping table, recurrent family: RNN, GRU and LSTM written step by step with
// kiln's ops (matmul, the gate activations, slices), as ONNX defines them (see
// onnx_conformance.hpp).
#include "onnx_conformance.hpp"

namespace onnx_conformance {

namespace {

enum class Cell { rnn, gru, lstm };

/// Rows [k * hidden, (k + 1) * hidden) of a gate-stacked tensor along `axis`: gate k.
Tensor gate(const Tensor& stacked, std::int64_t k, std::int64_t hidden, std::int64_t axis) {
  return kiln::slice(stacked, axis, k * hidden, (k + 1) * hidden);
}

/// The inputs of one direction d: W [G * H, I], R [G * H, H], the two biases, the peepholes.
struct Weights {
  Tensor w, r, wb, rb, p;
};

Weights weights_of(const Case& c, std::int64_t d, std::int64_t gates, std::int64_t hidden) {
  Weights out;
  out.w = kiln::squeeze(kiln::slice(c.in(1), 0, d, d + 1), {0});
  out.r = kiln::squeeze(kiln::slice(c.in(2), 0, d, d + 1), {0});
  if (c.has(3)) {
    const Tensor b = kiln::squeeze(kiln::slice(c.in(3), 0, d, d + 1), {0});
    out.wb = kiln::slice(b, 0, 0, gates * hidden);
    out.rb = kiln::slice(b, 0, gates * hidden, 2 * gates * hidden);
  } else {
    out.wb = out.rb = kiln::zeros({gates * hidden}, out.w.dtype());
  }
  if (c.has(7)) out.p = kiln::squeeze(kiln::slice(c.in(7), 0, d, d + 1), {0});
  return out;
}

/// One step of the cell: the new hidden state (and cell state, for LSTM, in `cell`).
Tensor step(Cell kind, const Weights& k, const Tensor& x, const Tensor& h, Tensor& cell,
            std::int64_t hidden, bool linear_before_reset) {
  const Tensor xw = kiln::add(kiln::matmul(x, kiln::transpose(k.w)), k.wb);
  const Tensor one = kiln::scalar(1.0, x.dtype());
  switch (kind) {
    case Cell::rnn:
      return kiln::tanh(kiln::add(xw, kiln::add(kiln::matmul(h, kiln::transpose(k.r)), k.rb)));
    case Cell::gru: {  // gates z, r, h
      const auto rt = [&](std::int64_t g) { return kiln::transpose(gate(k.r, g, hidden, 0)); };
      const auto rb = [&](std::int64_t g) { return gate(k.rb, g, hidden, 0); };
      const Tensor z = kiln::sigmoid(
          kiln::add(gate(xw, 0, hidden, 1), kiln::add(kiln::matmul(h, rt(0)), rb(0))));
      const Tensor r = kiln::sigmoid(
          kiln::add(gate(xw, 1, hidden, 1), kiln::add(kiln::matmul(h, rt(1)), rb(1))));
      const Tensor recurrent = linear_before_reset
                                   ? kiln::mul(r, kiln::add(kiln::matmul(h, rt(2)), rb(2)))
                                   : kiln::add(kiln::matmul(kiln::mul(r, h), rt(2)), rb(2));
      const Tensor candidate = kiln::tanh(kiln::add(gate(xw, 2, hidden, 1), recurrent));
      return kiln::add(kiln::mul(kiln::sub(one, z), candidate), kiln::mul(z, h));
    }
    case Cell::lstm: {  // gates i, o, f, c; peepholes i, o, f
      const Tensor g = kiln::add(xw, kiln::add(kiln::matmul(h, kiln::transpose(k.r)), k.rb));
      const auto peep = [&](std::int64_t n, const Tensor& c) {
        return k.p.defined() ? kiln::mul(gate(k.p, n, hidden, 0), c) : kiln::zeros_like(c);
      };
      const Tensor i = kiln::sigmoid(kiln::add(gate(g, 0, hidden, 1), peep(0, cell)));
      const Tensor f = kiln::sigmoid(kiln::add(gate(g, 2, hidden, 1), peep(2, cell)));
      cell = kiln::add(kiln::mul(f, cell), kiln::mul(i, kiln::tanh(gate(g, 3, hidden, 1))));
      const Tensor o = kiln::sigmoid(kiln::add(gate(g, 1, hidden, 1), peep(1, cell)));
      return kiln::mul(o, kiln::tanh(cell));
    }
  }
  return h;
}

/// ONNX RNN / GRU / LSTM with the default activations, forward, reverse or bidirectional, in
/// either layout. Outputs Y, Y_h (and Y_c for LSTM).
Outputs recurrent(const Case& c, Cell kind) {
  c.only({"hidden_size", "direction", "layout", "linear_before_reset"});
  const bool batch_major = c.i("layout", 0) != 0;
  const Tensor x = batch_major ? kiln::transpose(c.in(0), {1, 0, 2}) : c.in(0);  // [S, B, I]
  if (c.has(4))  // sequence_lens: only the full length maps (no per-entry masking here)
    for (std::int64_t len : int_values(c.in(4)))
      if (len != x.dim(0)) throw NotMapped("sequence_lens shorter than the sequence");
  const std::int64_t hidden = c.i("hidden_size", 0);
  const std::int64_t gates = kind == Cell::lstm ? 4 : kind == Cell::gru ? 3 : 1;
  const std::string direction = c.s("direction", "forward");
  const std::int64_t directions = direction == "bidirectional" ? 2 : 1;
  const std::int64_t steps = x.dim(0), batch = x.dim(1);
  std::vector<Tensor> ys, hs, cs;
  for (std::int64_t d = 0; d < directions; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    const Weights k = weights_of(c, d, gates, hidden);
    const auto initial = [&](std::size_t input) {
      return c.has(input)
                 ? kiln::squeeze(kiln::slice(batch_major ? kiln::transpose(c.in(input), {1, 0, 2})
                                                         : c.in(input),
                                             0, d, d + 1),
                                 {0})
                 : kiln::zeros({batch, hidden}, x.dtype());
    };
    Tensor h = initial(5), cell = initial(6);
    std::vector<Tensor> outputs(static_cast<std::size_t>(steps));
    for (std::int64_t n = 0; n < steps; ++n) {
      const std::int64_t t = reverse ? steps - 1 - n : n;
      const Tensor xt = kiln::squeeze(kiln::slice(x, 0, t, t + 1), {0});
      h = step(kind, k, xt, h, cell, hidden, c.i("linear_before_reset", 0) != 0);
      outputs[static_cast<std::size_t>(t)] = h;
    }
    ys.push_back(kiln::stack(outputs, 0));  // [S, B, H]
    hs.push_back(h);
    cs.push_back(cell);
  }
  Tensor y = kiln::stack(ys, 1);    // [S, D, B, H]
  Tensor y_h = kiln::stack(hs, 0);  // [D, B, H]
  Tensor y_c = kiln::stack(cs, 0);
  if (batch_major) {
    y = kiln::transpose(y, {2, 0, 1, 3});  // [B, S, D, H]
    y_h = kiln::transpose(y_h, {1, 0, 2});
    y_c = kiln::transpose(y_c, {1, 0, 2});
  }
  if (kind == Cell::lstm) return {y, y_h, y_c};
  return {y, y_h};
}

}  // namespace

void add_recurrent_ops(OpTable& t) {
  t["RNN"] = [](const Case& c) { return recurrent(c, Cell::rnn); };
  t["GRU"] = [](const Case& c) { return recurrent(c, Cell::gru); };
  t["LSTM"] = [](const Case& c) { return recurrent(c, Cell::lstm); };
}

}  // namespace onnx_conformance
