#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <kiln/kiln.hpp>

#include "core/tensor_impl.hpp"

namespace {

using kiln::DType;
using kiln::Shape;
using kiln::Tensor;

/// Deterministic pseudo-random values that are exact in every dtype: multiples of 1/8 in
/// [-1, 1] for floats (so every product sum here is exact in f32), integers in [-100, 100].
std::vector<double> make_values(std::int64_t count, std::uint64_t seed, DType dtype) {
  std::vector<double> values(static_cast<std::size_t>(count));
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& v : values) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const auto r = static_cast<std::int64_t>((state >> 33) % 201) - 100;
    v = kiln::is_floating(dtype) ? static_cast<double>(r % 9) / 8.0 : static_cast<double>(r);
  }
  return values;
}

Tensor make_tensor(const std::vector<double>& values, const Shape& shape, DType dtype) {
  switch (dtype) {
    case DType::f32:
      return kiln::tensor(std::vector<float>(values.begin(), values.end()), shape);
    case DType::f64:
      return kiln::tensor(values, shape);
    case DType::i32:
      return kiln::tensor(std::vector<std::int32_t>(values.begin(), values.end()), shape);
    default:
      return kiln::tensor(std::vector<std::int64_t>(values.begin(), values.end()), shape);
  }
}

std::vector<double> to_doubles(const Tensor& t) {
  switch (t.dtype()) {
    case DType::f32: {
      auto v = t.to_vector<float>();
      return {v.begin(), v.end()};
    }
    case DType::f64:
      return t.to_vector<double>();
    case DType::i32: {
      auto v = t.to_vector<std::int32_t>();
      return {v.begin(), v.end()};
    }
    default: {
      auto v = t.to_vector<std::int64_t>();
      return {v.begin(), v.end()};
    }
  }
}

/// Naive double-precision batched matmul of a [..., m, k] and b [..., k, n] (rank >= 2,
/// NumPy-broadcast batch dims). Returns the output shape and values.
std::pair<Shape, std::vector<double>> reference_matmul(const std::vector<double>& a,
                                                       const Shape& as,
                                                       const std::vector<double>& b,
                                                       const Shape& bs) {
  const std::size_t a_batch = as.size() - 2, b_batch = bs.size() - 2;
  const std::size_t rank = std::max(a_batch, b_batch);
  const std::int64_t m = as[a_batch], k = as[a_batch + 1], n = bs[b_batch + 1];
  Shape batch;
  batch.resize(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    const std::int64_t da = d < rank - a_batch ? 1 : as[d - (rank - a_batch)];
    const std::int64_t db = d < rank - b_batch ? 1 : bs[d - (rank - b_batch)];
    batch[d] = da == 1 ? db : da;
  }
  std::vector<double> out(static_cast<std::size_t>(batch.numel() * m * n));
  for (std::int64_t i = 0; i < batch.numel(); ++i) {
    std::int64_t a_index = 0, b_index = 0, rest = i, a_mul = 1, b_mul = 1;
    for (std::size_t d = rank; d-- > 0;) {
      const std::int64_t idx = rest % batch[d];
      rest /= batch[d];
      if (d >= rank - a_batch) {
        const std::int64_t ad = as[d - (rank - a_batch)];
        a_index += (ad == 1 ? 0 : idx) * a_mul;
        a_mul *= ad;
      }
      if (d >= rank - b_batch) {
        const std::int64_t bd = bs[d - (rank - b_batch)];
        b_index += (bd == 1 ? 0 : idx) * b_mul;
        b_mul *= bd;
      }
    }
    for (std::int64_t r = 0; r < m; ++r)
      for (std::int64_t c = 0; c < n; ++c) {
        double acc = 0;
        for (std::int64_t p = 0; p < k; ++p)
          acc += a[static_cast<std::size_t>(a_index * m * k + r * k + p)] *
                 b[static_cast<std::size_t>(b_index * k * n + p * n + c)];
        out[static_cast<std::size_t>(i * m * n + r * n + c)] = acc;
      }
  }
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  return {out_shape, out};
}

