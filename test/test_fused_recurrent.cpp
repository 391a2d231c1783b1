// The fused recurrences (Prim::lstm_sequence, gru_sequence and their gradients,
// lib/kernels/recurrent*.cpp): nn::LSTM's and nn::GRU's defaults against their scan forms (fused =
// false) over a table of shapes and options, eagerly and traced, outputs and gradients; the
// primitives' gradients against finite differences; the unit split over threads (sizes on both
// sides of it, an uneven cut); a busy pool; errors.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <kiln/kiln.hpp>

#include "finite_difference.hpp"
#include "kernels/parallel.hpp"
#include "kernels/recurrent_parts.hpp"
#include "layer_test_support.hpp"
#include "ops/recurrent.hpp"
#include "simd_test_support.hpp"

namespace {

using kiln::Tensor;
using kiln::test::max_diff;
using Tensors = std::vector<Tensor>;

struct Options {
  bool return_sequences = false, return_state = false, go_backwards = false;
};

struct Case {
  std::string name;
  std::int64_t batch, steps, features, units;
  Options options;
  bool initial_state = false;
  kiln::DType dtype = kiln::DType::f32;
};

// A call is cut into one part per thread when units * 4 * units * batch >= 2^19 and T times
// that >= 2^23 (checked below, so the table keeps covering both forms): the 64- and 80-unit
// rows (80: parts of 32 and 48 units) and the 72-unit row (32 and 40); the others run as one
// part.
const std::vector<Case> cases = {
    {"small, last h", 3, 5, 4, 6, {}},
    {"one step", 2, 1, 3, 5, {}},
    {"sequences and state", 4, 6, 5, 7, {.return_sequences = true, .return_state = true}},
    {"go_backwards", 3, 7, 4, 5, {.return_sequences = true, .go_backwards = true}},
    {"initial state", 3, 4, 4, 6, {.return_state = true}, true},
    {"f64", 2, 5, 3, 4, {.return_sequences = true}, false, kiln::DType::f64},
    {"split in two parts", 32, 16, 8, 64, {.return_sequences = true, .return_state = true}},
    {"uneven parts", 32, 12, 8, 80, {.return_state = true}, true},
    {"split, f64, backwards", 32, 16, 4, 64, {.go_backwards = true}, false, kiln::DType::f64},
    // 20 units: a whole gate panel and a part-filled one on AVX2 (16 f32 columns a panel), a
    // part-filled one alone on AVX-512 (32), two and a part on SSE2; 7 rows: a tile and one row.
    {"whole and part-filled panels", 7, 4, 5, 20, {.return_sequences = true}, true},
    {"whole and part-filled panels, f64", 7, 3, 5, 20, {}, false, kiln::DType::f64},
    // 72 units in two parts of 32 and 40: the second part starts at unit 32 and ends in a
    // part-filled panel on AVX2 and AVX-512, forward and backward.
    {"split with a part-filled panel", 32, 13, 6, 72, {.return_sequences = true}, true},
};

template <class Layer>
Layer make_layer(std::int64_t units, const Options& o, bool fused) {
  std::conditional_t<std::is_same_v<Layer, kiln::nn::LSTM>, kiln::nn::LSTMOptions,
                     kiln::nn::GRUOptions>
      options;
  options.return_sequences = o.return_sequences;
  options.return_state = o.return_state;
  options.go_backwards = o.go_backwards;
  options.fused = fused;
  return Layer(units, options);
}

/// Copies a's weights into b (same shapes).
template <class Layer>
void copy_weights(const Layer& from, Layer& to) {
  to.kernel().assign(from.kernel().value());
  to.recurrent_kernel().assign(from.recurrent_kernel().value());
  to.bias().assign(from.bias().value());
}

/// The layer's outputs, a weighted loss of all of them, and its gradients with respect to the
/// input, the initial state (when given) and the three weights.
template <class Layer>
Tensors outputs_and_gradients(Layer& layer, const Tensor& x, const Tensors& state) {
  kiln::GradientTape tape;
  tape.watch(x);
  for (const Tensor& s : state) tape.watch(s);
  const Tensors out = layer.call(x, state);
  const Tensor loss = kiln::test::weighted_loss(out);
  Tensors sources{x};
  sources.insert(sources.end(), state.begin(), state.end());
  for (const kiln::Variable& v : layer.trainable_variables()) sources.push_back(v.value());
  Tensors r = out;
  r.push_back(loss);
  for (const Tensor& g : tape.gradient(loss, sources)) r.push_back(g);
  return r;
}

}  // namespace

