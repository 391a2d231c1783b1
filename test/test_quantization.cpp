// Fake quantization (kiln/quantization.hpp, nn::FakeQuant): a table of ranges, bit widths and
// narrow ranges checked against a scalar reference of TensorFlow's rules, eager against traced,
// and against TensorFlow itself (test/data/check_fake_quant.py) when the Python test
// environment has it; straight-through gradients; the moving-average layer; errors.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include <kiln/kiln.hpp>

#include "io_test_support.hpp"

using kiln::Shape;
using kiln::Tensor;
using kiln::Variable;

namespace {

struct Case {
  std::string kind;  // args, vars, per_channel
  int num_bits;
  bool narrow_range;
  std::vector<float> min, max;  // one value, or one per channel
};

const std::vector<Case> cases{
    {"args", 8, false, {-6.0f}, {6.0f}},
    {"args", 8, true, {-6.0f}, {6.0f}},
    {"args", 4, false, {0.1f}, {5.0f}},    // 0 is not in the range: nudged to hold it
    {"args", 2, false, {-3.7f}, {-0.2f}},  // all negative
    {"args", 16, true, {-1.0f}, {1.0f}},
    {"vars", 8, false, {-2.5f}, {3.25f}},
    {"vars", 5, true, {-0.3f}, {4.0f}},
    {"vars", 8, false, {0.5f}, {0.5f}},  // an empty range
    {"per_channel", 8, false, {-1.f, -2.f, 0.f, 0.5f, -8.f}, {1.f, 3.f, 0.25f, 2.f, -1.f}},
    {"per_channel", 3, true, {-4.f, -1.f, -0.7f, -3.f, -0.1f}, {4.f, 1.f, 2.f, 0.3f, 0.1f}},
};

/// Equal, or both NaN (an empty range quantizes to NaN, in TensorFlow too).
bool same(float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }
bool same(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!same(a[i], b[i])) return false;
  return true;
}

/// TensorFlow's nudging and rounding for one value, in float (a scalar reference).
float reference(float x, float min, float max, int num_bits, bool narrow) {
  const float qmin = narrow ? 1.0f : 0.0f;
  const float qmax = static_cast<float>((1 << num_bits) - 1);
  const float scale = (max - min) / (qmax - qmin);
  const float zero_from_min = qmin - min / scale;
  const float zero = zero_from_min < qmin   ? qmin
                     : zero_from_min > qmax ? qmax
                                            : std::round(zero_from_min);
  const float nmin = (qmin - zero) * scale, nmax = (qmax - zero) * scale;
  const float clamped = std::max(std::min(x, nmax), nmin);
  // A whole number of steps times scale (TensorFlow's level * scale + nmin can differ in the
  // last bits; check_fake_quant.py compares with a tolerance).
  return (std::floor((clamped - nmin) * (1.0f / scale) + 0.5f) + qmin - zero) * scale;
}

/// x [7, 5]: normal samples spread over the ranges, and values on and beyond their edges.
Tensor inputs(const Case& c) {
  std::vector<float> x = (kiln::random::normal({7, 5}, 0.0, 3.0, 5) * 1.0f).to_vector<float>();
  for (std::size_t i = 0; i < 5; ++i) {
    const std::size_t k = c.min.size() == 1 ? 0 : i;
    x[i] = c.min[k];
    x[5 + i] = c.max[k];
  }
  x[10] = 1e30f;
  x[11] = -1e30f;
  x[12] = 0.0f;
  return kiln::tensor(x, {7, 5});
}

struct Result {
  Tensor y, dx, dmin, dmax;
};

/// The case's op, eager or inside a kiln::function, with gradients for output gradient g.
Result run(const Case& c, const Tensor& x, const Tensor& g, bool traced) {
  const kiln::FakeQuantOptions o{c.num_bits, c.narrow_range};
  const Shape range = c.kind == "per_channel" ? Shape{5} : Shape{};
  const auto body = [&](const Tensor& in, const Tensor& lo, const Tensor& hi) {
    kiln::GradientTape tape;
    tape.watch(in);
    tape.watch(lo);
    tape.watch(hi);
    Tensor y;
    if (c.kind == "args")
      y = kiln::fake_quant_with_min_max_args(in, c.min[0], c.max[0], o);
    else if (c.kind == "vars")
      y = kiln::fake_quant_with_min_max_vars(in, lo, hi, o);
    else
      y = kiln::fake_quant_with_min_max_vars_per_channel(in, lo, hi, o);
    std::vector<Tensor> grads = tape.gradient(y, std::vector<Tensor>{in, lo, hi}, g);
    return std::vector<Tensor>{y, grads[0], grads[1], grads[2]};
  };
  const Tensor lo = kiln::tensor(c.min, range), hi = kiln::tensor(c.max, range);
  std::vector<Tensor> out;
  if (traced)
    out = kiln::function(body)(x, lo, hi);
  else
    out = body(x, lo, hi);
  return {out[0], out[1], out[2], out[3]};
}

}  // namespace

