// The GEMM backends (lib/kernels/gemm.hpp): every backend this build and CPU can run, forced in
// turn, against a double-precision reference on shapes that exercise its paths (one libxsmm
// kernel, tiles with edge tiles in both directions, tiles spread over the pool, a transposed or
// row-strided operand, batches merged into one product, a plan's accumulating epilogue, a
// product scaled by an alpha given per call). The operands are multiples of 1/8, so every sum
// is exact in f32 and results must match exactly, whatever order a library adds in. scripts/test.sh
// runs this once per KILN_SIMD level.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <kiln/kiln.hpp>

#include "core/tensor_impl.hpp"
#include "kernels/elementwise_table.hpp"
#include "kernels/gemm.hpp"
#include "kernels/kernel.hpp"

namespace {

using kiln::DType;
using kiln::Shape;
using kiln::Tensor;
using kiln::detail::GemmBackend;

/// Forces a backend for its lifetime, then restores the one forced before (KILN_GEMM's, when the
/// suite runs under it), so that later tests still run the backend they were asked to.
struct ForcedBackend {
  explicit ForcedBackend(GemmBackend b) : previous(kiln::detail::forced_gemm_backend()) {
    kiln::detail::set_gemm_backend(b);
  }
  ~ForcedBackend() { kiln::detail::set_gemm_backend(previous); }
  ForcedBackend(const ForcedBackend&) = delete;
  ForcedBackend& operator=(const ForcedBackend&) = delete;
  GemmBackend previous;
};

/// Multiples of 1/8 in [-1, 1], from a seed.
Tensor eighths(const Shape& shape, std::uint64_t seed, DType dtype) {
  return kiln::cast(kiln::round(kiln::random::uniform(shape, -8, 8, seed, kiln::f64)) / 8.0, dtype);
}

/// The double-precision product of the last two dims, batch dims broadcast by matmul itself
/// (in f64 every sum of these values is exact, so the reference is the exact product).
Tensor reference(const Tensor& a, const Tensor& b) {
  return kiln::matmul(kiln::cast(a, kiln::f64), kiln::cast(b, kiln::f64));
}

/// Empty when got equals want exactly, else where it first differs.
std::string exact_difference(const Tensor& got, const Tensor& want) {
  if (got.shape() != want.shape()) return "shape " + got.shape().to_string();
  const std::vector<double> g = kiln::cast(got, kiln::f64).to_vector<double>();
  const std::vector<double> w = want.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i)
    if (g[i] != w[i])
      return "element " + std::to_string(i) + ": " + std::to_string(g[i]) + " against " +
             std::to_string(w[i]);
  return "";
}

struct Case {
  std::string name;
  Shape a, b;
  bool transpose_a = false;  // a is read through a transposed view of a [k, m] tensor
  bool slice_b = false;      // b is a column slice of a wider matrix (rows apart by more than n)
  bool transpose_b = false;  // b is read through a transposed view of an [n, k] tensor
};

std::vector<Case> cases() {
  return {
      {"small, one kernel", {32, 20}, {20, 80}},
      // C's columns fill whole 8-float vectors, its rows do not: libxsmm with AVX2 code runs
      // these with C transposed (gemm.cpp, xsmm_transposed_wins).
      {"small, C transposed", {32, 80}, {80, 20}},
      {"small, C transposed, transposed a", {48, 100}, {100, 12}, true},
      {"small, C transposed, row-strided b", {64, 64}, {64, 20}, false, true},
      {"tiles with edges both ways", {301, 97}, {97, 541}},
      {"spread over the pool", {130, 257}, {257, 300}},
      {"an RNN step", {64, 256}, {256, 1024}},
      {"long contraction", {64, 1500}, {1500, 96}},
      {"transposed a", {200, 330}, {330, 150}, true},
      {"row-strided b", {150, 140}, {140, 210}, false, true},
      // Large enough to be read in place (by oneDNN or OpenBLAS; libxsmm cannot), and small.
      {"transposed b", {150, 300}, {300, 400}, false, false, true},
      {"small transposed b, copied", {40, 30}, {30, 50}, false, false, true},
      {"batches merged into one product", {6, 70, 128}, {128, 600}},
      {"batches of their own", {3, 90, 100}, {3, 100, 170}},
  };
}

