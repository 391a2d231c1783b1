// Convolution and pooling: values against plain-loop references written here (channels first,
// two spatial axes; other layouts and ranks reach them by transposes and reshapes), f32 (oneDNN)
// against f64 (kiln's direct loops) for the gradients' kernels, finite-difference gradients,
// and every error message.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <kiln/autodiff.hpp>
#include <kiln/kiln.hpp>

#include "finite_difference.hpp"

namespace {

using Catch::Matchers::StartsWith;
using kiln::ConvOptions;
using kiln::DataLayout;
using kiln::Shape;
using kiln::Tensor;

Tensor uniform(const Shape& shape, std::uint64_t seed, kiln::DType dtype = kiln::f64) {
  return kiln::random::uniform(shape, -1.0, 1.0, seed, dtype);
}

struct Geometry2d {
  std::int64_t stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  std::int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0, groups = 1;
};

/// Channels-first 2-D cross-correlation by loops: x [N, C, H, W], w [O, C/groups, KH, KW].
Tensor reference_conv(const Tensor& x, const Tensor& w, const Geometry2d& g) {
  const auto xs = x.shape(), ws = w.shape();
  const std::int64_t n = xs[0], c = xs[1], h = xs[2], wd = xs[3], o = ws[0], ci = ws[1], kh = ws[2],
                     kw = ws[3];
  const std::int64_t oh =
      (h + g.pad_top + g.pad_bottom - g.dilation_h * (kh - 1) - 1) / g.stride_h + 1;
  const std::int64_t ow =
      (wd + g.pad_left + g.pad_right - g.dilation_w * (kw - 1) - 1) / g.stride_w + 1;
  const std::vector<double> xv = kiln::cast(x, kiln::f64).to_vector<double>();
  const std::vector<double> wv = kiln::cast(w, kiln::f64).to_vector<double>();
  std::vector<double> y(static_cast<std::size_t>(n * o * oh * ow), 0.0);
  const std::int64_t co = o / g.groups;
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t f = 0; f < o; ++f)
      for (std::int64_t i = 0; i < oh; ++i)
        for (std::int64_t j = 0; j < ow; ++j) {
          double acc = 0;
          for (std::int64_t ch = 0; ch < ci; ++ch)
            for (std::int64_t u = 0; u < kh; ++u)
              for (std::int64_t v = 0; v < kw; ++v) {
                const std::int64_t r = i * g.stride_h - g.pad_top + u * g.dilation_h;
                const std::int64_t s = j * g.stride_w - g.pad_left + v * g.dilation_w;
                if (r < 0 || r >= h || s < 0 || s >= wd) continue;
                const std::int64_t channel = (f / co) * ci + ch;
                acc += xv[static_cast<std::size_t>(((b * c + channel) * h + r) * wd + s)] *
                       wv[static_cast<std::size_t>(((f * ci + ch) * kh + u) * kw + v)];
              }
          y[static_cast<std::size_t>(((b * o + f) * oh + i) * ow + j)] = acc;
        }
  return kiln::tensor(y, Shape{n, o, oh, ow});
}

void check_close(const Tensor& got, const Tensor& want, double tolerance) {
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> a = kiln::cast(got, kiln::f64).to_vector<double>();
  const std::vector<double> b = kiln::cast(want, kiln::f64).to_vector<double>();
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("element " << i);
    CHECK(a[i] == Approx(b[i]).margin(tolerance));
  }
}

Tensor nhwc(const Tensor& nchw) { return kiln::transpose(nchw, {0, 2, 3, 1}); }
Tensor nchw(const Tensor& nhwc_x) { return kiln::transpose(nhwc_x, {0, 3, 1, 2}); }
Tensor hwio(const Tensor& oihw) { return kiln::transpose(oihw, {2, 3, 1, 0}); }

struct ConvCase {
  const char* name;
  Shape x, w;
  Geometry2d geometry;
  ConvOptions options;  // layout channels_first; the test also runs channels_last
};