TEMPLATE_TEST_CASE(
    "the fused LSTM and GRU equal their scan forms: outputs and gradients, eager "
    "and traced",
    "[fused_recurrent][nn]", kiln::nn::LSTM, kiln::nn::GRU) {
  using Layer = TestType;
  constexpr bool lstm = std::is_same_v<Layer, kiln::nn::LSTM>;
  for (const Case& c : cases) {
    INFO(c.name);
    const double tol = c.dtype == kiln::DType::f64 ? 1e-11 : 2e-5;
    Layer fused = make_layer<Layer>(c.units, c.options, true);
    Layer scan = make_layer<Layer>(c.units, c.options, false);
    const Tensor x =
        kiln::cast(kiln::random::normal({c.batch, c.steps, c.features}, 0, 1, 7), c.dtype);
    Tensors state;
    if (c.initial_state)
      for (std::uint64_t seed : {8, 9}) {
        if (!lstm && seed == 9) break;  // the GRU's state is h alone
        state.push_back(
            kiln::cast(kiln::random::normal({c.batch, c.units}, 0, 0.5, seed), c.dtype));
      }
    fused(x);
    scan(x);
    copy_weights(fused, scan);
    const Tensors want = outputs_and_gradients(scan, x, state);
    const Tensors eager = outputs_and_gradients(fused, x, state);
    auto traced_fn = kiln::function(
        [&](const Tensor& in, const Tensors& s) { return outputs_and_gradients(fused, in, s); });
    const Tensors traced = traced_fn(x, state);
    REQUIRE(eager.size() == want.size());
    REQUIRE(traced.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      INFO("result " << i << " of " << want.size());
      // Relative to the result's size (the loss sums thousands of terms).
      const double scale =
          1 + kiln::max(kiln::abs(kiln::cast(want[i], kiln::DType::f64))).item<double>();
      CHECK(eager[i].shape() == want[i].shape());
      CHECK(max_diff(eager[i], want[i]) <= tol * scale);
      CHECK(max_diff(traced[i], want[i]) <= tol * scale);
    }
    // The fused form has no scan: one fused node and its gradient nodes.
    const std::string graph = traced_fn.get_concrete_function(x, state).graph().to_string();
    INFO(graph);
    const std::string primitive = lstm ? "lstm_sequence" : "gru_sequence";
    CHECK(graph.find(primitive + " ") != std::string::npos);
    CHECK(graph.find(primitive + "_grad") != std::string::npos);
    CHECK(graph.find("scan") == std::string::npos);
  }
}

namespace {

/// Checks the tape's gradient of loss(args) against central differences at a spread of
/// elements of each argument (all of them would take long at 64 units).
void check_against_finite_differences(const std::function<Tensor(const Tensors&, bool)>& loss,
                                      const Tensors& args) {
  kiln::GradientTape tape;
  for (const Tensor& a : args) tape.watch(a);
  const Tensors grads = tape.gradient(loss(args, true), args);
  for (std::size_t i = 0; i < args.size(); ++i) {
    INFO("argument " << i);
    const std::vector<double> got = grads[i].to_vector<double>();
    const std::vector<double> values = args[i].to_vector<double>();
    const std::size_t stride = std::max<std::size_t>(1, values.size() / 40);
    for (std::size_t j = 0; j < values.size(); j += stride) {
      Tensors plus = args, minus = args;
      std::vector<double> vp = values, vm = values;
      vp[j] += 1e-6;
      vm[j] -= 1e-6;
      plus[i] = kiln::tensor(vp, args[i].shape());
      minus[i] = kiln::tensor(vm, args[i].shape());
      const double numeric =
          (loss(plus, false).item<double>() - loss(minus, false).item<double>()) / 2e-6;
      INFO("element " << j);
      CHECK(std::abs(got[j] - numeric) <= 1e-6 * (1 + std::abs(numeric)));
    }
  }
}

/// Shapes for the gradient checks: one part (4 units) and two (64 units, batch 32: cut at 32).
const std::vector<std::array<std::int64_t, 3>> gradient_shapes = {{2, 4, 3}, {32, 64, 16}};

}  // namespace

TEST_CASE("lstm_sequence's gradient matches finite differences", "[fused_recurrent][autodiff]") {
  using kiln::DType;
  for (const auto& [batch, units, steps] : gradient_shapes) {
    INFO("batch " << batch << ", units " << units);
    const Tensors args{kiln::random::normal({steps, batch, 4 * units}, 0, 1, 11, DType::f64),
                       kiln::random::normal({batch, units}, 0, 0.5, 12, DType::f64),
                       kiln::random::normal({batch, units}, 0, 0.5, 13, DType::f64),
                       kiln::random::normal({units, 4 * units}, 0, 0.3, 14, DType::f64),
                       kiln::random::normal({4 * units}, 0, 0.3, 21, DType::f64)};
    // Weights over h and c of every step (the gate columns carry no gradient).
    const Tensor weights = kiln::random::normal({steps, batch, 2 * units}, 0, 1, 15, DType::f64);
    check_against_finite_differences(
        [&](const Tensors& a, bool save) {
          const Tensor y = kiln::detail::lstm_sequence(a[0], a[1], a[2], a[3], a[4], save);
          return kiln::sum(kiln::slice(y, 2, 0, 2 * units) * weights);
        },
        args);
  }
}

