// The layer_norm and rms_norm primitives (nn::layer_norm and nn::rms_norm over contiguous static
// rows): values against long double on long and short rows, with and without gamma and beta,
// eager and traced alike, every instruction set's row kernel called directly, special values
// against the composite, the dtypes computed in f32, gradients through long rows, where the
// composite still runs, and the graph's view of them. Small shapes' values, gradients and errors
// are in test_nn_functional.cpp, the ONNX export in test_onnx.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include <kiln/kiln.hpp>

#include "kernels/kernel.hpp"
#include "nn_ops_test_support.hpp"
#include "simd_test_support.hpp"

using kiln::Shape;
using kiln::Tensor;

namespace {

/// One normalization: layer_norm (centered) or rms_norm, over rows of n, with gamma and beta
/// rows where given (empty for none).
struct Norm {
  bool centered = true;
  std::vector<double> gamma, beta;
  double epsilon = 1e-5;
};

/// The normalized rows of x (rows of n) in long double, each with the bound a float result of
/// dtype epsilon `ulp` may be off by: 16 roundings of each term of (x - mean) s gamma, of
/// mean s gamma and of beta. The mean and the sum of squares add thousands of terms in float
/// accumulators (within about 2 sqrt(terms) roundings, so far less than that bound) and scale
/// rounds once; every other step is one rounding.
struct Reference {
  std::vector<long double> value, bound;
};

Reference reference(const std::vector<double>& x, std::size_t n, const Norm& norm, double ulp) {
  Reference r;
  for (std::size_t row = 0; row * n < x.size(); ++row) {
    const double* v = x.data() + row * n;
    long double mean = 0, squares = 0;
    if (norm.centered) {
      for (std::size_t i = 0; i < n; ++i) mean += v[i];
      mean /= static_cast<long double>(n);
    }
    for (std::size_t i = 0; i < n; ++i) squares += (v[i] - mean) * (v[i] - mean);
    const long double scale = 1 / std::sqrt(squares / static_cast<long double>(n) + norm.epsilon);
    for (std::size_t i = 0; i < n; ++i) {
      const long double g = norm.gamma.empty() ? 1 : norm.gamma[i];
      const long double b = norm.beta.empty() ? 0 : norm.beta[i];
      r.value.push_back((v[i] - mean) * scale * g + b);
      r.bound.push_back(
          16 * ulp *
              ((std::fabs(v[i] - mean) + std::fabs(mean)) * scale * std::fabs(g) + std::fabs(b)) +
          std::numeric_limits<double>::min());
    }
  }
  return r;
}

/// The first element of `got` off its reference by more than the bound (a NaN reference wants a
/// NaN), or -1.
std::int64_t first_off(const std::vector<double>& got, const Reference& want) {
  if (got.size() != want.value.size()) return 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const long double w = want.value[i];
    const bool ok = std::isnan(w) ? std::isnan(got[i]) : std::fabs(got[i] - w) <= want.bound[i];
    if (!ok) return static_cast<std::int64_t>(i);
  }
  return -1;
}

/// The function under test: nn::layer_norm or nn::rms_norm of x over [first, rank) with `norm`'s
/// gamma and beta as tensors of the rows' shape (tail) in x's dtype.
Tensor normalized(const Tensor& x, std::int64_t first, const Norm& norm, const Shape& tail) {
  const auto row_tensor = [&](const std::vector<double>& v) {
    return v.empty() ? Tensor() : kiln::cast(kiln::tensor(v, tail), x.dtype());
  };
  if (norm.centered)
    return kiln::nn::layer_norm(x, row_tensor(norm.gamma), row_tensor(norm.beta), first,
                                norm.epsilon);
  return kiln::nn::rms_norm(x, row_tensor(norm.gamma), first, norm.epsilon);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data(), cb.data(),
                     static_cast<std::size_t>(a.size()) * kiln::dtype_size(a.dtype())) == 0;
}

/// The norms the tests run on rows of n: layer_norm with gamma and beta, with gamma only, with
/// beta only and with neither (epsilon 1e-3), rms_norm with gamma and without.
std::vector<Norm> norms_for(std::size_t n) {
  const std::vector<double> gamma = kiln::test::host_values(n, 7, 0.5, 1.5);
  const std::vector<double> beta = kiln::test::host_values(n, 8, -1, 1);
  const auto as_f32 = [](std::vector<double> v) {
    for (double& e : v) e = static_cast<float>(e);
    return v;
  };
  return {{true, as_f32(gamma), as_f32(beta)},
          {true, as_f32(gamma), {}},
          {true, {}, as_f32(beta)},
          {true, {}, {}, 1e-3},
          {false, as_f32(gamma), {}},
          {false, {}, {}}};
}