std::vector<ConvCase> conv_cases() {
  using P = kiln::ConvPadding;
  return {
      {"3x3 valid", {2, 3, 7, 6}, {4, 3, 3, 3}, {}, {}},
      {"stride 2", {1, 2, 9, 8}, {3, 2, 3, 2}, {.stride_h = 2, .stride_w = 2}, {.strides = {2, 2}}},
      {"dilation 2",
       {1, 2, 9, 9},
       {2, 2, 3, 3},
       {.dilation_h = 2, .dilation_w = 2},
       {.dilations = {2, 2}}},
      {"explicit pads",
       {2, 2, 5, 6},
       {3, 2, 3, 3},
       {.pad_top = 1, .pad_bottom = 2, .pad_left = 0, .pad_right = 1},
       {.padding = P::explicit_pads, .pads = {{1, 2}, {0, 1}}}},
      {"same, stride 2 (uneven padding)",
       {1, 3, 8, 7},
       {2, 3, 3, 4},
       {.stride_h = 2, .stride_w = 2, .pad_top = 0, .pad_bottom = 1, .pad_left = 1, .pad_right = 2},
       {.strides = {2, 2}, .padding = P::same}},
      {"groups 2", {2, 4, 5, 5}, {6, 2, 3, 3}, {.groups = 2}, {.groups = 2}},
      {"depthwise",
       {1, 3, 6, 6},
       {3, 1, 3, 3},
       {.pad_top = 1, .pad_bottom = 1, .pad_left = 1, .pad_right = 1, .groups = 3},
       {.padding = P::same, .groups = 3}},
      {"1x1", {2, 5, 4, 4}, {7, 5, 1, 1}, {}, {}},
  };
}

}  // namespace

TEST_CASE("conv matches a loop reference in both layouts and dtypes", "[conv]") {
  for (const ConvCase& c : conv_cases()) {
    INFO(c.name);
    const Tensor x = uniform(c.x, 1), w = uniform(c.w, 2);
    const Tensor want = reference_conv(x, w, c.geometry);
    for (kiln::DType dtype : {kiln::f64, kiln::f32}) {
      INFO(kiln::dtype_name(dtype));
      const double tolerance = dtype == kiln::f64 ? 1e-12 : 1e-5;
      ConvOptions first = c.options;
      first.layout = DataLayout::channels_first;
      check_close(kiln::conv2d(kiln::cast(x, dtype), kiln::cast(w, dtype), first), want, tolerance);
      ConvOptions last = c.options;
      last.layout = DataLayout::channels_last;
      const Tensor y = kiln::conv(kiln::cast(nhwc(x), dtype), kiln::cast(hwio(w), dtype), last);
      check_close(nchw(y), want, tolerance);
    }
  }
}

TEST_CASE("conv1d and conv3d agree with conv2d on a unit axis", "[conv]") {
  const Tensor x = uniform({2, 3, 9}, 3), w = uniform({4, 3, 3}, 4);
  const ConvOptions first{
      .strides = {2}, .padding = kiln::ConvPadding::same, .layout = DataLayout::channels_first};
  const ConvOptions first2d{
      .strides = {1, 2}, .padding = kiln::ConvPadding::same, .layout = DataLayout::channels_first};
  for (kiln::DType dtype : {kiln::f64, kiln::f32}) {
    const Tensor xd = kiln::cast(x, dtype), wd = kiln::cast(w, dtype);
    const Tensor want = kiln::squeeze(
        kiln::conv2d(kiln::expand_dims(xd, 2), kiln::expand_dims(wd, 2), first2d), {2});
    check_close(kiln::conv1d(xd, wd, first), want, 1e-5);
    ConvOptions three = first;
    three.strides = {1, 1, 2};
    const Tensor y3 =
        kiln::conv3d(kiln::reshape(xd, {2, 3, 1, 1, 9}), kiln::reshape(wd, {4, 3, 1, 1, 3}), three);
    check_close(kiln::reshape(y3, want.shape()), want, 1e-5);
  }
  // A true 3-D case: oneDNN (f32) against kiln's direct loops (f64), channels last.
  const Tensor x3 = uniform({1, 4, 5, 6, 2}, 5), w3 = uniform({2, 3, 2, 2, 3}, 6);
  const ConvOptions opts{
      .strides = {1, 2, 1}, .dilations = {1, 1, 2}, .padding = kiln::ConvPadding::same};
  check_close(kiln::conv3d(kiln::cast(x3, kiln::f32), kiln::cast(w3, kiln::f32), opts),
              kiln::conv3d(x3, w3, opts), 1e-5);
}