TEST_CASE("fake quantization: TensorFlow's nudged grid and straight-through gradients",
          "[quantization]") {
  const std::string python = io_test::test_python("numpy, tensorflow");
  io_test::TempDir dir;
  std::map<std::string, Tensor> arrays;
  nlohmann::json manifest = nlohmann::json::array();
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    INFO("case " << i << ": " << c.kind << " num_bits " << c.num_bits << " narrow "
                 << c.narrow_range);
    const Tensor x = inputs(c);
    const Tensor g = kiln::random::uniform({7, 5}, 0.5, 1.5, 11 + i);
    const Result eager = run(c, x, g, false), traced = run(c, x, g, true);
    const auto xs = x.to_vector<float>(), gs = g.to_vector<float>();
    const auto y = eager.y.to_vector<float>(), dx = eager.dx.to_vector<float>();
    CHECK(same(traced.y.to_vector<float>(), y));
    CHECK(traced.dx.to_vector<float>() == dx);
    std::vector<double> dmin(c.min.size(), 0.0), dmax(c.min.size(), 0.0);
    for (std::size_t k = 0; k < xs.size(); ++k) {
      const std::size_t ch = c.min.size() == 1 ? 0 : k % 5;
      const float lo = c.min[ch], hi = c.max[ch];
      INFO("element " << k << " = " << xs[k]);
      CHECK(same(y[k], reference(xs[k], lo, hi, c.num_bits, c.narrow_range)));
      // The nudged range's ends are the outputs for the extreme inputs.
      const float nmin = reference(-1e30f, lo, hi, c.num_bits, c.narrow_range);
      const float nmax = reference(1e30f, lo, hi, c.num_bits, c.narrow_range);
      if (std::isnan(nmin)) continue;  // an empty range: TensorFlow's comparison checks it
      const bool inside = xs[k] >= nmin && xs[k] <= nmax;
      CHECK(dx[k] == (inside ? gs[k] : 0.0f));
      if (xs[k] < nmin) dmin[ch] += gs[k];
      if (xs[k] > nmax) dmax[ch] += gs[k];
    }
    if (c.kind != "args" && c.min != c.max) {
      const auto got_min = eager.dmin.to_vector<float>(), got_max = eager.dmax.to_vector<float>();
      for (std::size_t ch = 0; ch < dmin.size(); ++ch) {
        CHECK(got_min[ch] == Approx(dmin[ch]).epsilon(1e-5));
        CHECK(got_max[ch] == Approx(dmax[ch]).epsilon(1e-5));
      }
      CHECK(traced.dmin.to_vector<float>() == got_min);
      CHECK(traced.dmax.to_vector<float>() == got_max);
    }
    const std::string p = std::to_string(i) + "_";
    arrays[p + "x"] = x;
    arrays[p + "g"] = g;
    arrays[p + "y"] = eager.y;
    arrays[p + "dx"] = eager.dx;
    nlohmann::json entry{
        {"kind", c.kind}, {"num_bits", c.num_bits}, {"narrow_range", c.narrow_range}};
    if (c.kind == "args") {
      entry["min"] = c.min[0];
      entry["max"] = c.max[0];
    } else {
      const Shape range = c.kind == "per_channel" ? Shape{5} : Shape{};
      arrays[p + "min"] = kiln::tensor(c.min, range);
      arrays[p + "max"] = kiln::tensor(c.max, range);
      arrays[p + "dmin"] = eager.dmin;
      arrays[p + "dmax"] = eager.dmax;
    }
    manifest.push_back(entry);
  }
  if (python.empty()) {
    WARN(
        "TensorFlow comparison skipped: no Python with numpy and tensorflow (run "
        "scripts/python-env.sh, or set KILN_PYTHON)");
    return;
  }
  kiln::io::save_npz((dir / "cases.npz").string(), arrays);
  std::ofstream(dir / "manifest.json") << manifest.dump();
  const std::string log = (dir / "log.txt").string();
  const std::string command = "'" + python + "' '" + test_paths::source_dir() +
                              "/test/data/check_fake_quant.py' '" + dir.path().string() + "' > '" +
                              log + "' 2>&1";
  const int status = std::system(command.c_str());
  std::ifstream in(log);
  const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO(output);
  CHECK(status == 0);
}