const char* kind(const Norm& n) { return n.centered ? "layer_norm" : "rms_norm"; }

}  // namespace

TEST_CASE("the layer_norm and rms_norm primitives are accurate, eager and traced alike",
          "[reduce][nn_ops]") {
  const kiln::test::StreamAbove8MiB streamed;
  struct Case {
    Shape shape;
    std::int64_t first;
  };
  // The two large shapes run two of the norms (layer_norm with gamma and beta, rms_norm with
  // gamma); the others all six.
  const Case cases[] = {
      {{512, 1024}, 1},    // 2 MiB: split over threads
      {{2560, 1024}, -1},  // 10 MiB: streamed stores, split over threads
      {{37, 3}, 1},        // short rows
      {{5}, 0},            // one row shorter than a vector
      {{2, 10001}, 1},     // several blocks of the sums
      {{3, 4, 65}, 1},     // rows of two axes
      {{6, 70, 1, 1}, 1},  // trailing dims of size 1
  };
  for (const Case& c : cases) {
    const std::int64_t first =
        c.first < 0 ? c.first + static_cast<std::int64_t>(c.shape.size()) : c.first;
    Shape tail;
    for (std::size_t d = static_cast<std::size_t>(first); d < c.shape.size(); ++d)
      tail.push_back(c.shape[d]);
    const auto n = static_cast<std::size_t>(tail.numel());
    CAPTURE(c.shape, first);
    const Tensor x64 = kiln::random::normal(c.shape, 0.5, 3,
                                            static_cast<std::uint64_t>(c.shape.numel()), kiln::f64);
    const bool large = c.shape.numel() >= (std::int64_t{1} << 19);
    const std::vector<Norm> all = norms_for(n);
    for (std::size_t k = 0; k < all.size(); ++k) {
      if (large && k != 0 && k != 4) continue;
      const Norm& norm = all[k];
      CAPTURE(kind(norm), norm.gamma.size(), norm.beta.size());
      for (kiln::DType dtype : {kiln::f32, kiln::f64}) {
        CAPTURE(kiln::dtype_name(dtype));
        const Tensor x = kiln::cast(x64, dtype);
        const Tensor eager = normalized(x, c.first, norm, tail);
        auto traced =
            kiln::function([&](const Tensor& t) { return normalized(t, c.first, norm, tail); });
        CHECK(same_bits(traced(x), eager));
        const double ulp = dtype == kiln::f32 ? 0x1p-24 : 0x1p-53;
        CHECK(first_off(kiln::test::values_of(eager),
                        reference(kiln::test::values_of(x), n, norm, ulp)) == -1);
      }
    }
  }
}

TEST_CASE("every instruction set's layer_norm and rms_norm rows are accurate", "[reduce][simd]") {
  const auto tables = kiln::test::row_tables_of_this_cpu();
  const auto f32 = kiln::detail::dtype_index(kiln::f32), f64 = kiln::detail::dtype_index(kiln::f64);
  for (const std::int64_t n :
       {1, 2, 7, 8, 15, 16, 17, 63, 64, 65, 129, 1000, 2048, 2049, 4097, 10001}) {
    CAPTURE(n);
    const std::vector<float> x32 =
        kiln::random::normal({n}, -2, 4, static_cast<std::uint64_t>(n)).to_vector<float>();
    const std::vector<double> x64(x32.begin(), x32.end());
    for (const Norm& norm : norms_for(static_cast<std::size_t>(n))) {
      CAPTURE(kind(norm), norm.gamma.size(), norm.beta.size());
      const std::vector<float> g32(norm.gamma.begin(), norm.gamma.end()),
          b32(norm.beta.begin(), norm.beta.end());
      const auto row_of = [](const auto& v) { return v.empty() ? nullptr : v.data(); };
      for (const auto* table : tables) {
        CAPTURE(table->isa_name);
        const auto* rows = norm.centered ? table->layer_norm_row : table->rms_norm_row;
        std::vector<double> y64(x64.size());
        std::vector<float> y32(x32.size());
        rows[f64](x64.data(), row_of(norm.gamma), row_of(norm.beta), y64.data(), n, norm.epsilon,
                  nullptr);
        rows[f32](x32.data(), row_of(g32), row_of(b32), y32.data(), n, norm.epsilon,
                  x64.data());  // asks for another row
        CHECK(first_off(y64, reference(x64, static_cast<std::size_t>(n), norm, 0x1p-53)) == -1);
        CHECK(first_off({y32.begin(), y32.end()},
                        reference(x64, static_cast<std::size_t>(n), norm, 0x1p-24)) == -1);
        std::vector<float> in_place = x32;  // out == in, as the kernel allows
        rows[f32](in_place.data(), row_of(g32), row_of(b32), in_place.data(), n, norm.epsilon,
                  nullptr);
        CHECK(in_place == y32);
      }
    }
  }
}