TEST_CASE("conv_transpose is the adjoint of conv", "[conv]") {
  // <conv(x, w), y> == <x, conv_transpose(y, w)> for every geometry, and the shapes round-trip.
  for (const ConvCase& c : conv_cases()) {
    INFO(c.name);
    for (DataLayout layout : {DataLayout::channels_first, DataLayout::channels_last}) {
      ConvOptions o = c.options;
      o.layout = layout;
      const bool last = layout == DataLayout::channels_last;
      const Tensor x = uniform(last ? Shape{c.x[0], c.x[2], c.x[3], c.x[1]} : c.x, 7);
      const Tensor w = uniform(last ? Shape{c.w[2], c.w[3], c.w[1], c.w[0]} : c.w, 8);
      const Tensor y = kiln::conv(x, w, o);
      const Tensor r = uniform(y.shape(), 9);
      // conv's padding made explicit (same padding depends on x's extent, which the transposed
      // convolution's input does not show).
      const Geometry2d& geo = c.geometry;
      kiln::ConvTransposeOptions t{
          .strides = o.strides,
          .dilations = o.dilations,
          .padding = kiln::ConvPadding::explicit_pads,
          .pads = {{geo.pad_top, geo.pad_bottom}, {geo.pad_left, geo.pad_right}},
          .groups = o.groups,
          .layout = layout};
      // The output extents conv_transpose picks may be short of x's where conv's floor dropped
      // positions; output_padding restores them.
      Tensor back = kiln::conv_transpose(r, w, t);
      std::vector<std::int64_t> extra;
      for (std::size_t a = 0; a < 2; ++a) {
        const std::size_t axis = last ? 1 + a : 2 + a;
        extra.push_back(x.shape()[axis] - back.shape()[axis]);
      }
      if (extra[0] != 0 || extra[1] != 0) {
        t.output_padding = extra;
        back = kiln::conv_transpose(r, w, t);
      }
      REQUIRE(back.shape() == x.shape());
      const double lhs = kiln::sum(y * r).item<double>(), rhs = kiln::sum(x * back).item<double>();
      CHECK(lhs == Approx(rhs).epsilon(1e-10));
      const Tensor back32 =
          kiln::conv_transpose(kiln::cast(r, kiln::f32), kiln::cast(w, kiln::f32), t);
      check_close(back32, back, 1e-5);
    }
  }
}

TEST_CASE("conv gradients match finite differences, and oneDNN's match the f64 loops",
          "[conv][autodiff]") {
  for (const ConvCase& c : conv_cases()) {
    INFO(c.name);
    ConvOptions o = c.options;
    o.layout = DataLayout::channels_first;
    const Tensor x = uniform(c.x, 11), w = uniform(c.w, 12);
    const Tensor weight = uniform(kiln::conv(x, w, o).shape(), 13);
    const auto loss = [&](const std::vector<Tensor>& a) {
      return kiln::sum(kiln::conv(a[0], a[1], o) * weight);
    };
    kiln::GradientTape tape;
    tape.watch(x);
    tape.watch(w);
    const std::vector<Tensor> grads = tape.gradient(loss({x, w}), {x, w});
    for (std::size_t i = 0; i < 2; ++i) {
      const std::vector<double> numeric = kiln::test::numeric_gradient(
          [&](const std::vector<Tensor>& a) { return loss(a).item<double>(); }, {x, w}, i);
      const std::vector<double> analytic = grads[i].to_vector<double>();
      REQUIRE(analytic.size() == numeric.size());
      for (std::size_t j = 0; j < numeric.size(); ++j)
        CHECK(analytic[j] == Approx(numeric[j]).margin(1e-6));
    }
    const Tensor x32 = kiln::cast(x, kiln::f32), w32 = kiln::cast(w, kiln::f32);
    kiln::GradientTape tape32;
    tape32.watch(x32);
    tape32.watch(w32);
    const std::vector<Tensor> g32 = tape32.gradient(
        kiln::sum(kiln::conv(x32, w32, o) * kiln::cast(weight, kiln::f32)), {x32, w32});
    check_close(g32[0], grads[0], 1e-4);
    check_close(g32[1], grads[1], 1e-4);
  }
}