void check_values(const Tensor& result, const std::vector<double>& expected) {
  const std::vector<double> got = to_doubles(result);
  REQUIRE(got.size() == expected.size());
  std::size_t mismatches = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != expected[i] && mismatches++ == 0) first = i;
  INFO("first mismatch at " << first << ": got " << (got.empty() ? 0 : got[first]) << ", want "
                            << (expected.empty() ? 0 : expected[first]));
  CHECK(mismatches == 0);
}

/// Runs kiln::matmul on generated operands and compares with the reference. Operand
/// shapes of rank 1 are promoted for the reference like NumPy.
void check_matmul(const Shape& a_shape, const Shape& b_shape, DType dtype,
                  const Shape& expected_shape) {
  INFO(a_shape.to_string() << " x " << b_shape.to_string() << " " << kiln::dtype_name(dtype));
  const auto a_values = make_values(a_shape.numel(), 1, dtype);
  const auto b_values = make_values(b_shape.numel(), 2, dtype);
  Shape a2 = a_shape, b2 = b_shape;
  if (a2.size() == 1) a2 = Shape{1, a_shape[0]};
  if (b2.size() == 1) b2 = Shape{b_shape[0], 1};
  const auto [ref_shape, ref_values] = reference_matmul(a_values, a2, b_values, b2);
  REQUIRE(ref_shape.numel() == expected_shape.numel());

  const Tensor result =
      kiln::matmul(make_tensor(a_values, a_shape, dtype), make_tensor(b_values, b_shape, dtype));
  CHECK(result.dtype() == dtype);
  CHECK(result.shape() == expected_shape);
  CHECK(result.is_contiguous());
  check_values(result, ref_values);
}

const std::vector<DType> all_dtypes = {kiln::f32, kiln::f64, kiln::i32, kiln::i64};

std::string error_of(const Tensor& a, const Tensor& b) {
  try {
    kiln::matmul(a, b);
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "no error";
}

/// A [rows, cols] view reading base [cols, rows] transposed (non-contiguous).
Tensor transposed_view(const Tensor& base) {
  const Shape& s = base.shape();
  return kiln::detail::make_view(base, Shape{s[1], s[0]}, Shape{1, s[1]}, 0);
}

}  // namespace

TEST_CASE("matmul matches the reference on 2-D shapes across both backends", "[matmul]") {
  struct Case {
    std::int64_t m, k, n;
  };
  const std::vector<Case> cases = {{1, 1, 1},      {2, 3, 4},      {32, 10, 80},  {5, 7, 3},
                                   {64, 64, 64},   {65, 64, 64},   {1, 200, 300}, {300, 200, 1},
                                   {100, 200, 50}, {300, 300, 300}};
  for (DType dtype : all_dtypes)
    for (const Case& c : cases)
      check_matmul(Shape{c.m, c.k}, Shape{c.k, c.n}, dtype, Shape{c.m, c.n});
}

TEST_CASE("matmul broadcasts batch dims", "[matmul]") {
  struct Case {
    Shape a, b, out;
  };
  const std::vector<Case> cases = {
      {{2, 3, 4, 5}, {5, 6}, {2, 3, 4, 6}},        // b shared: folds into one GEMM
      {{2, 1, 4, 5}, {3, 5, 6}, {2, 3, 4, 6}},     // both broadcast
      {{4, 5}, {3, 5, 6}, {3, 4, 6}},              // a shared
      {{3, 4, 5}, {3, 5, 6}, {3, 4, 6}},           // no broadcast
      {{1, 4, 5}, {3, 5, 6}, {3, 4, 6}},           // size-1 batch dim reused
      {{3, 1, 4, 5}, {1, 2, 5, 6}, {3, 2, 4, 6}},  // broadcast on both sides
      {{2, 3, 4, 5}, {2, 1, 5, 6}, {2, 3, 4, 6}},  // b shared within, not across
      {{16, 40, 50}, {50, 60}, {16, 40, 60}},      // folded problem large: BLAS
      {{2, 100, 80}, {2, 80, 70}, {2, 100, 70}},   // per-matrix BLAS
      {{2, 2, 70, 80}, {2, 1, 80, 70}, {2, 2, 70, 70}},
      {{50, 32, 64}, {64, 64}, {50, 32, 64}},    // folded too large: libxsmm blocks of 256 rows
      {{6, 100, 64}, {64, 64}, {6, 100, 64}},    // the same, with a shorter last block
      {{3, 300, 64}, {64, 64}, {3, 300, 64}},    // blocks of one matrix (300 rows)
      {{40, 130, 64}, {64, 64}, {40, 130, 64}},  // blocks spread over the cores (2^24 and more)
  };
  for (DType dtype : all_dtypes)
    for (const Case& c : cases) check_matmul(c.a, c.b, dtype, c.out);
}