namespace {

/// A fused recurrence's form that projects its inputs (`inside`: args {x, its kernel, the
/// recurrence's other four}, save_gates, batch_major) against the form fed the projection made
/// ahead (`outside`: xp = x W, the other four, save_gates), time- and batch-major, and its
/// gradient in all six against finite differences (h's columns of y, `state_units` U of them per
/// step, weighted). `others` gives the other four arguments' shapes for a batch and units.
void check_projects_inside(
    std::int64_t gates, std::int64_t state_units, std::uint64_t seed,
    const std::function<std::vector<kiln::Shape>(std::int64_t, std::int64_t)>& others,
    const std::function<Tensor(const Tensors&, bool, bool)>& inside,
    const std::function<Tensor(const Tensor&, const Tensors&, bool)>& outside) {
  using kiln::DType;
  for (const auto& [batch, units, steps] : gradient_shapes)
    for (const bool batch_major : {false, true}) {
      INFO("batch " << batch << ", units " << units << ", batch-major " << batch_major);
      constexpr std::int64_t features = 5;
      const kiln::Shape x_shape =
          batch_major ? kiln::Shape{batch, steps, features} : kiln::Shape{steps, batch, features};
      Tensors args{kiln::random::normal(x_shape, 0, 1, seed, DType::f64),
                   kiln::random::normal({features, gates * units}, 0, 0.4, seed + 1, DType::f64)};
      for (const kiln::Shape& shape : others(batch, units))
        args.push_back(kiln::random::normal(shape, 0, 0.4, seed + args.size(), DType::f64));
      const Tensor time_major = batch_major ? kiln::transpose(args[0], {1, 0, 2}) : args[0];
      for (const bool save : {false, true}) {
        const Tensor got = inside(args, save, batch_major);
        const Tensor want = outside(kiln::matmul(time_major, args[1]), args, save);
        CHECK(got.shape() == want.shape());
        CHECK(max_diff(got, want) <= 1e-12);
      }
      const Tensor weights =
          kiln::random::normal({steps, batch, state_units * units}, 0, 1, seed + 9, DType::f64);
      check_against_finite_differences(
          [&](const Tensors& a, bool save) {
            const Tensor y = inside(a, save, batch_major);
            return kiln::sum(kiln::slice(y, 2, 0, state_units * units) * weights);
          },
          args);
    }
}

}  // namespace

TEST_CASE(
    "the fused recurrences' forms that project their inputs equal those fed x W, "
    "gradients match finite differences, time- and batch-major",
    "[fused_recurrent][autodiff]") {
  using kiln::detail::gru_sequence;
  using kiln::detail::lstm_sequence;
  SECTION("lstm_sequence_from_inputs") {
    check_projects_inside(
        4, 2, 31,
        [](std::int64_t b, std::int64_t u) {
          return std::vector<kiln::Shape>{{b, u}, {b, u}, {u, 4 * u}, {4 * u}};
        },
        [](const Tensors& a, bool save, bool batch_major) {
          return kiln::detail::lstm_sequence_from_inputs(a[0], a[1], a[2], a[3], a[4], a[5], save,
                                                         batch_major);
        },
        [](const Tensor& xp, const Tensors& a, bool save) {
          return lstm_sequence(xp, a[2], a[3], a[4], a[5], save);
        });
  }
  SECTION("gru_sequence_from_inputs") {
    check_projects_inside(
        3, 1, 41,
        [](std::int64_t b, std::int64_t u) {
          return std::vector<kiln::Shape>{{b, u}, {u, 3 * u}, {3 * u}, {3 * u}};
        },
        [](const Tensors& a, bool save, bool batch_major) {
          return kiln::detail::gru_sequence_from_inputs(a[0], a[1], a[2], a[3], a[4], a[5], save,
                                                        batch_major);
        },
        [](const Tensor& xp, const Tensors& a, bool save) {
          return gru_sequence(xp, a[2], a[3], a[4], a[5], save);
        });
  }
}

TEST_CASE("gru_sequence's gradient matches finite differences", "[fused_recurrent][autodiff]") {
  using kiln::DType;
  for (const auto& [batch, units, steps] : gradient_shapes) {
    INFO("batch " << batch << ", units " << units);
    const Tensors args{kiln::random::normal({steps, batch, 3 * units}, 0, 1, 16, DType::f64),
                       kiln::random::normal({batch, units}, 0, 0.5, 17, DType::f64),
                       kiln::random::normal({units, 3 * units}, 0, 0.3, 18, DType::f64),
                       kiln::random::normal({3 * units}, 0, 0.3, 19, DType::f64),
                       kiln::random::normal({3 * units}, 0, 0.3, 22, DType::f64)};
    const Tensor weights = kiln::random::normal({steps, batch, units}, 0, 1, 20, DType::f64);
    check_against_finite_differences(
        [&](const Tensors& a, bool save) {
          const Tensor y = kiln::detail::gru_sequence(a[0], a[1], a[2], a[3], a[4], save);
          return kiln::sum(kiln::slice(y, 2, 0, units) * weights);
        },
        args);
  }
}