TEST_CASE("pooling matches loop references", "[conv][pool]") {
  const std::vector<double> v = {1, 5, 2, 0, 3, 8, 7, 4, 6, -1, 9, 2, 0, 3, -2, 5};  // 4x4
  for (kiln::DType dtype : {kiln::f32, kiln::f64}) {
    const Tensor x = kiln::cast(kiln::tensor(v, {1, 4, 4, 1}), dtype);  // NHWC, one channel
    const kiln::PoolOptions two{.window = {2, 2}};
    CHECK(kiln::cast(kiln::max_pool(x, two), kiln::f64).to_vector<double>() ==
          std::vector<double>{8, 7, 6, 9});
    CHECK(kiln::cast(kiln::avg_pool(x, two), kiln::f64).to_vector<double>() ==
          std::vector<double>{4.25, 3.25, 2, 3.5});
    // 3x3 windows, stride 1, padding same: the border windows hold fewer elements.
    const kiln::PoolOptions same{
        .window = {3, 3}, .strides = {1, 1}, .padding = kiln::ConvPadding::same};
    const std::vector<double> avg =
        kiln::cast(kiln::avg_pool(x, same), kiln::f64).to_vector<double>();
    CHECK(avg[0] == Approx((1 + 5 + 3 + 8) / 4.0));
    CHECK(avg[5] == Approx((1 + 5 + 2 + 3 + 8 + 7 + 6 - 1 + 9) / 9.0));
    kiln::PoolOptions counted = same;
    counted.count_padding = true;
    CHECK(kiln::cast(kiln::avg_pool(x, counted), kiln::f64).to_vector<double>()[0] ==
          Approx((1 + 5 + 3 + 8) / 9.0));
    CHECK(kiln::cast(kiln::max_pool(x, same), kiln::f64).to_vector<double>()[15] == 9);
    // Channels first, two channels, stride 1 window 2.
    const Tensor xc =
        kiln::concat({kiln::transpose(x, {0, 3, 1, 2}), -kiln::transpose(x, {0, 3, 1, 2})}, 1);
    const Tensor m = kiln::max_pool(
        xc, {.window = {2, 2}, .strides = {2, 2}, .layout = DataLayout::channels_first});
    CHECK(m.shape() == Shape{1, 2, 2, 2});
    CHECK(kiln::cast(m, kiln::f64).to_vector<double>() ==
          std::vector<double>{8, 7, 6, 9, -1, 0, 1, 2});
    // Dilation 2: each 2x2 window takes every other row and column.
    const kiln::PoolOptions dilated{.window = {2, 2}, .strides = {1, 1}, .dilations = {2, 2}};
    CHECK(kiln::cast(kiln::max_pool(x, dilated), kiln::f64).to_vector<double>() ==
          std::vector<double>{9, 5, 7, 8});  // {1,2,6,9}, {5,0,-1,2}, {3,7,0,-2}, {8,4,3,5}
    CHECK(kiln::cast(kiln::avg_pool(x, dilated), kiln::f64).to_vector<double>() ==
          std::vector<double>{4.5, 1.5, 2, 5});
  }
  // max_pool takes integers too (a maximum needs no float).
  const Tensor ints = kiln::tensor(std::vector<std::uint8_t>{1, 200, 3, 4}, {1, 2, 2, 1});
  CHECK(kiln::max_pool(ints, {.window = {2, 2}}).to_vector<std::uint8_t>() ==
        std::vector<std::uint8_t>{200});
  const Tensor nan =
      kiln::tensor({1.f, std::numeric_limits<float>::quiet_NaN(), 3.f, 2.f}, {1, 4, 1});
  CHECK(std::isnan(kiln::max_pool(nan, {.window = {2}}).to_vector<float>()[0]));
  const Tensor g = kiln::random::uniform({2, 3, 4, 5}, -1.0, 1.0, 3);
  CHECK(kiln::global_avg_pool(g).shape() == Shape{2, 5});
  check_close(kiln::global_avg_pool(g, DataLayout::channels_first, true),
              kiln::mean(g, {2, 3}, true), 1e-7);
  check_close(kiln::global_max_pool(g), kiln::max(g, {1, 2}), 0);
}