TEST_CASE("matmul treats 1-D operands as vectors", "[matmul]") {
  struct Case {
    Shape a, b, out;
  };
  const std::vector<Case> cases = {
      {{5}, {5, 3}, {3}},         {{4, 5}, {5}, {4}},       {{5}, {5}, {}},
      {{2, 3, 4}, {4}, {2, 3}},   {{4}, {2, 4, 5}, {2, 5}}, {{300}, {300, 200}, {200}},
      {{200, 300}, {300}, {200}}, {{1}, {1}, {}},
  };
  for (DType dtype : all_dtypes)
    for (const Case& c : cases) check_matmul(c.a, c.b, dtype, c.out);
}

TEST_CASE("matmul handles zero-size operands", "[matmul]") {
  struct Case {
    Shape a, b, out;
  };
  const std::vector<Case> cases = {
      {{3, 0}, {0, 4}, {3, 4}},        // k = 0: zeros
      {{2, 3, 0}, {0, 4}, {2, 3, 4}},  // batched k = 0
      {{0}, {0}, {}},                  // empty dot product is 0
      {{0, 5}, {5, 4}, {0, 4}},        // m = 0
      {{3, 5}, {5, 0}, {3, 0}},        // n = 0
      {{0, 2, 3}, {3, 4}, {0, 2, 4}},  // empty batch
      {{2, 3}, {0, 3, 4}, {0, 2, 4}},
  };
  for (DType dtype : all_dtypes)
    for (const Case& c : cases) {
      check_matmul(c.a, c.b, dtype, c.out);
      const Tensor r = kiln::matmul(kiln::full(c.a, 1.0, dtype), kiln::full(c.b, 1.0, dtype));
      for (double v : to_doubles(r)) CHECK(v == static_cast<double>(c.a.back()));
    }
}

TEST_CASE("matmul reads non-contiguous and offset views", "[matmul]") {
  struct Case {
    std::int64_t m, k, n;
  };
  for (DType dtype : all_dtypes)
    for (const Case& c : std::vector<Case>{{3, 4, 5}, {32, 10, 80}, {120, 90, 70}}) {
      INFO(c.m << "x" << c.k << "x" << c.n << " " << kiln::dtype_name(dtype));
      const auto a_values = make_values(c.m * c.k, 3, dtype);
      const auto b_values = make_values(c.k * c.n, 4, dtype);
      const auto [shape, expected] =
          reference_matmul(a_values, Shape{c.m, c.k}, b_values, Shape{c.k, c.n});
      // Stored transposed, so the [m,k] and [k,n] views have strides [1,m] and [1,k].
      std::vector<double> a_t(a_values.size()), b_t(b_values.size());
      for (std::int64_t i = 0; i < c.m; ++i)
        for (std::int64_t p = 0; p < c.k; ++p)
          a_t[static_cast<std::size_t>(p * c.m + i)] =
              a_values[static_cast<std::size_t>(i * c.k + p)];
      for (std::int64_t p = 0; p < c.k; ++p)
        for (std::int64_t j = 0; j < c.n; ++j)
          b_t[static_cast<std::size_t>(j * c.k + p)] =
              b_values[static_cast<std::size_t>(p * c.n + j)];
      const Tensor a = transposed_view(make_tensor(a_t, Shape{c.k, c.m}, dtype));
      const Tensor b = transposed_view(make_tensor(b_t, Shape{c.n, c.k}, dtype));
      REQUIRE_FALSE(a.is_contiguous());
      check_values(kiln::matmul(a, b), expected);
      CHECK(kiln::matmul(a, b).shape() == shape);

      // Contiguous views starting one element into their buffer (unaligned data).
      std::vector<double> a_shifted = {7}, b_shifted = {9};
      a_shifted.insert(a_shifted.end(), a_values.begin(), a_values.end());
      b_shifted.insert(b_shifted.end(), b_values.begin(), b_values.end());
      const Tensor a_base = make_tensor(a_shifted, Shape{c.m * c.k + 1}, dtype);
      const Tensor b_base = make_tensor(b_shifted, Shape{c.k * c.n + 1}, dtype);
      const Tensor a_view = kiln::detail::make_view(a_base, Shape{c.m, c.k}, Shape{c.k, 1}, 1);
      const Tensor b_view = kiln::detail::make_view(b_base, Shape{c.k, c.n}, Shape{c.n, 1}, 1);
      check_values(kiln::matmul(a_view, b_view), expected);
    }
}