Tensor operand_a(const Case& c, DType dtype) {
  if (!c.transpose_a) return eighths(c.a, 1, dtype);
  const Tensor base = eighths(Shape{c.a[1], c.a[0]}, 1, dtype);
  return kiln::detail::make_view(base, c.a, Shape{1, c.a[0]}, 0);
}

Tensor operand_b(const Case& c, DType dtype) {
  if (c.transpose_b) {
    const Tensor base = eighths(Shape{c.b[1], c.b[0]}, 2, dtype);
    return kiln::detail::make_view(base, c.b, Shape{1, c.b[0]}, 0);
  }
  if (!c.slice_b) return eighths(c.b, 2, dtype);
  const Tensor wide = eighths(Shape{c.b[0], c.b[1] + 37}, 2, dtype);
  return kiln::slice(wide, 1, 5, 5 + c.b[1]);
}

}  // namespace

TEST_CASE("every GEMM backend computes exact products on every path", "[matmul][gemm]") {
  for (DType dtype : {kiln::f32, kiln::f64}) {
    for (GemmBackend backend : kiln::detail::available_gemm_backends(kiln::dtype_size(dtype))) {
      const ForcedBackend forced(backend);
      for (const Case& c : cases()) {
        INFO(kiln::detail::gemm_backend_name(backend)
             << " " << kiln::dtype_name(dtype) << ": " << c.name);
        const Tensor a = operand_a(c, dtype), b = operand_b(c, dtype);
        const Tensor want = reference(a, b);
        CHECK(exact_difference(kiln::matmul(a, b), want) == "");
        // Traced: the plan's matmul step, and a product followed by an add of the same shape,
        // which the plan may run as one GEMM accumulating into the addend (beta = 1).
        const Tensor addend = eighths(want.shape(), 3, dtype);
        auto f = kiln::function([](const Tensor& x, const Tensor& y, const Tensor& z) {
          return std::vector<Tensor>{kiln::matmul(x, y), kiln::matmul(x, y) + z};
        });
        const std::vector<Tensor> traced = f(a, b, addend);
        CHECK(exact_difference(traced[0], want) == "");
        CHECK(exact_difference(traced[1], want + kiln::cast(addend, kiln::f64)) == "");
        // Scaled, as a plan runs an SGD update folded into its gradient's GEMM: the addend
        // minus a quarter of the product (alpha = -1/4, beta = 1), exact in these values.
        const Tensor in_place_b =
            kiln::detail::matmul_reads_in_place(kiln::detail::array_ref(b), 1) ? b : b.contiguous();
        const Tensor updated = addend.contiguous() + 0.0f;  // a buffer of its own
        const kiln::detail::ArrayRef out = kiln::detail::array_ref(updated);
        const auto plan = kiln::detail::plan_matmul(kiln::detail::array_ref(a),
                                                    kiln::detail::array_ref(in_place_b), out,
                                                    /*accumulate=*/true, /*scaled=*/true);
        REQUIRE(plan != nullptr);
        kiln::detail::run_planned_matmul(*plan, a.data(), in_place_b.data(), out.data, -0.25);
        CHECK(exact_difference(updated, kiln::cast(addend, kiln::f64) - want * 0.25) == "");
      }
    }
  }
}