TEST_CASE("pooling gradients match finite differences", "[conv][pool][autodiff]") {
  const Tensor x = uniform({2, 5, 6, 3}, 21);
  const std::vector<kiln::PoolOptions> cases = {
      {.window = {2, 2}},
      {.window = {3, 2}, .strides = {1, 2}, .padding = kiln::ConvPadding::same},
      {.window = {3, 3},
       .strides = {2, 2},
       .padding = kiln::ConvPadding::same,
       .count_padding = true},
      {.window = {2, 2},
       .strides = {1, 2},
       .dilations = {2, 3},
       .padding = kiln::ConvPadding::same},
  };
  for (const kiln::PoolOptions& o : cases)
    for (bool is_max : {false, true}) {
      const auto f = [&](const Tensor& t) {
        return is_max ? kiln::max_pool(t, o) : kiln::avg_pool(t, o);
      };
      const Tensor weight = uniform(f(x).shape(), 22);
      kiln::GradientTape tape;
      tape.watch(x);
      const Tensor grad = tape.gradient(kiln::sum(f(x) * weight), x);
      const std::vector<double> numeric = kiln::test::numeric_gradient(
          [&](const std::vector<Tensor>& a) { return kiln::sum(f(a[0]) * weight).item<double>(); },
          {x}, 0);
      const std::vector<double> analytic = grad.to_vector<double>();
      for (std::size_t j = 0; j < numeric.size(); ++j)
        CHECK(analytic[j] == Approx(numeric[j]).margin(1e-6));
    }
}

TEST_CASE("convolution and pooling name themselves and the problem in their errors", "[conv]") {
  const Tensor x = kiln::zeros({1, 5, 5, 3}), w = kiln::zeros({3, 3, 3, 4});
  CHECK_THROWS_WITH(kiln::conv(kiln::zeros({5, 3}), w),
                    StartsWith("[conv] x of shape [5,3] needs rank 3, 4 or 5"));
  CHECK_THROWS_WITH(kiln::conv2d(kiln::zeros({1, 5, 3}), kiln::zeros({3, 3, 4})),
                    StartsWith("[conv2d] x of shape [1,5,3] needs rank 4"));
  CHECK_THROWS_WITH(kiln::conv(x, kiln::zeros({3, 3, 2, 4})),
                    StartsWith("[conv] kernel of shape [3,3,2,4] needs 3 input channels"));
  CHECK_THROWS_WITH(kiln::conv(x, w, {.groups = 2}),
                    StartsWith("[conv] groups 2 must divide the 3 input channels"));
  CHECK_THROWS_WITH(kiln::conv(x, w, {.strides = {1}}),
                    StartsWith("[conv] 1 strides values for 2 spatial axes"));
  CHECK_THROWS_WITH(kiln::conv(x, w, {.strides = {0, 1}}),
                    StartsWith("[conv] strides must be 1 or more, got 0"));
  CHECK_THROWS_WITH(kiln::conv(x, kiln::zeros({6, 6, 3, 4})),
                    StartsWith("[conv] the kernel of shape [6,6,3,4] spans more than x"));
  CHECK_THROWS_WITH(kiln::conv(x, w, {.pads = {{1, 1}, {1, 1}}}),
                    StartsWith("[conv] pads are given but padding is not explicit_pads"));
  CHECK_THROWS_WITH(kiln::conv(kiln::cast(x, kiln::i32), kiln::cast(w, kiln::i32)),
                    StartsWith("[conv] needs a floating-point dtype"));
  CHECK_THROWS_WITH(kiln::conv(x, kiln::zeros({3, 3, 3, 4}, kiln::f64)),
                    StartsWith("[conv] dtypes differ: f32 vs f64"));
  CHECK_THROWS_WITH(kiln::conv_transpose(x, w),
                    StartsWith("[conv_transpose] kernel of shape [3,3,3,4] needs 3 as its "
                               "input-channel dim"));
  CHECK_THROWS_WITH(kiln::conv_transpose(x, kiln::zeros({3, 3, 2, 3}), {.output_padding = {1, 0}}),
                    StartsWith("[conv_transpose] output_padding 1 must be below the stride"));
  CHECK_THROWS_WITH(kiln::max_pool(x, {}), StartsWith("[max_pool] the window is not given"));
  CHECK_THROWS_WITH(kiln::avg_pool(x, {.window = {6, 6}}),
                    StartsWith("[avg_pool] the window 6 spans more than x"));
  CHECK_THROWS_WITH(kiln::max_pool(x, {.window = {2, 2},
                                       .padding = kiln::ConvPadding::explicit_pads,
                                       .pads = {{2, 0}, {0, 0}}}),
                    StartsWith("[max_pool] padding (2, 0) must be smaller than the window 2"));
}
