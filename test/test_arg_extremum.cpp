// argmax and argmin over long rows (the row tables' two-pass kernel, from four vectors and 32
// elements a row, at the instruction set KILN_SIMD picks: kernels/arg_extremum_rows_arch.hpp)
// and down columns (kernels/arg_extremum.cpp's vector column loop), against the index the
// one-pass loop picks. The reference loops over short and strided lines are in test_reduce.cpp.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include <kiln/kiln.hpp>

namespace {

using kiln::DType;
using kiln::Tensor;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// A contiguous [rows, n] tensor of `dtype` holding `values` (cast from f64).
Tensor make(const std::vector<double>& values, const kiln::Shape& shape, DType dtype) {
  return kiln::cast(kiln::tensor(values, shape), dtype);
}

}  // namespace

TEST_CASE("argmax and argmin over long rows pick the one-pass loop's index", "[reduce][simd]") {
  // Rows of four vectors and 32 elements or more take the two-pass kernel (the extremum in vector
  // lanes, then a scan): its index must be the one-pass loop's in every case where the two could
  // differ. Each case is one row, placed in a batch of rows so that the rows around it differ.
  struct Case {
    const char* what;
    std::vector<double> row;
    std::int64_t first_max, last_max, first_min, last_min;
  };
  std::vector<Case> cases;
  const auto row_of = [](std::int64_t n, double fill) { return std::vector<double>(n, fill); };
  {
    std::vector<double> r = row_of(1000, 0.5);
    r[100] = r[800] = 3;   // the max twice, in different 64-element blocks
    r[101] = r[999] = -3;  // the min twice, one in the last (partial) lane step
    cases.push_back({"ties", r, 100, 800, 101, 999});
  }
  {
    std::vector<double> r = row_of(1000, 1);
    r[701] = r[900] = kNaN;
    r[5] = 7;
    cases.push_back({"NaN wins", r, 701, 900, 701, 900});
  }
  {
    std::vector<double> r = row_of(40, 2);
    r[0] = kNaN;  // NaN in the first lanes, which start the accumulators
    r[39] = 9;
    cases.push_back({"NaN first", r, 0, 0, 0, 0});
  }
  {
    std::vector<double> r = row_of(77, 0.0);
    r[3] = -0.0;  // -0 and +0 tie: the first (last) of them wins
    r[70] = -0.0;
    cases.push_back({"signed zeros", r, 0, 76, 0, 76});
  }
  {
    std::vector<double> r(333);
    for (std::size_t i = 0; i < r.size(); ++i) r[i] = static_cast<double>((i * 37) % 101);
    r[332] = 500;  // the max in the tail after the last whole lane step
    r[17] = -1;
    cases.push_back({"tail", r, 332, 332, 17, 17});
  }
  for (std::int64_t at = 0; at < 200; at += 3) {
    // A lone max and min in every lane of the vector steps (four vectors a step: 16 f32 lanes at
    // SSE2, 32 at AVX2, 64 at AVX-512, half as many f64): the first step's, two more steps'
    // (at AVX-512's f32) and the tail's, every third position for the max, and for the min.
    std::vector<double> r(200);
    for (std::size_t i = 0; i < r.size(); ++i) r[i] = static_cast<double>((i * 7) % 5);
    const std::int64_t min_at = (at + 1) % 200;
    r[static_cast<std::size_t>(at)] = 10;
    r[static_cast<std::size_t>(min_at)] = -10;
    cases.push_back({"a lone extremum in each lane", r, at, at, min_at, min_at});
  }
  for (const Case& c : cases)
    for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64}) {
      const bool has_nan = std::any_of(c.row.begin(), c.row.end(), [](double v) { return v != v; });
      if (has_nan && (dtype == DType::i32 || dtype == DType::i64)) continue;
      INFO(c.what << " " << kiln::dtype_name(dtype));
      const auto n = static_cast<std::int64_t>(c.row.size());
      std::vector<double> batch;
      for (int r = 0; r < 3; ++r)
        for (std::int64_t i = 0; i < n; ++i)
          batch.push_back(r == 1 ? c.row[static_cast<std::size_t>(i)]
                                 : static_cast<double>((i * 13 + r) % 29));
      const Tensor x = make(batch, {3, n}, dtype);
      CHECK(kiln::argmax(x, 1).to_vector<std::int64_t>()[1] == c.first_max);
      CHECK(kiln::argmax(x, 1, false, true).to_vector<std::int64_t>()[1] == c.last_max);
      CHECK(kiln::argmin(x, 1).to_vector<std::int64_t>()[1] == c.first_min);
      CHECK(kiln::argmin(x, 1, false, true).to_vector<std::int64_t>()[1] == c.last_min);

      // The same line down the columns of [n, 6] (lines inner apart: a vector of columns at a
      // time, 4 f32 or 2 f64, and at f32 two columns left to the scalar loop), every column the
      // row itself.
      std::vector<double> columns;
      for (std::int64_t i = 0; i < n; ++i)
        for (int j = 0; j < 6; ++j) columns.push_back(c.row[static_cast<std::size_t>(i)]);
      const Tensor down = make(columns, {n, 6}, dtype);
      const auto all = [](std::int64_t want) { return std::vector<std::int64_t>(6, want); };
      CHECK(kiln::argmax(down, 0).to_vector<std::int64_t>() == all(c.first_max));
      CHECK(kiln::argmax(down, 0, false, true).to_vector<std::int64_t>() == all(c.last_max));
      CHECK(kiln::argmin(down, 0).to_vector<std::int64_t>() == all(c.first_min));
      CHECK(kiln::argmin(down, 0, false, true).to_vector<std::int64_t>() == all(c.last_min));
    }
}