TEST_CASE("a forced GEMM backend is the one that runs, where it can", "[matmul][gemm]") {
  using kiln::detail::Gemm;
  using kiln::detail::GemmShape;
  const GemmShape large{300, 400, 500, false, 500, 400};
  for (GemmBackend backend : kiln::detail::available_gemm_backends(sizeof(float))) {
    const ForcedBackend forced(backend);
    CHECK(Gemm<float>(large).backend() == backend);
  }
  {
    // libxsmm cannot read a transposed B: forcing it leaves such products to the others.
    const ForcedBackend forced(GemmBackend::xsmm);
    GemmShape transposed_b = large;
    transposed_b.trans_b = true;
    transposed_b.ldb = 500;
    CHECK(Gemm<float>(transposed_b).backend() != GemmBackend::xsmm);
  }
  {
    // Nor does it take an alpha: a scaled product (an SGD update folded in) goes to the others,
    // forced or not, small or large.
    const ForcedBackend forced(GemmBackend::xsmm);
    for (GemmShape scaled : {large, GemmShape{8, 8, 8, false, 8, 8, true}}) {
      scaled.accumulate = true;
      scaled.scaled = true;
      CHECK(Gemm<float>(scaled).backend() != GemmBackend::xsmm);
      CHECK(Gemm<double>(scaled).backend() != GemmBackend::xsmm);
    }
  }
  {
    // oneDNN has no f64 GEMM: forcing it leaves f64 products to the automatic choice.
    const ForcedBackend forced(GemmBackend::dnnl);
    CHECK(Gemm<double>(large).backend() != GemmBackend::dnnl);
  }
  // The automatic choice never names "automatic".
  CHECK(Gemm<float>(large).backend() != GemmBackend::automatic);
  CHECK(Gemm<double>(GemmShape{8, 8, 8, false, 8, 8}).backend() != GemmBackend::automatic);
}

TEST_CASE("a cached GEMM plan is the plan of its shape and forced backend", "[matmul][gemm]") {
  using kiln::detail::Gemm;
  using kiln::detail::GemmShape;
  // More shapes than the cache holds, twice over, so entries are replaced and planned again.
  std::vector<GemmShape> shapes;
  for (int i = 1; i <= 12; ++i) shapes.push_back(GemmShape{8 * i, 20, 80, false, 80, 20});
  shapes.push_back(GemmShape{300, 400, 500, false, 500, 400});
  for (int round = 0; round < 2; ++round)
    for (const GemmShape& s : shapes) {
      CHECK(Gemm<float>::planned(s).describe() == Gemm<float>(s).describe());
      CHECK(Gemm<double>::planned(s).describe() == Gemm<double>(s).describe());
    }
  // A backend forced after a shape was cached gets a plan of its own.
  const GemmShape large = shapes.back();
  for (GemmBackend backend : kiln::detail::available_gemm_backends(sizeof(float))) {
    const ForcedBackend forced(backend);
    CHECK(Gemm<float>::planned(large).backend() == backend);
  }
  CHECK(Gemm<float>::planned(large).describe() == Gemm<float>(large).describe());
}

TEST_CASE("the C-transposed path can be forced on and off", "[matmul][gemm]") {
  using kiln::detail::Gemm;
  using kiln::detail::GemmShape;
  const auto& backends = kiln::detail::available_gemm_backends(sizeof(float));
  const bool xsmm =
      std::find(backends.begin(), backends.end(), GemmBackend::xsmm) != backends.end() &&
      kiln::detail::forced_gemm_backend() == GemmBackend::automatic;
  const auto transposed = [](const GemmShape& s) { return Gemm<float>::planned(s).c_transposed(); };
  const GemmShape outside{128, 20, 128, false, 128, 20};  // no CPU's rule runs it transposed
  // Every rule runs this one transposed: the AVX2 rules 32x20x80, the AVX-512 rule 32x8x80.
  const GemmShape inside = kiln::detail::simd_level() == kiln::detail::SimdLevel::avx512
                               ? GemmShape{32, 8, 80, false, 80, 8}
                               : GemmShape{32, 20, 80, false, 80, 20};
  struct Restore {
    ~Restore() { kiln::detail::set_c_transposed(-1); }
  } restore;
  CHECK(kiln::detail::c_transposed_mode() == -1);
  CHECK_FALSE(transposed(outside));
  CHECK(transposed(inside) == xsmm);
  kiln::detail::set_c_transposed(1);
  CHECK(kiln::detail::c_transposed_mode() == 1);
  CHECK(transposed(outside) == xsmm);  // the cached plan of the rule's mode is not reused
  GemmShape accumulating = outside;
  accumulating.accumulate = true;
  CHECK_FALSE(transposed(accumulating));
  // Forced on, a product the rule leaves alone is still exact (multiples of 1/8); the eager
  // product plans `outside` itself.
  const Tensor a = eighths(Shape{128, 128}, 1, DType::f32),
               b = eighths(Shape{128, 20}, 2, DType::f32);
  CHECK(exact_difference(kiln::matmul(a, b), reference(a, b)) == "");
  kiln::detail::set_c_transposed(0);
  CHECK_FALSE(transposed(inside));
  kiln::detail::set_c_transposed(-1);
  CHECK(transposed(inside) == xsmm);
}