TEST_CASE("matmul integer arithmetic wraps", "[matmul]") {
  const std::int32_t big32 = std::numeric_limits<std::int32_t>::max();
  const Tensor a32 = kiln::tensor(std::vector<std::int32_t>{big32, big32}, Shape{1, 2});
  const Tensor b32 = kiln::tensor(std::vector<std::int32_t>{big32, 2}, Shape{2, 1});
  // big*big + big*2 = (2^31-1)^2 + 2^32 - 2, modulo 2^32 is 1 - 2 = -1.
  CHECK(kiln::matmul(a32, b32).to_vector<std::int32_t>() == std::vector<std::int32_t>{-1});

  const std::int64_t big64 = std::numeric_limits<std::int64_t>::max();
  const std::int64_t min64 = std::numeric_limits<std::int64_t>::min();
  const Tensor a64 = kiln::tensor(std::vector<std::int64_t>{big64, min64, 3}, Shape{3});
  const Tensor b64 = kiln::tensor(std::vector<std::int64_t>{2, -1, 1}, Shape{3});
  // 2*(2^63-1) = -2 (mod 2^64); -1 * -2^63 = -2^63; total -2 - 2^63 + 3 = 2^63 + 1 = min + 1.
  CHECK(kiln::matmul(a64, b64).item<std::int64_t>() == min64 + 1);
}

TEST_CASE("matmul is safe to call from several threads", "[matmul][threads]") {
  std::vector<std::vector<std::int64_t>> sizes = {{7, 9, 11}, {8, 9, 10}, {32, 10, 80}, {3, 3, 3}};
  std::vector<std::string> failures(2);
  auto worker = [&](std::size_t id) {
    for (int round = 0; round < 20; ++round)
      for (const auto& s : sizes) {
        const Tensor a = kiln::full(Shape{s[0], s[1]}, 0.5, kiln::f32);
        const Tensor b = kiln::full(Shape{s[1], s[2]}, static_cast<double>(id + 1), kiln::f32);
        const float want = 0.5f * static_cast<float>(s[1]) * static_cast<float>(id + 1);
        for (float v : kiln::matmul(a, b).to_vector<float>())
          if (v != want) failures[id] = "wrong value";
      }
  };
  std::thread t0(worker, 0), t1(worker, 1);
  t0.join();
  t1.join();
  CHECK(failures[0].empty());
  CHECK(failures[1].empty());
}

TEST_CASE("matmul rejects bad operands", "[matmul]") {
  const Tensor f = kiln::zeros(Shape{32, 10});
  struct Case {
    Tensor a, b;
    std::string message;
  };
  const std::vector<Case> cases = {
      {f, kiln::zeros(Shape{20, 80}), "[matmul] inner dimensions differ: [32,10] x [20,80]"},
      {kiln::zeros(Shape{3}), kiln::zeros(Shape{4}), "[matmul] inner dimensions differ: [3] x [4]"},
      {kiln::zeros(Shape{2, 3, 4}), kiln::zeros(Shape{5}),
       "[matmul] inner dimensions differ: [2,3,4] x [5]"},
      {kiln::zeros(Shape{2, 4, 5}), kiln::zeros(Shape{3, 5, 6}),
       "[matmul] batch dimensions of [2,4,5] and [3,5,6] cannot be broadcast"},
      {kiln::scalar(1.0f), f, "[matmul] operands must be at least 1-D, got shapes [] and [32,10]"},
      {f, kiln::scalar(1.0f), "[matmul] operands must be at least 1-D, got shapes [32,10] and []"},
      {f, kiln::zeros(Shape{10, 4}, kiln::f64), "[matmul] dtypes differ: f32 vs f64"},
      {kiln::zeros(Shape{2, 2}, kiln::boolean), kiln::zeros(Shape{2, 2}, kiln::boolean),
       "[matmul] dtype bool is not supported ([2,2] x [2,2]); use kiln::cast"},
      {Tensor(), f, "[matmul] argument 0 is an undefined tensor"},
      {f, Tensor(), "[matmul] argument 1 is an undefined tensor"},
      {kiln::zeros(Shape{1LL << 40, 0}), kiln::zeros(Shape{0, 1LL << 40}),
       "[matmul] result shape [1099511627776,1099511627776] is too large"},
  };
  for (const Case& c : cases) CHECK_THAT(error_of(c.a, c.b), Catch::StartsWith(c.message));
}