TEST_CASE("layer_norm and rms_norm rows with special values give the composite's values",
          "[reduce][nn_ops]") {
  // A NaN or an infinity anywhere in a row: layer_norm's row is all NaN (its mean is NaN or
  // inf); rms_norm's is NaN everywhere with a NaN, and with an infinity NaN there and 0
  // elsewhere (x * rsqrt(inf)). Rows of 1e30 (whose f32 squares overflow), constant rows (0 or
  // tiny: the mean rounds) and rows of -0. The composite is the formula in kiln ops.
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const std::int64_t width : {4, 67, 1031}) {
    CAPTURE(width);
    const std::vector<float> base =
        kiln::random::normal({width}, 0, 3, static_cast<std::uint64_t>(width)).to_vector<float>();
    std::vector<float> values;
    for (const std::int64_t at : {std::int64_t{0}, width / 2, width - 1})
      for (const float v : {nan, inf, -inf}) {
        values.insert(values.end(), base.begin(), base.end());
        values[values.size() - static_cast<std::size_t>(width - at)] = v;
      }
    values.insert(values.end(), base.begin(), base.end());
    values.insert(values.end(), static_cast<std::size_t>(width), 1e30f);
    values.insert(values.end(), static_cast<std::size_t>(width), 0.1f);
    values.insert(values.end(), static_cast<std::size_t>(width), -0.f);
    const Tensor x = kiln::reshape(kiln::tensor<float>(values),
                                   {static_cast<std::int64_t>(values.size()) / width, width});
    for (const bool centered : {true, false}) {
      CAPTURE(centered);
      const double epsilon = centered ? 1e-5 : 1e-6;
      const Tensor got =
          centered ? kiln::nn::layer_norm(x, Tensor(), Tensor()) : kiln::nn::rms_norm(x, Tensor());
      const Tensor shifted = centered ? x - kiln::mean(x, {1}, true) : x;
      const Tensor want =
          shifted * kiln::rsqrt(kiln::mean(kiln::square(shifted), {1}, true) + epsilon);
      const std::vector<double> g = kiln::test::values_of(got), w = kiln::test::values_of(want);
      REQUIRE(g.size() == w.size());
      for (std::size_t i = 0; i < g.size(); ++i) {
        CAPTURE(i, g[i], w[i]);
        if (std::isnan(w[i]) || std::isnan(g[i]))
          CHECK((std::isnan(w[i]) && std::isnan(g[i])));
        else  // near 0 (constant rows): the mean's rounding, times 1 / sqrt(epsilon)
          CHECK(std::fabs(g[i] - w[i]) <=
                1e-5 * std::fabs(w[i]) + (std::fabs(w[i]) < 1e-2 ? 1e-3 : 1e-6));
      }
    }
  }
}

TEST_CASE("layer_norm and rms_norm in f16 and bf16 compute in f32", "[reduce][nn_ops][dtypes]") {
  const Tensor x = kiln::random::normal({9, 100}, 0, 2, 31);
  const Tensor gamma = kiln::random::uniform({100}, 0.5, 1.5, 32);
  const Tensor beta = kiln::random::uniform({100}, -1, 1, 33);
  for (kiln::DType dtype : {kiln::f16, kiln::bf16}) {
    CAPTURE(kiln::dtype_name(dtype));
    const auto in = [&](const Tensor& t) { return kiln::cast(t, dtype); };
    const auto in_f32 = [&](const Tensor& t) { return kiln::cast(in(t), kiln::f32); };
    const Tensor ln = kiln::nn::layer_norm(in(x), in(gamma), in(beta));
    CHECK(ln.dtype() == dtype);
    CHECK(same_bits(
        ln, kiln::cast(kiln::nn::layer_norm(in_f32(x), in_f32(gamma), in_f32(beta)), dtype)));
    const Tensor rms = kiln::nn::rms_norm(in(x), in(gamma));
    CHECK(same_bits(rms, kiln::cast(kiln::nn::rms_norm(in_f32(x), in_f32(gamma)), dtype)));
  }
}