TEST_CASE("f32 products go where the calibration put them", "[matmul][gemm]") {
  using kiln::detail::Gemm;
  using kiln::detail::GemmShape;
  if (kiln::detail::forced_gemm_backend() != GemmBackend::automatic) {
    WARN("KILN_GEMM forces a backend: the automatic choice is not used");
    return;
  }
  const auto& backends = kiln::detail::available_gemm_backends(sizeof(float));
  if (std::find(backends.begin(), backends.end(), GemmBackend::xsmm) == backends.end()) {
    WARN("libxsmm does not run here (KILN_SIMD=sse2?): every product goes to the libraries");
    return;
  }
  // oneDNN when meson found it, else OpenBLAS.
  const GemmBackend library =
      std::find(backends.begin(), backends.end(), GemmBackend::dnnl) != backends.end()
          ? GemmBackend::dnnl
          : GemmBackend::openblas;
  const auto shape = [](int m, int n, int k) { return GemmShape{m, n, k, false, k, n}; };
  // libxsmm generates AVX-512 code at this level, else AVX2 code (KILN_SIMD=avx2 lowers it).
  const bool avx512 = kiln::detail::simd_level() == kiln::detail::SimdLevel::avx512;
  // On Intel CPUs with AVX-512 code, contractions of 256 and more go to the library, and
  // OpenBLAS takes part-filled C rows only from 2^17 multiply-adds.
  const bool intel = __builtin_cpu_is("intel") != 0;
  const bool zen2 = __builtin_cpu_is("znver2") != 0;  // a calibration of its own in places
  struct Case {
    const char* what;
    GemmShape s;
    GemmBackend avx512, avx2;
    // with AVX-512 code on an Intel CPU, where that differs (else avx512)
    std::optional<GemmBackend> intel_avx512 = std::nullopt;
  };
  const Case cases[] = {
      {"tiny (32x20x20): libxsmm's call is the cheapest", shape(32, 20, 20), GemmBackend::xsmm,
       GemmBackend::xsmm},
      {"C rows of 20 floats: a quarter-full last vector (AVX-512, but too little work for "
       "OpenBLAS on Intel); C transposed (AVX2)",
       shape(32, 20, 80), GemmBackend::openblas, GemmBackend::xsmm, GemmBackend::xsmm},
      {"64x20x64: as 32x20x80", shape(64, 20, 64), GemmBackend::openblas, GemmBackend::xsmm,
       GemmBackend::xsmm},
      {"C rows of 80 floats: whole vectors", shape(32, 80, 20), GemmBackend::xsmm,
       GemmBackend::xsmm},
      {"C rows of 12 floats: one vector with AVX-512; C transposed with AVX2", shape(32, 12, 80),
       GemmBackend::xsmm, GemmBackend::xsmm},
      {"128x20x128: too many rows to run transposed", shape(128, 20, 128), GemmBackend::openblas,
       library},
      {"32x50x80: C rows of 50 floats fill 50 of 64 lanes (AVX-512); too many columns to run "
       "transposed (AVX2), except on a Zen 2",
       shape(32, 50, 80), GemmBackend::xsmm, zen2 ? GemmBackend::xsmm : library},
      {"64^3", shape(64, 64, 64), GemmBackend::xsmm, GemmBackend::xsmm},
      {"an LSTM step's half at hidden 512", shape(64, 1024, 512), GemmBackend::xsmm,
       GemmBackend::openblas, library},
      {"an LSTM step at hidden 256 (K = 256)", shape(64, 1024, 256), GemmBackend::xsmm,
       GemmBackend::openblas, library},
      {"a projection over all steps (K = 128)", shape(3200, 1024, 128), GemmBackend::xsmm, library},
      {"a weight gradient over 64 rows", shape(1024, 256, 64), GemmBackend::xsmm,
       GemmBackend::xsmm},
      {"a long contraction", shape(64, 256, 1024), library, library},
      {"Dense 1024 at batch 256", shape(256, 1024, 1024), library, GemmBackend::openblas},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const GemmBackend want = !avx512                               ? c.avx2
                             : intel && c.intel_avx512.has_value() ? *c.intel_avx512
                                                                   : c.avx512;
    CHECK(Gemm<float>(c.s).backend() == want);
  }
  // The large squares: the library with AVX-512 code (K >= 1024); with AVX2 code OpenBLAS (ties
  // with oneDNN on the Zen 3), except on a Zen 2, where oneDNN leads from sides of 1024; 512^3
  // stays OpenBLAS's there too.
  for (const GemmShape& large : {shape(1024, 1024, 1024), shape(4096, 4096, 1024)})
    CHECK(Gemm<float>(large).backend() == (avx512 || zen2 ? library : GemmBackend::openblas));
  if (!avx512) CHECK(Gemm<float>(shape(512, 512, 512)).backend() == GemmBackend::openblas);
  // A transposed B (read in place; libxsmm cannot): the library, except that with AVX2 code
  // OpenBLAS takes long contractions over many rows (an MLP's input gradient).
  const auto transposed_b = [](int m, int n, int k) {
    GemmShape s{m, n, k, false, k, k};
    s.trans_b = true;
    return s;
  };
  CHECK(Gemm<float>(transposed_b(256, 1024, 1024)).backend() ==
        (avx512 ? library : GemmBackend::openblas));
  CHECK(Gemm<float>(transposed_b(64, 1024, 256)).backend() == library);
  // A transposed A (a weight gradient x^T dy): with AVX2 code OpenBLAS from K = 256 (as A
  // untransposed), except on a Zen 2, where oneDNN takes those from sides of 512.
  const auto transposed_a = [](int m, int n, int k) {
    GemmShape s{m, n, k, false, m, n};
    s.trans_a = true;
    return s;
  };
  if (!avx512) {
    for (const GemmShape& gradient : {transposed_a(1024, 1024, 256), transposed_a(512, 512, 256)})
      CHECK(Gemm<float>(gradient).backend() == (zen2 ? library : GemmBackend::openblas));
    CHECK(Gemm<float>(transposed_a(256, 256, 256)).backend() == GemmBackend::openblas);
  }
  // The products libxsmm runs faster with C transposed do so, and only those: with AVX2 code C
  // rows that end in a part-filled 8-float vector, with AVX-512 code C of at most 8 columns.
  const auto transposed = [](const GemmShape& s) { return Gemm<float>(s).c_transposed(); };
  // On Intel CPUs with AVX-512 code also C rows of 17 to 20 columns, m a multiple of 16 and A
  // of at most 4096 floats, K from 64 (1.07 against 1.16 us at 32x20x80 on the Xeon).
  const bool intel_rows_of_20 = avx512 && intel;
  CHECK(transposed(shape(32, 20, 80)) == (!avx512 || intel_rows_of_20));
  CHECK(transposed(shape(16, 17, 128)) == (!avx512 || intel_rows_of_20));
  CHECK(transposed(shape(64, 20, 64)) == (!avx512 || intel_rows_of_20));
  CHECK(transposed(shape(48, 20, 80)) == (!avx512 || intel_rows_of_20));
  CHECK(transposed(shape(48, 20, 128)) == !avx512);         // A of 6144 floats
  CHECK(transposed(shape(24, 20, 80)) == !avx512);          // C^T's columns: 1.5 vectors
  CHECK(transposed(shape(32, 20, 32)) == !avx512);          // K < 64: a tie on the Xeon
  CHECK(transposed(shape(32, 28, 80)) == !avx512);          // more columns
  CHECK(transposed(shape(32, 8, 80)) == (avx512 || zen2));  // 0.70 against 0.86 us on a Zen 4
  CHECK_FALSE(transposed(shape(32, 80, 20)));               // C's rows are whole vectors already
  // The Zen 2's rule bounds A (m k <= 8192) and not C's columns; the Zen 3's bounds the rows
  // (<= 64), the columns (< 48) and the work (>= 2^14); the AVX-512 rule the columns alone.
  const bool zen2_rule = !avx512 && zen2;
  CHECK(transposed(shape(16, 4, 80)) == (zen2_rule || avx512));   // 0.29 against 0.48 us, Zen 4
  CHECK(transposed(shape(128, 4, 32)) == (zen2_rule || avx512));  // 1.1 against 2.4 us, Zen 2
  CHECK(transposed(shape(96, 20, 80)) == zen2_rule);  // A of 7680 floats: 4.4-4.9 against 5.6-5.8
  CHECK_FALSE(transposed(shape(128, 20, 80)));        // A of 10240 floats
  CHECK_FALSE(transposed(shape(128, 20, 128)));
  CHECK_FALSE(transposed(shape(32, 20, 256)));  // K > 128
  GemmShape accumulating = shape(32, 20, 80);
  accumulating.accumulate = true;  // C += A B would need C transposed on the way in as well
  CHECK_FALSE(transposed(accumulating));
  CHECK_FALSE(Gemm<double>(shape(32, 20, 80)).c_transposed());
  // f64 products were not calibrated against OpenBLAS: small ones stay on libxsmm.
  CHECK(Gemm<double>(shape(32, 20, 80)).backend() == GemmBackend::xsmm);
}