TEST_CASE("fake quantization refuses bad settings and ranges", "[quantization]") {
  const Tensor x = kiln::ones({3});
  CHECK_THROWS_WITH(kiln::fake_quant_with_min_max_args(x, -1, 1, {.num_bits = 1}),
                    Catch::Contains("[fake_quant_with_min_max_args] num_bits must be in [2, 16]"));
  CHECK_THROWS_WITH(kiln::fake_quant_with_min_max_args(x, -1, 1, {.num_bits = 17}),
                    Catch::Contains("num_bits"));
  CHECK_THROWS_WITH(kiln::fake_quant_with_min_max_args(x, 1, 1),
                    Catch::Contains("min must be smaller than max"));
  CHECK_THROWS_WITH(kiln::fake_quant_with_min_max_args(kiln::ones({3}, kiln::i32)),
                    Catch::Contains("f32 or f64"));
  const Tensor lo = kiln::scalar(2.0f), hi = kiln::scalar(1.0f);
  CHECK_THROWS_WITH(kiln::fake_quant_with_min_max_vars(x, lo, hi),
                    Catch::Contains("[fake_quant_with_min_max_vars] min must not exceed max"));
  CHECK_THROWS_WITH(kiln::fake_quant_with_min_max_vars(x, kiln::scalar(0.0), hi),
                    Catch::Contains("kiln::cast"));
  CHECK_THROWS_WITH(kiln::fake_quant_with_min_max_vars_per_channel(x, lo, hi),
                    Catch::Contains("must have shape [3]"));
  // Inside a trace the values are not known: an inverted range gives NaN.
  auto f = kiln::function([](const Tensor& in, const Tensor& a, const Tensor& b) {
    return kiln::fake_quant_with_min_max_vars(in, a, b);
  });
  CHECK(std::isnan(f(x, lo, hi).to_vector<float>()[0]));
  CHECK(f(x, hi, lo).to_vector<float>()[0] == Approx(1.0).margin(0.01));
  // Ranges known while tracing (made inside the function) are checked then.
  auto fixed = kiln::function([](const Tensor& in) {
    return kiln::fake_quant_with_min_max_vars(in, kiln::scalar(-1.0f), kiln::scalar(2.0f));
  });
  CHECK(fixed(x).to_vector<float>() ==
        kiln::fake_quant_with_min_max_vars(x, kiln::scalar(-1.0f), kiln::scalar(2.0f))
            .to_vector<float>());
  auto inverted = kiln::function([](const Tensor& in) {
    return kiln::fake_quant_with_min_max_vars(in, kiln::scalar(2.0f), kiln::scalar(1.0f));
  });
  CHECK_THROWS_WITH(inverted(x), Catch::Contains("min must not exceed max"));
  auto inverted_params = kiln::function([](const Tensor& in) {
    return kiln::quantize(in, kiln::quantization_params(kiln::scalar(2.0f), kiln::scalar(1.0f)));
  });
  CHECK_THROWS_WITH(inverted_params(x),
                    Catch::Contains("[quantization_params] min must not exceed max"));
}

TEST_CASE("nn::FakeQuant keeps moving-average ranges, in a cached train step too",
          "[quantization][nn]") {
  kiln::clear_session();
  kiln::nn::FakeQuant q({.ema_decay = 0.9});
  const Tensor x = kiln::tensor(std::vector<float>{-1.0f, 0.5f, 2.0f, 3.0f}, {2, 2});
  const Tensor y = q(x, /*training*/ true);
  // min: -6 + (min(-1, 0) + 6) 0.1 = -5.5; max: 6 + (3 - 6) 0.1 = 5.7.
  CHECK(q.min().value().item<float>() == Approx(-5.5));
  CHECK(q.max().value().item<float>() == Approx(5.7));
  CHECK(y.to_vector<float>() ==
        kiln::fake_quant_with_min_max_vars(x, kiln::scalar(-5.5f), kiln::scalar(5.7f))
            .to_vector<float>());
  q(x, /*training*/ false);
  CHECK(q.min().value().item<float>() == Approx(-5.5));  // inference leaves the range
  CHECK_FALSE(q.min().trainable());

  auto step = kiln::function([&](const Tensor& in) {
    kiln::nn::LearningPhaseScope training(true);
    return q(in);
  });
  for (int i = 0; i < 3; ++i) step(x);
  CHECK(step.tracing_count() == 1);
  double lo = -5.5, hi = 5.7;
  for (int i = 0; i < 3; ++i) {
    lo += (-1.0 - lo) * 0.1;
    hi += (3.0 - hi) * 0.1;
  }
  CHECK(q.min().value().item<float>() == Approx(lo));
  CHECK(q.max().value().item<float>() == Approx(hi));

  kiln::nn::FakeQuant per({.num_bits = 4, .per_channel = true});
  per(x, true);
  CHECK(per.min().shape() == Shape{2});
  const std::string json = kiln::nn::to_json(per);
  const auto copy = kiln::nn::from_json(json);
  CHECK(kiln::nn::to_json(*copy) == json);
  CHECK_THROWS_WITH(kiln::nn::FakeQuant({.ema_decay = 1.0}), Catch::Contains("ema_decay"));
  CHECK_THROWS_WITH(kiln::nn::FakeQuant({.init_min = 1, .init_max = 0}),
                    Catch::Contains("init_min"));
}