namespace {

/// Every instruction set's gate panel (kernels/recurrent_step_arch.hpp) against a double-precision
/// loop: rows around the tiles of 6 and 8, K from 0 up, with and without input rows ahead of a's
/// (k_in) and with and without x, rows of every operand strided, and the columns of c past the
/// panel untouched.
template <class T>
void check_gate_panels(const kiln::detail::ElementwiseRowTable& table) {
  using kiln::detail::dtype_index;
  const kiln::DType dtype = sizeof(T) == 4 ? kiln::DType::f32 : kiln::DType::f64;
  const kiln::detail::GatePanelFn panel = table.gate_panel[dtype_index(dtype)];
  const std::int64_t w = table.gate_panel_width[dtype_index(dtype)];
  REQUIRE(panel != nullptr);
  REQUIRE(w >= 4);
  for (const std::int64_t rows :
       {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 64})
    for (const std::int64_t k : {0, 1, 3, 37})
      for (const std::int64_t k_in : {0, 2, 13})
        for (const bool with_x : {true, false}) {
          if (!with_x && k_in == 0 && k != 37) continue;  // a few forms without x are enough
          INFO(table.isa_name << ", " << rows << " rows, K " << k << ", K in " << k_in
                              << (with_x ? ", x" : ", no x"));
          const std::int64_t lda = k + 3, ldin = k_in + 5, ldx = w + 5, ldc = w + 2;
          auto values = [](std::int64_t n, double scale, std::int64_t seed) {
            std::vector<T> v(static_cast<std::size_t>(n));
            for (std::int64_t i = 0; i < n; ++i)
              v[static_cast<std::size_t>(i)] = static_cast<T>(scale * std::sin(0.7 * i + seed));
            return v;
          };
          const std::vector<T> a = values(rows * lda, 1.0, 1), b = values((k_in + k) * w, 0.5, 2),
                               x = values(rows * ldx, 2.0, 3), bias = values(w, 0.25, 4),
                               in = values(rows * ldin, 1.5, 5);
          std::vector<T> c(static_cast<std::size_t>(rows * ldc), T(-7));
          kiln::detail::GatePanelArgs args;
          args.a = a.data();
          args.lda = lda;
          args.in = k_in > 0 ? in.data() : nullptr;
          args.ldin = ldin;
          args.k_in = k_in;
          args.b = b.data();
          args.x = with_x ? x.data() : nullptr;
          args.ldx = ldx;
          args.bias = bias.data();
          args.c = c.data();
          args.ldc = ldc;
          args.rows = rows;
          args.k = k;
          args.next_x = with_x ? x.data() : nullptr;
          panel(args);
          for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t j = 0; j < ldc; ++j) {
              const T got = c[static_cast<std::size_t>(r * ldc + j)];
              if (j >= w) {
                CHECK(got == T(-7));
                continue;
              }
              double want =
                  (with_x ? static_cast<double>(x[static_cast<std::size_t>(r * ldx + j)]) : 0.0) +
                  bias[static_cast<std::size_t>(j)];
              double size = std::abs(want);
              for (std::int64_t p = 0; p < k_in + k; ++p) {
                const T left = p < k_in ? in[static_cast<std::size_t>(r * ldin + p)]
                                        : a[static_cast<std::size_t>(r * lda + p - k_in)];
                const double term =
                    static_cast<double>(left) * b[static_cast<std::size_t>(p * w + j)];
                want += term;
                size += std::abs(term);
              }
              INFO("row " << r << ", column " << j);
              CHECK(std::abs(got - want) <= 4 * std::numeric_limits<T>::epsilon() * (1 + size));
            }
        }
}

