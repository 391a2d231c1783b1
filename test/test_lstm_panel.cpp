// The fused LSTM panel (LstmPanelFn, kernels/recurrent_step_arch.hpp) of every instruction set
// that has one, against double-precision math on the same inputs.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/elementwise_table.hpp"
#include "simd_test_support.hpp"

namespace {

/// One fused panel over rows around its tile (6) and batch 64, with and without input rows
/// (k_in), rows of h (k) and x, with and without the gates saved; every operand's rows strided,
/// and nothing written past a gate block of the outputs.
template <class T>
void check_lstm_panels(const kiln::detail::ElementwiseRowTable& table) {
  using kiln::detail::dtype_index;
  const kiln::DType dtype = sizeof(T) == 4 ? kiln::DType::f32 : kiln::DType::f64;
  const kiln::detail::LstmPanelFn panel = table.lstm_panel[dtype_index(dtype)];
  if (panel == nullptr) return;  // this instruction set runs gate panels and the cell row
  const std::int64_t w = table.lstm_panel_units[dtype_index(dtype)];
  REQUIRE(w >= 4);
  const auto sigmoid = [](double v) { return 1 / (1 + std::exp(-v)); };
  const auto values = [](std::int64_t n, double scale, std::int64_t seed) {
    std::vector<T> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
      v[static_cast<std::size_t>(i)] = static_cast<T>(
          scale * std::sin(0.7 * static_cast<double>(i) + static_cast<double>(seed)));
    return v;
  };
  for (const std::int64_t rows : {1, 2, 5, 6, 7, 10, 11, 12, 13, 17, 64})
    for (const std::int64_t k : {0, 3, 8, 37})  // none, a rest of k, whole steps of 4, both
      for (const std::int64_t k_in : {0, 2, 4, 13})
        for (const bool with_x : {true, false})
          for (const bool save : {true, false}) {
            if (k == 0 && k_in == 0 && !with_x) continue;
            INFO(table.isa_name << ", " << rows << " rows, K " << k << ", K in " << k_in
                                << (with_x ? ", x" : ", no x") << (save ? ", gates" : ""));
            const std::int64_t lda = k + 3, ldin = k_in + 5, xs = w + 2, ldx = 4 * xs + 1;
            const std::int64_t ldp = w + 4, gs = w + 1, ld_out = 6 * gs;
            const std::vector<T> a = values(rows * lda, 1.0, 1),
                                 b = values((k_in + k) * 4 * w, 0.4 / std::sqrt(1.0 + k + k_in), 2),
                                 x = values(rows * ldx, 2.0, 3), bias = values(4 * w, 0.25, 4),
                                 in = values(rows * ldin, 1.5, 5),
                                 c_prev = values(rows * ldp, 1.0, 6);
            std::vector<T> out(static_cast<std::size_t>(rows * ld_out), T(-7));
            kiln::detail::LstmPanelArgs args;
            args.a = a.data();
            args.lda = lda;
            args.in = k_in > 0 ? in.data() : nullptr;
            args.ldin = ldin;
            args.k_in = k_in;
            args.b = b.data();
            args.x = with_x ? x.data() : nullptr;
            args.ldx = ldx;
            args.x_gate_stride = xs;
            args.bias = bias.data();
            args.c_prev = c_prev.data();
            args.ld_c_prev = ldp;
            args.h = out.data();
            args.c = out.data() + gs;
            args.gates = save ? out.data() + 2 * gs : nullptr;
            args.ld_out = ld_out;
            args.gates_stride = gs;
            args.rows = rows;
            args.k = k;
            args.next_b = b.data();
            args.next_b_bytes = static_cast<std::int64_t>(b.size() * sizeof(T));
            panel(args);
            const double eps = std::numeric_limits<T>::epsilon();
            for (std::int64_t r = 0; r < rows; ++r) {
              const T* row = out.data() + r * ld_out;
              for (std::int64_t j = 0; j < w; ++j) {
                INFO("row " << r << ", unit " << j);
                double z[4], size[4];
                for (std::int64_t gate = 0; gate < 4; ++gate) {
                  const std::int64_t col = gate * w + j;
                  z[gate] = (with_x ? static_cast<double>(
                                          x[static_cast<std::size_t>(r * ldx + gate * xs + j)])
                                    : 0.0) +
                            bias[static_cast<std::size_t>(col)];
                  size[gate] = std::abs(z[gate]);
                  for (std::int64_t p = 0; p < k_in + k; ++p) {
                    const T left = p < k_in ? in[static_cast<std::size_t>(r * ldin + p)]
                                            : a[static_cast<std::size_t>(r * lda + p - k_in)];
                    const double term =
                        static_cast<double>(left) * b[static_cast<std::size_t>(p * 4 * w + col)];
                    z[gate] += term;
                    size[gate] += std::abs(term);
                  }
                }
                // Each activation moves by at most its input's error (slopes <= 1), which is a
                // few ulp of the sum's terms.
                double err = 0;
                for (const double s : size) err = std::max(err, 4 * eps * (1 + s));
                const double i = sigmoid(z[0]), f = sigmoid(z[1]), g = std::tanh(z[2]),
                             o = sigmoid(z[3]);
                const double c = f * c_prev[static_cast<std::size_t>(r * ldp + j)] + i * g;
                const double tol = 16 * eps + 4 * err;
                CHECK(std::abs(row[j] - o * std::tanh(c)) <= tol);
                CHECK(std::abs(row[gs + j] - c) <= tol * (1 + std::abs(c)));
                const double gates[4] = {i, f, g, o};
                for (std::int64_t gate = 0; gate < 4; ++gate) {
                  const T got = row[(2 + gate) * gs + j];
                  if (save)
                    CHECK(std::abs(got - gates[gate]) <= 8 * eps + err);
                  else
                    CHECK(got == T(-7));
                }
              }
              for (std::int64_t block = 0; block < 6; ++block)  // past each gate block
                CHECK(row[block * gs + w] == T(-7));
            }
          }
}

}  // namespace

TEST_CASE("every instruction set's fused LSTM panel computes the product and the cell",
          "[fused_recurrent]") {
  for (const kiln::detail::ElementwiseRowTable* table : kiln::test::row_tables_of_this_cpu()) {
    check_lstm_panels<float>(*table);
    check_lstm_panels<double>(*table);
  }
}