namespace {

/// Bitwise equality of two float tensors' values (NaN equal to NaN).
bool bitwise_same(const Tensor& a, const Tensor& b) {
  const auto x = a.to_vector<float>(), y = b.to_vector<float>();
  if (x.size() != y.size()) return false;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (std::memcmp(&x[i], &y[i], sizeof(float)) != 0) return false;
  return true;
}

}  // namespace

TEST_CASE("quantize stores fake quantization's grid in i8 and u8: dequantize gives it back",
          "[quantization]") {
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    if (c.num_bits > 8 || c.min == c.max) continue;  // 8-bit storage; an empty range is NaN
    for (kiln::DType dtype : {kiln::u8, kiln::i8}) {
      INFO("case " << i << " " << kiln::dtype_name(dtype));
      const Shape range = c.kind == "per_channel" ? Shape{5} : Shape{};
      const Tensor lo = kiln::tensor(c.min, range), hi = kiln::tensor(c.max, range);
      const Tensor x = inputs(c);
      const kiln::QuantizeOptions o{dtype, c.num_bits, c.narrow_range};
      const kiln::QuantizationParams p = kiln::quantization_params(lo, hi, o);
      CHECK(p.dtype() == dtype);
      const double qmin = c.narrow_range ? 1 : 0, qmax = (1 << c.num_bits) - 1;
      const double offset = dtype == kiln::i8 ? -(1 << (c.num_bits - 1)) : 0;
      CHECK(p.quant_min == qmin + offset);
      CHECK(p.quant_max == qmax + offset);
      const Tensor q = kiln::quantize(x, p);
      REQUIRE(q.dtype() == dtype);
      const Tensor fake = c.kind == "per_channel" ? kiln::fake_quant_with_min_max_vars_per_channel(
                                                        x, lo, hi, {c.num_bits, c.narrow_range})
                                                  : kiln::fake_quant_with_min_max_vars(
                                                        x, lo, hi, {c.num_bits, c.narrow_range});
      CHECK(bitwise_same(kiln::dequantize(q, p), fake));
      // Every level lies in [quant_min, quant_max]; the extremes reach both ends.
      const Tensor levels = kiln::cast(q, kiln::i32);
      CHECK(kiln::min(levels).item<std::int32_t>() == p.quant_min);
      CHECK(kiln::max(levels).item<std::int32_t>() == p.quant_max);
      // i8 and u8 hold the same values, their levels 2^(num_bits-1) apart.
      if (dtype == kiln::i8) {
        const kiln::QuantizationParams pu =
            kiln::quantization_params(lo, hi, {kiln::u8, c.num_bits, c.narrow_range});
        const Tensor qu = kiln::cast(kiln::quantize(x, pu), kiln::i32);
        CHECK(kiln::all(qu + static_cast<std::int32_t>(offset) == levels).item<bool>());
      }
      // Traced: the same integers and values.
      auto round_trip = kiln::function([&](const Tensor& in, const Tensor& a, const Tensor& b) {
        const kiln::QuantizationParams traced = kiln::quantization_params(a, b, o);
        const Tensor stored = kiln::quantize(in, traced);
        return std::vector<Tensor>{stored, kiln::dequantize(stored, traced)};
      });
      const std::vector<Tensor> out = round_trip(x, lo, hi);
      REQUIRE(out[0].dtype() == dtype);
      CHECK(kiln::cast(out[0], kiln::i32).to_vector<std::int32_t>() ==
            levels.to_vector<std::int32_t>());
      CHECK(bitwise_same(out[1], fake));
    }
  }
}