TEST_CASE("the C-transposed libxsmm kernel honours every leading dimension", "[matmul][gemm]") {
  using kiln::detail::Gemm;
  using kiln::detail::GemmShape;
  const auto& backends = kiln::detail::available_gemm_backends(sizeof(float));
  if (std::find(backends.begin(), backends.end(), GemmBackend::xsmm) == backends.end()) return;
  const ForcedBackend forced(GemmBackend::xsmm);
  // Shapes of the C-transposed rule (xsmm_transposed_wins), each with its own pair of
  // transpose kernels.
  const std::vector<std::array<int, 3>> shapes{{32, 20, 80}, {16, 12, 128}, {64, 20, 64},
                                               {24, 44, 70}, {56, 3, 100},  {48, 5, 80}};
  for (const auto& [m, n, k] : shapes)
    for (const bool trans_a : {false, true}) {
      // C[m,n] = op(A) B with A's rows (or, transposed, A^T's rows) 7 apart beyond their
      // length, B's rows n + 5 apart, C's rows n + 3 apart; multiples of 1/8, so exact.
      const int lda = (trans_a ? m : k) + 7, ldb = n + 5, ldc = n + 3;
      GemmShape s{m, n, k, trans_a, lda, ldb};
      s.ldc = ldc;
      const Gemm<float> gemm(s);
      if (!gemm.c_transposed()) {
        CHECK(kiln::detail::simd_level() == kiln::detail::SimdLevel::avx512);  // n > 8 there
        CHECK(n > 8);
        continue;
      }
      INFO(m << "x" << n << "x" << k << ", trans_a " << trans_a);
      const auto value = [](int i) { return static_cast<float>(i % 17 - 8) / 8.0f; };
      std::vector<float> a(static_cast<std::size_t>((trans_a ? k : m) * lda));
      std::vector<float> b(static_cast<std::size_t>(k * ldb));
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = value(static_cast<int>(i * 7));
      for (std::size_t i = 0; i < b.size(); ++i) b[i] = value(static_cast<int>(i * 3));
      std::vector<float> c(static_cast<std::size_t>(m * ldc), 99.0f);
      gemm(a.data(), b.data(), c.data());
      int wrong = 0, padding_touched = 0;
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
          double want = 0;
          for (int p = 0; p < k; ++p)
            want += static_cast<double>(trans_a ? a[p * lda + i] : a[i * lda + p]) * b[p * ldb + j];
          wrong += c[i * ldc + j] != static_cast<float>(want);
        }
        for (int j = n; j < ldc; ++j) padding_touched += c[i * ldc + j] != 99.0f;
      }
      CHECK(wrong == 0);
      CHECK(padding_touched == 0);
    }
}