/// Every instruction set's LSTM cell row against double-precision math on the same inputs:
/// lengths around the vector width (the last vector zero-padded), with and without the saved
/// activations, and nothing written past the row.
template <class T>
void check_lstm_cells(const kiln::detail::ElementwiseRowTable& table) {
  using kiln::detail::dtype_index;
  const kiln::DType dtype = sizeof(T) == 4 ? kiln::DType::f32 : kiln::DType::f64;
  const kiln::detail::LstmCellFn cell = table.lstm_cell[dtype_index(dtype)];
  REQUIRE(cell != nullptr);
  const auto sigmoid = [](double v) { return 1 / (1 + std::exp(-v)); };
  for (const std::int64_t n : {1, 3, 4, 7, 8, 9, 16, 21, 40})
    for (const bool save : {false, true}) {
      INFO(table.isa_name << ", " << n << " units, activations saved: " << save);
      const std::int64_t zs = n + 2, gs = n + 3;  // gate blocks apart by more than n
      std::vector<T> z(static_cast<std::size_t>(4 * zs)), c_prev(static_cast<std::size_t>(n));
      for (std::size_t i = 0; i < z.size(); ++i) z[i] = static_cast<T>(3 * std::sin(1.3 * i));
      for (std::size_t i = 0; i < c_prev.size(); ++i) c_prev[i] = static_cast<T>(std::cos(i));
      std::vector<T> c(static_cast<std::size_t>(n + 1), T(-7)), h(c), gates(4 * gs, T(-7));
      kiln::detail::LstmCellArgs args;
      args.z = z.data();
      args.z_gate_stride = zs;
      args.c_prev = c_prev.data();
      args.c = c.data();
      args.h = h.data();
      args.gates = save ? gates.data() : nullptr;
      args.gates_stride = gs;
      args.n = n;
      cell(args);
      const double tol = 8 * std::numeric_limits<T>::epsilon();
      for (std::int64_t j = 0; j < n; ++j) {
        INFO("unit " << j);
        const auto at = [&](std::int64_t gate) {
          return static_cast<double>(z[static_cast<std::size_t>(gate * zs + j)]);
        };
        const double i = sigmoid(at(0)), f = sigmoid(at(1)), g = std::tanh(at(2)),
                     o = sigmoid(at(3));
        const double c_want = f * c_prev[static_cast<std::size_t>(j)] + i * g;
        CHECK(std::abs(c[static_cast<std::size_t>(j)] - c_want) <= tol * (1 + std::abs(c_want)));
        CHECK(std::abs(h[static_cast<std::size_t>(j)] - o * std::tanh(c_want)) <= 2 * tol);
        const double want_gates[4] = {i, f, g, o};
        for (std::int64_t gate = 0; gate < 4; ++gate) {
          const T got = gates[static_cast<std::size_t>(gate * gs + j)];
          if (save)
            CHECK(std::abs(got - want_gates[gate]) <= tol);
          else
            CHECK(got == T(-7));
        }
      }
      CHECK(c[static_cast<std::size_t>(n)] == T(-7));
      CHECK(h[static_cast<std::size_t>(n)] == T(-7));
      for (std::int64_t gate = 0; gate < 4; ++gate)
        for (std::int64_t j = n; j < gs; ++j)
          CHECK(gates[static_cast<std::size_t>(gate * gs + j)] == T(-7));
    }
}

/// Every instruction set's GRU cell row against double-precision math on the same inputs, as
/// check_lstm_cells: lengths around the vector width, with and without the saved columns, and
/// nothing written past the row.
template <class T>
void check_gru_cells(const kiln::detail::ElementwiseRowTable& table) {
  using kiln::detail::dtype_index;
  const kiln::DType dtype = sizeof(T) == 4 ? kiln::DType::f32 : kiln::DType::f64;
  const kiln::detail::GruCellFn cell = table.gru_cell[dtype_index(dtype)];
  REQUIRE(cell != nullptr);
  const auto sigmoid = [](double v) { return 1 / (1 + std::exp(-v)); };
  for (const std::int64_t n : {1, 3, 4, 7, 8, 9, 16, 21, 40})
    for (const bool save : {false, true}) {
      INFO(table.isa_name << ", " << n << " units, saved: " << save);
      // Each operand's gate blocks at its own stride, all more than n apart.
      const std::int64_t xs = n + 5, bs = n + 1, qs = n + 2, ss = n + 3;
      const auto values = [](std::int64_t count, double scale, double phase) {
        std::vector<T> v(static_cast<std::size_t>(count));
        for (std::size_t i = 0; i < v.size(); ++i)
          v[i] = static_cast<T>(scale * std::sin(1.3 * static_cast<double>(i) + phase));
        return v;
      };
      const std::vector<T> x = values(3 * xs, 2, 0), b = values(3 * bs, 0.5, 1),
                           q = values(3 * qs, 2, 2), h_prev = values(n, 1, 3);
      std::vector<T> h(static_cast<std::size_t>(n + 1), T(-7)), saved(4 * ss, T(-7));
      kiln::detail::GruCellArgs args;
      args.x = x.data();
      args.x_gate_stride = xs;
      args.b_in = b.data();
      args.b_gate_stride = bs;
      args.q = q.data();
      args.q_gate_stride = qs;
      args.h_prev = h_prev.data();
      args.h = h.data();
      args.saved = save ? saved.data() : nullptr;
      args.saved_stride = ss;
      args.n = n;
      cell(args);
      const double tol = 8 * std::numeric_limits<T>::epsilon();
      for (std::int64_t j = 0; j < n; ++j) {
        INFO("unit " << j);
        const auto at = [&](const std::vector<T>& v, std::int64_t stride, std::int64_t gate) {
          return static_cast<double>(v[static_cast<std::size_t>(gate * stride + j)]);
        };
        const double z = sigmoid(at(x, xs, 0) + at(b, bs, 0) + at(q, qs, 0));
        const double r = sigmoid(at(x, xs, 1) + at(b, bs, 1) + at(q, qs, 1));
        const double cand = std::tanh(at(x, xs, 2) + at(b, bs, 2) + r * at(q, qs, 2));
        const double want = z * h_prev[static_cast<std::size_t>(j)] + (1 - z) * cand;
        CHECK(std::abs(h[static_cast<std::size_t>(j)] - want) <= 4 * tol);
        const double want_saved[4] = {z, r, cand, at(q, qs, 2)};
        for (std::int64_t k = 0; k < 4; ++k) {
          const T got = saved[static_cast<std::size_t>(k * ss + j)];
          if (save)
            CHECK(std::abs(got - want_saved[k]) <= 2 * tol);
          else
            CHECK(got == T(-7));
        }
      }
      CHECK(h[static_cast<std::size_t>(n)] == T(-7));
      for (std::int64_t k = 0; k < 4; ++k)
        for (std::int64_t j = n; j < ss; ++j)
          CHECK(saved[static_cast<std::size_t>(k * ss + j)] == T(-7));
    }
}

}  // namespace