TEST_CASE("layer_norm and rms_norm gradients through long rows match finite differences",
          "[reduce][nn_ops][autodiff]") {
  const Tensor x = kiln::random::normal({3, 2, 70}, 0.3, 1.5, 41, kiln::f64);
  const Tensor gamma = kiln::random::uniform({70}, 0.5, 1.5, 42, kiln::f64);
  const Tensor gamma2 = kiln::random::uniform({2, 70}, 0.5, 1.5, 44, kiln::f64);
  const Tensor beta = kiln::random::uniform({70}, -1, 1, 43, kiln::f64);
  const Tensor beta2 = kiln::random::uniform({1, 70}, -1, 1, 45, kiln::f64);
  using kiln::test::Args;
  kiln::test::check_gradient(
      "layer_norm axis -1",
      [](const Args& a) { return kiln::nn::layer_norm(a[0], a[1], a[2], -1, 1e-3); },
      {x, gamma, beta});
  kiln::test::check_gradient(
      "layer_norm axis 1, gamma of both axes",
      [](const Args& a) { return kiln::nn::layer_norm(a[0], a[1], Tensor(), 1); }, {x, gamma2});
  kiln::test::check_gradient(
      "layer_norm over everything",
      [](const Args& a) { return kiln::nn::layer_norm(a[0], Tensor(), a[1], 0); }, {x, beta2});
  kiln::test::check_gradient(
      "rms_norm axis -1", [](const Args& a) { return kiln::nn::rms_norm(a[0], a[1]); }, {x, gamma});
  kiln::test::check_gradient("rms_norm axis 1 without gamma",
                             [](const Args& a) { return kiln::nn::rms_norm(a[0], Tensor(), 1); },
                             {x});
  // Second order: the gradient is written in kiln ops, so it differentiates again.
  kiln::test::check_gradient("the gradient of layer_norm",
                             [&](const Args& a) {
                               kiln::GradientTape tape;
                               tape.watch(a[0]);
                               const Tensor y = kiln::nn::layer_norm(a[0], gamma, beta);
                               return tape.gradient(kiln::sum(y * y * y), a[0]);
                             },
                             {x});
}

TEST_CASE("the normalization primitives run where the rows are contiguous and static",
          "[reduce][nn_ops]") {
  const Tensor gamma = kiln::random::uniform({6}, 0.5, 1.5, 51);
  const auto graph_of = [](const auto& f, const Tensor& x) {
    return f.get_concrete_function(x).graph().to_dot();
  };
  auto ln = kiln::function([&](const Tensor& x) { return kiln::nn::layer_norm(x, gamma, {}); });
  auto rms = kiln::function([&](const Tensor& x) { return kiln::nn::rms_norm(x, gamma); });
  const Tensor x = kiln::random::normal({5, 6}, 0, 1, 52);
  CHECK(graph_of(ln, x).find("layer_norm") != std::string::npos);
  CHECK(graph_of(rms, x).find("rms_norm") != std::string::npos);
  CHECK(graph_of(ln, x).find("epsilon=1e-05") != std::string::npos);
  // A dynamic batch: the composite, with the same values within rounding.
  kiln::FunctionOptions dynamic;
  dynamic.input_signature = {kiln::TensorSpec({-1, 6})};
  auto ln_dynamic =
      kiln::function([&](const Tensor& t) { return kiln::nn::layer_norm(t, gamma, {}); }, dynamic);
  const std::string graph = ln_dynamic.get_concrete_function(x).graph().to_dot();
  CHECK(graph.find("layer_norm") == std::string::npos);
  const std::vector<double> a = kiln::test::values_of(ln_dynamic(x)),
                            b = kiln::test::values_of(ln(x));
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).margin(1e-6));
  // A transposed x is copied into rows first; an empty x keeps the composite.
  const Tensor xt = kiln::transpose(kiln::random::normal({6, 5}, 0, 1, 53));
  CHECK(same_bits(kiln::nn::rms_norm(xt, gamma), kiln::nn::rms_norm(xt.contiguous(), gamma)));
  CHECK(kiln::nn::layer_norm(kiln::zeros({0, 6}), gamma, {}).shape() == Shape{0, 6});
}

TEST_CASE("an exported function keeps its layer_norm and rms_norm", "[reduce][nn_ops][export]") {
  const Tensor gamma = kiln::random::uniform({2, 33}, 0.5, 1.5, 61);
  const Tensor beta = kiln::random::uniform({33}, -1, 1, 62);
  auto f = kiln::function([&](const Tensor& x) {
    return kiln::nn::layer_norm(x, gamma, beta, 1, 1e-3) + kiln::nn::rms_norm(x, Tensor(), -1);
  });
  const Tensor x = kiln::random::normal({4, 2, 33}, 0, 2, 63);
  const auto path = std::filesystem::temp_directory_path() /
                    ("kiln_normalize_rows_" + std::to_string(::getpid()) + ".kiln");
  kiln::export_function(f.get_concrete_function(x), path);
  const kiln::LoadedFunction loaded = kiln::load_function(path);
  std::filesystem::remove(path);
  CHECK(same_bits(loaded(x).at(0), f(x)));
}