TEST_CASE("quantize: known levels, gradients and errors", "[quantization]") {
  // [-1, 1] on u8: scale 2/255, zero point 1 / scale = 127.49999 in f32, rounded to 127 (the
  // levels below come from a NumPy float32 evaluation of the same rules).
  const kiln::QuantizationParams u = kiln::quantization_params(-1.0, 1.0);
  CHECK(u.scale.item<float>() == 2.0f / 255.0f);
  CHECK(u.zero_point.item<std::uint8_t>() == 127);
  const Tensor x = kiln::tensor(std::vector<float>{-2.0f, -1.0f, 0.0f, 0.004f, 1.0f, 5.0f}, {6});
  CHECK(kiln::quantize(x, u).to_vector<std::uint8_t>() ==
        std::vector<std::uint8_t>{0, 0, 127, 128, 255, 255});
  // On i8 the same grid is 128 levels lower; narrow range leaves out -128 (and its zero point,
  // 128.0 exactly, is 0).
  const kiln::QuantizationParams s = kiln::quantization_params(-1.0, 1.0, {.dtype = kiln::i8});
  CHECK(s.zero_point.item<std::int8_t>() == -1);
  CHECK(kiln::quantize(x, s).to_vector<std::int8_t>() ==
        std::vector<std::int8_t>{-128, -128, -1, 0, 127, 127});
  const kiln::QuantizationParams n =
      kiln::quantization_params(-1.0, 1.0, {.dtype = kiln::i8, .narrow_range = true});
  CHECK(n.quant_min == -127);
  CHECK(n.zero_point.item<std::int8_t>() == 0);
  CHECK(n.scale.item<float>() == 2.0f / 254.0f);
  CHECK(kiln::quantize(x, n).to_vector<std::int8_t>() ==
        std::vector<std::int8_t>{-127, -127, 0, 1, 127, 127});
  CHECK(kiln::dequantize(kiln::tensor<std::int8_t>({-127, 0, 127}, {3}), n).to_vector<float>() ==
        std::vector<float>{-127 * (2.0f / 254.0f), 0.0f, 127 * (2.0f / 254.0f)});

  // dequantize is differentiable in the scale (a learned step), not in the integers.
  const Tensor q = kiln::tensor<std::uint8_t>({0, 128, 255}, {3});
  kiln::QuantizationParams p = u;
  p.scale = kiln::scalar(0.5f);
  kiln::GradientTape tape;
  tape.watch(p.scale);
  const Tensor y = kiln::sum(kiln::dequantize(q, p));
  CHECK(tape.gradient(y, p.scale).item<float>() == (0.0f - 127) + (128 - 127) + (255 - 127));

  const Tensor f64 = kiln::cast(x, kiln::f64);
  CHECK_THROWS_WITH(kiln::quantization_params(-1.0, 1.0, {.dtype = kiln::i32}),
                    Catch::Contains("[quantization_params] dtype must be i8 or u8, got i32"));
  CHECK_THROWS_WITH(kiln::quantization_params(-1.0, 1.0, {.num_bits = 9}),
                    Catch::Contains("num_bits must be in [2, 8]"));
  CHECK_THROWS_WITH(kiln::quantization_params(1.0, -1.0),
                    Catch::Contains("min must be smaller than max"));
  CHECK_THROWS_WITH(
      kiln::quantization_params(kiln::tensor<float>({0, 2}, {2}), kiln::tensor<float>({1, 1}, {2})),
      Catch::Contains("min must not exceed max"));
  CHECK_THROWS_WITH(kiln::quantize(f64, u),
                    Catch::Contains("[quantize] x must have the scale's dtype f32, got f64"));
  CHECK_THROWS_WITH(kiln::dequantize(kiln::cast(q, kiln::i8), u),
                    Catch::Contains("[dequantize] q must have the zero point's dtype u8, got i8"));
  const kiln::QuantizationParams per = kiln::quantization_params(kiln::tensor<float>({-1, -2}, {2}),
                                                                 kiln::tensor<float>({1, 2}, {2}));
  CHECK_THROWS_WITH(kiln::quantize(x, per),
                    Catch::Contains("must be a scalar or one per channel of the last dim of [6]"));
  kiln::QuantizationParams wide = u;
  wide.quant_max = 256;
  CHECK_THROWS_WITH(kiln::quantize(x, wide), Catch::Contains("do not fit u8"));
}