TEST_CASE("every instruction set's LSTM cell row computes c and h", "[fused_recurrent]") {
  for (const kiln::detail::ElementwiseRowTable* table : kiln::test::row_tables_of_this_cpu()) {
    check_lstm_cells<float>(*table);
    check_lstm_cells<double>(*table);
  }
}

TEST_CASE("every instruction set's GRU cell row computes h", "[fused_recurrent]") {
  for (const kiln::detail::ElementwiseRowTable* table : kiln::test::row_tables_of_this_cpu()) {
    check_gru_cells<float>(*table);
    check_gru_cells<double>(*table);
  }
}

TEST_CASE("every instruction set's gate panel computes x + b + h W", "[fused_recurrent]") {
  for (const kiln::detail::ElementwiseRowTable* table : kiln::test::row_tables_of_this_cpu()) {
    check_gate_panels<float>(*table);
    check_gate_panels<double>(*table);
  }
}

TEST_CASE("the tables above cover one part and the split into parts", "[fused_recurrent]") {
  using kiln::detail::recurrent::part_bounds;
  const std::size_t threads = static_cast<std::size_t>(kiln::detail::num_threads());
  CHECK(part_bounds(5, 3, 6).size() == 2);  // one part: [0, 6)
  CHECK(part_bounds(16, 32, 64).size() == std::min<std::size_t>(threads, 2) + 1);
  CHECK(part_bounds(12, 32, 80).size() == std::min<std::size_t>(threads, 2) + 1);
  if (threads >= 2) CHECK(part_bounds(12, 32, 80)[1] == 32);  // the uneven cut
  CHECK(part_bounds(13, 32, 72).size() == std::min<std::size_t>(threads, 2) + 1);
  if (threads >= 2) CHECK(part_bounds(13, 32, 72)[1] == 32);  // 32 and 40
  CHECK(part_bounds(9, 32, 64).size() == 2);                  // a short call stays whole
}

TEST_CASE("the fused LSTM runs from several threads at once (a busy pool)",
          "[fused_recurrent][threads]") {
  kiln::nn::LSTM layer(64, {.return_sequences = true});
  const Tensor x = kiln::random::normal({32, 16, 8}, 0, 1, 21);
  const Tensor want = layer(x);
  std::vector<Tensor> got(3);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < got.size(); ++i) threads.emplace_back([&, i] { got[i] = layer(x); });
  for (auto& t : threads) t.join();
  for (const Tensor& g : got) CHECK(max_diff(g, want) == 0);
}