TEST_CASE("matmul reads a transposed first operand in place", "[matmul]") {
  // Small (libxsmm, transposed operand), large (BLAS, transposed), batched b, f64.
  const std::vector<std::array<std::int64_t, 3>> shapes = {
      {3, 2, 4}, {16, 64, 256}, {2, 5, 3}, {200, 150, 180}};
  for (const auto& [m, k, n] : shapes) {
    for (const kiln::DType dtype : {kiln::f32, kiln::f64}) {
      INFO("m " << m << " k " << k << " n " << n << " dtype " << kiln::dtype_name(dtype));
      const kiln::Tensor at = kiln::cast(kiln::random::normal({k, m}, 0, 1, 5), dtype);
      const kiln::Tensor b = kiln::cast(kiln::random::normal({k, n}, 0, 1, 6), dtype);
      const kiln::Tensor b3 = kiln::cast(kiln::random::normal({2, k, n}, 0, 1, 7), dtype);
      const kiln::Tensor a = kiln::transpose(at);
      CHECK_FALSE(a.is_contiguous());
      const double tol = dtype == kiln::f32 ? 1e-4 : 1e-10;
      const auto max_diff = [](const kiln::Tensor& x, const kiln::Tensor& y) {
        return kiln::cast(kiln::max(kiln::abs(x - y)), kiln::f64).item<double>();
      };
      CHECK(max_diff(kiln::matmul(a, b), kiln::matmul(a.contiguous(), b)) <= tol);
      CHECK(max_diff(kiln::matmul(a, b3), kiln::matmul(a.contiguous(), b3)) <= tol);
    }
  }
}

TEST_CASE("matmul reads row-strided operands (slices of wider matrices) in place", "[matmul]") {
  const std::vector<std::array<std::int64_t, 3>> shapes = {
      {3, 2, 4}, {32, 10, 80}, {200, 150, 180}};
  for (const auto& [m, k, n] : shapes) {
    INFO("m " << m << " k " << k << " n " << n);
    const Tensor wide_a = kiln::random::normal({m, k + 3}, 0, 1, 8);
    const Tensor wide_b = kiln::random::normal({k, n + 5}, 0, 1, 9);
    const Tensor a = kiln::slice(wide_a, {{0, m}, {1, k + 1}});
    const Tensor b = kiln::slice(wide_b, {{0, k}, {2, n + 2}});
    const Tensor a3 = kiln::random::normal({2, m, k}, 0, 1, 10);
    const auto max_diff = [](const Tensor& x, const Tensor& y) {
      return kiln::max(kiln::abs(x - y)).item<float>();
    };
    CHECK(max_diff(kiln::matmul(a, b), kiln::matmul(a.contiguous(), b.contiguous())) <= 1e-4f);
    CHECK(max_diff(kiln::matmul(a3, b), kiln::matmul(a3, b.contiguous())) <= 1e-4f);
    // A transposed and row-strided first operand ([k, m] slice of [k, m + 4], transposed).
    const Tensor at =
        kiln::transpose(kiln::slice(kiln::random::normal({k, m + 4}, 0, 1, 11), {{0, k}, {0, m}}));
    CHECK(max_diff(kiln::matmul(at, b), kiln::matmul(at.contiguous(), b.contiguous())) <= 1e-4f);
  }
}