TEST_CASE("lstm_sequence rejects bad arguments with errors naming it",
          "[fused_recurrent][errors]") {
  using kiln::detail::lstm_sequence;
  const Tensor xp = kiln::zeros({3, 2, 8}), h = kiln::zeros({2, 2}), w = kiln::zeros({2, 8}),
               b = kiln::zeros({8});
  const auto message = [](auto&& f) {
    try {
      f();
    } catch (const kiln::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message([&] {
          lstm_sequence(kiln::zeros({3, 2, 7}), h, h, w, b, false);
        }).starts_with("[lstm_sequence] the projected input must be"));
  CHECK(message([&] {
          lstm_sequence(xp, h, kiln::zeros({2, 3}), w, b, false);
        }).starts_with("[lstm_sequence] c0 must have h0's shape"));
  CHECK(message([&] {
          lstm_sequence(xp, h, h, kiln::zeros({8, 2}), b, false);
        }).starts_with("[lstm_sequence] the recurrent kernel must be [2, 8]"));
  CHECK(message([&] {
          lstm_sequence(kiln::cast(xp, kiln::DType::i32), h, h, w, b, false);
        }).starts_with("[lstm_sequence] needs f32 or f64"));
  CHECK(message([&] {
          lstm_sequence(xp, kiln::cast(h, kiln::DType::f64), h, w, b, false);
        }).starts_with("[lstm_sequence] dtypes differ"));
  CHECK(message([&] {
          kiln::detail::gru_sequence(kiln::zeros({3, 2, 6}), h, kiln::zeros({2, 6}),
                                     kiln::zeros({6}), kiln::zeros({5}), false);
        }).starts_with("[gru_sequence] the recurrent bias must be [6]"));
  CHECK(message([&] {
          lstm_sequence(xp, h, h, w, kiln::zeros({7}), false);
        }).starts_with("[lstm_sequence] the bias must be [8]"));
  // The form that projects its inputs: x [T, B, F] and the input kernel [F, 4U].
  using kiln::detail::lstm_sequence_from_inputs;
  const Tensor x = kiln::zeros({3, 2, 5}), wx = kiln::zeros({5, 8});
  CHECK_NOTHROW(lstm_sequence_from_inputs(x, wx, h, h, w, b, false));
  CHECK(message([&] {
          lstm_sequence_from_inputs(x, kiln::zeros({4, 8}), h, h, w, b, false);
        }).starts_with("[lstm_sequence] the input kernel must be [5, 8], got [4,8]"));
  CHECK(message([&] {
          lstm_sequence_from_inputs(kiln::zeros({3, 5}), wx, h, h, w, b, false);
        }).starts_with("[lstm_sequence] the input must be [time, batch, features]"));
  CHECK(message([&] {
          lstm_sequence_from_inputs(kiln::zeros({3, 4, 5}), wx, h, h, w, b, false);
        }).starts_with("[lstm_sequence] the input must be [time, batch, features]"));
  CHECK(message([&] {
          lstm_sequence_from_inputs(x, wx, h, h, w, b, false, true);  // batch 3, h0's is 2
        }).starts_with("[lstm_sequence] the input must be [batch, time, features] = [2, ?, ?]"));
  CHECK(lstm_sequence_from_inputs(kiln::zeros({2, 3, 5}), wx, h, h, w, b, false, true).shape() ==
        kiln::Shape{3, 2, 4});
  using kiln::detail::gru_sequence_from_inputs;
  const Tensor wg = kiln::zeros({2, 6}), bg = kiln::zeros({6});
  CHECK(gru_sequence_from_inputs(kiln::zeros({2, 3, 5}), kiln::zeros({5, 6}), h, wg, bg, bg, true,
                                 true)
            .shape() == kiln::Shape{3, 2, 10});
  CHECK(message([&] {
          gru_sequence_from_inputs(x, kiln::zeros({5, 8}), h, wg, bg, bg, false);
        }).starts_with("[gru_sequence] the input kernel must be [5, 6], got [5,8]"));
  CHECK(message([&] {
          gru_sequence_from_inputs(x, kiln::zeros({5, 6}), h, wg, bg, bg, false, true);
        }).starts_with("[gru_sequence] the input must be [batch, time, features] = [2, ?, ?]"));
  CHECK(message([&] {
          gru_sequence_from_inputs(x, kiln::zeros({5, 6}), h, wg, kiln::zeros({5}), bg, false);
        }).starts_with("[gru_sequence] the input bias must be [6]"));
  CHECK(message([&] {
          lstm_sequence_from_inputs(x, kiln::cast(wx, kiln::DType::f64), h, h, w, b, false);
        }).starts_with("[lstm_sequence] dtypes differ"));
  CHECK(message([&] {
          lstm_sequence_from_inputs(x, wx, h, kiln::zeros({2, 3}), w, b, false);
        }).starts_with("[lstm_sequence] c0 must have h0's shape"));
  CHECK(message([&] {
          kiln::detail::recurrent_weight_grad(kiln::zeros({3, 2, 14}), 2, 4, 13, 0);
        }).starts_with("[recurrent_weight_grad] columns"));
  // The gradient of an output without the saved gates.
  CHECK(message([&] {
          kiln::GradientTape tape;
          tape.watch(xp);
          const Tensor y = lstm_sequence(xp, h, h, w, b, false);
          tape.gradient(kiln::sum(y), Tensors{xp});
        }).starts_with("[lstm_sequence] the gradient needs the gate activations"));
}

TEMPLATE_TEST_CASE(
    "with a dynamic time dim the fused layers equal their scan forms, gradients "
    "too, with one trace",
    "[fused_recurrent][nn]", kiln::nn::LSTM, kiln::nn::GRU) {
  using Layer = TestType;
  constexpr std::int64_t batch = 32, features = 5, units = 64;  // two parts
  Layer fused = make_layer<Layer>(units, {.return_sequences = true, .return_state = true}, true);
  Layer scan = make_layer<Layer>(units, {.return_sequences = true, .return_state = true}, false);
  const Tensor x0 = kiln::random::normal({batch, 3, features}, 0, 1, 30);
  fused(x0);
  scan(x0);
  copy_weights(fused, scan);
  const auto spec =
      kiln::FunctionOptions{.input_signature = {kiln::TensorSpec({batch, -1, features})}};
  auto traced_fused =
      kiln::function([&](const Tensor& x) { return outputs_and_gradients(fused, x, {}); }, spec);
  auto traced_scan =
      kiln::function([&](const Tensor& x) { return outputs_and_gradients(scan, x, {}); }, spec);
  for (std::int64_t steps : {1, 9, 20}) {
    INFO("T = " << steps);
    const Tensor x = kiln::random::normal({batch, steps, features}, 0, 1, 31);
    const Tensors got = traced_fused(x), want = traced_scan(x);
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      INFO("result " << i);
      const double scale = 1 + kiln::max(kiln::abs(want[i])).item<float>();
      CHECK(max_diff(got[i], want[i]) <= 2e-5 * scale);
    }
  }
  CHECK(traced_fused.tracing_count() == 1);
}

TEST_CASE("a second-order gradient through a fused layer is an error naming the way around it",
          "[fused_recurrent][errors]") {
  kiln::nn::LSTM fused(4), scan(4, {.fused = false});
  const Tensor x = kiln::random::normal({2, 3, 2}, 0, 1, 40);
  fused(x);
  scan(x);
  copy_weights(fused, scan);
  const auto second_order = [&](kiln::nn::LSTM& layer) {
    kiln::GradientTape outer;
    outer.watch(x);
    Tensor g;
    {
      kiln::GradientTape inner;
      inner.watch(x);
      g = inner.gradient(kiln::sum(kiln::square(layer(x))), Tensors{x})[0];
    }
    return outer.gradient(kiln::sum(g), Tensors{x})[0];
  };
  CHECK(second_order(scan).shape() == x.shape());  // the scan form has second order
  CHECK_THROWS_WITH(second_order(fused),
                    Catch::Contains("a second-order gradient through a fused LSTM or GRU is not "
                                    "supported; construct the layer with fused = false"));
}

TEMPLATE_TEST_CASE(
    "from a zero state the fused LSTM's and GRU's first step still multiply h0 "
    "by every weight",
    "[fused_recurrent][nn]", kiln::nn::LSTM, kiln::nn::GRU) {
  // The fused kernels leave h0 W out of a zero state's first step only where the weights are
  // finite (per part on AVX-512's fused LSTM panels, per part and gate elsewhere): 0 times an
  // infinity or a NaN is NaN, and the result must say so as the scan's does. 40 units: whole
  // panels and a part-filled one at every instruction set's width.
  using Layer = TestType;
  constexpr std::int64_t gates = std::is_same_v<Layer, kiln::nn::LSTM> ? 4 : 3;
  constexpr std::int64_t batch = 8, features = 3, units = 40;
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<std::pair<std::int64_t, double>> poisons = {
      {0, 0.0}, {5 * gates * units + 3, inf}, {2 * units + 37, -inf}, {gates * units + 33, nan}};
  for (const kiln::DType dtype : {kiln::DType::f32, kiln::DType::f64}) {
    const Tensor x = kiln::cast(kiln::random::normal({batch, 1, features}, 0, 1, 50), dtype);
    for (const auto& [at, value] : poisons) {
      INFO(kiln::dtype_name(dtype) << ", recurrent kernel element " << at << " = " << value);
      Layer fused = make_layer<Layer>(units, {}, true);
      Layer scan = make_layer<Layer>(units, {}, false);
      fused(x);
      scan(x);
      copy_weights(fused, scan);
      const Tensor w_f64 = kiln::cast(fused.recurrent_kernel().value(), kiln::DType::f64);
      std::vector<double> w = w_f64.to_vector<double>();
      if (value != 0.0) w[static_cast<std::size_t>(at)] = value;
      const Tensor poisoned = kiln::cast(kiln::tensor(w, {units, gates * units}), dtype);
      fused.recurrent_kernel().assign(poisoned);
      scan.recurrent_kernel().assign(poisoned);
      const Tensor got_f64 = kiln::cast(fused(x), kiln::DType::f64);
      const Tensor want_f64 = kiln::cast(scan(x), kiln::DType::f64);
      const std::vector<double> got = got_f64.to_vector<double>();
      const std::vector<double> want = want_f64.to_vector<double>();
      REQUIRE(got.size() == want.size());
      std::size_t nans = 0;
      for (std::size_t i = 0; i < want.size(); ++i) {
        INFO("h element " << i);
        REQUIRE(std::isnan(got[i]) == std::isnan(want[i]));
        nans += std::isnan(want[i]) ? 1 : 0;
        if (!std::isnan(want[i])) CHECK(std::abs(got[i] - want[i]) <= 2e-5);
      }
      CHECK(nans == (value == 0.0 ? 0 : batch));  // one unit's h in every row
    }
  }
}
