// Workloads 11 and 12 of bench/compare (issue 23): a ResNet-style convolution and an attention
// block, forward and forward + backward, each one cached kiln::function.
//   11. conv2d: x [32, 56, 56, 64] (NHWC; also NCHW as conv2d_nchw), a 3x3 kernel of 64 -> 64
//       channels, stride 1, padding same. Forward: y. Backward: the gradients of sum(y * r) with
//       respect to x and the kernel, r a fixed tensor of y's shape.
//   12. attention: x [8, 512, 512] (batch, sequence, model width), 8 heads of 64: q, k, v and
//       the output each a [512, 512] projection; softmax(q k^T / 8) v per head. Forward: the
//       block's output. Backward: the gradients of sum(out * r) with respect to x and the four
//       projections.
// Usage: kiln_bench_layers [--quick] [--json]. --quick runs batch 2 (conv) and 1 (attention),
// one call per measurement: a smoke test.
#include <fmt/format.h>

#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/kiln.hpp>

#include "harness.hpp"

namespace {

using kiln::Tensor;

struct Row {
  std::string workload;
  kiln::bench::Timing timing;
  double checksum = 0;  // a value of the result, so the peers' can be compared
};

Tensor normal(const kiln::Shape& shape, double stddev, std::uint64_t seed) {
  return kiln::random::normal(shape, 0.0, stddev, seed);
}

Row time_function(const std::string& workload, const kiln::bench::TimingPlan& plan,
                  const std::function<std::vector<Tensor>()>& call) {
  Row row{workload, {}, 0};
  std::vector<Tensor> out = call();
  for (const Tensor& t : out) row.checksum += kiln::sum(kiln::cast(t, kiln::f64)).item<double>();
  row.timing = kiln::bench::measure(plan, [&] { out = call(); });
  return row;
}

std::vector<Row> conv_rows(std::int64_t batch, const kiln::bench::TimingPlan& plan) {
  std::vector<Row> rows;
  for (kiln::DataLayout layout :
       {kiln::DataLayout::channels_last, kiln::DataLayout::channels_first}) {
    const bool last = layout == kiln::DataLayout::channels_last;
    const std::string suffix = last ? "" : "_nchw";
    const kiln::Shape xs = last ? kiln::Shape{batch, 56, 56, 64} : kiln::Shape{batch, 64, 56, 56};
    const kiln::Shape ws = last ? kiln::Shape{3, 3, 64, 64} : kiln::Shape{64, 64, 3, 3};
    const Tensor x = normal(xs, 1.0, 1), w = normal(ws, 0.05, 2), r = normal(xs, 1.0, 3);
    const kiln::ConvOptions options{.padding = kiln::ConvPadding::same, .layout = layout};
    auto forward = kiln::function(
        [&](const Tensor& a, const Tensor& b) { return kiln::conv2d(a, b, options); });
    auto backward = kiln::function([&](const Tensor& a, const Tensor& b) {
      kiln::GradientTape tape;
      tape.watch(a);
      tape.watch(b);
      return tape.gradient(kiln::sum(kiln::conv2d(a, b, options) * r), {a, b});
    });
    rows.push_back(time_function("conv2d_forward" + suffix, plan,
                                 [&] { return std::vector<Tensor>{forward(x, w)}; }));
    rows.push_back(time_function("conv2d_train" + suffix, plan, [&] { return backward(x, w); }));
  }
  return rows;
}

std::vector<Row> attention_rows(std::int64_t batch, const kiln::bench::TimingPlan& plan) {
  constexpr std::int64_t seq = 512, width = 512, heads = 8, head = width / heads;
  const Tensor x = normal({batch, seq, width}, 1.0, 4);
  std::vector<Tensor> projections;
  for (std::uint64_t i = 0; i < 4; ++i) projections.push_back(normal({width, width}, 0.04, 10 + i));
  const Tensor r = normal({batch, seq, width}, 1.0, 5);
  const auto block = [](const Tensor& in, const std::vector<Tensor>& p) {
    const auto split = [&](const Tensor& t) {  // [b, s, w] -> [b, heads, s, head]
      return kiln::transpose(kiln::reshape(t, {in.dim(0), seq, heads, head}), {0, 2, 1, 3});
    };
    const Tensor q = split(kiln::matmul(in, p[0])), k = split(kiln::matmul(in, p[1])),
                 v = split(kiln::matmul(in, p[2]));
    const Tensor heads_out = kiln::nn::scaled_dot_product_attention(q, k, v);
    const Tensor joined =
        kiln::reshape(kiln::transpose(heads_out, {0, 2, 1, 3}), {in.dim(0), seq, width});
    return kiln::matmul(joined, p[3]);
  };
  auto forward = kiln::function([&](const std::vector<Tensor>& a) {
    return block(a[0], {a[1], a[2], a[3], a[4]});
  });
  auto backward = kiln::function([&](const std::vector<Tensor>& a) {
    kiln::GradientTape tape;
    for (const Tensor& t : a) tape.watch(t);
    return tape.gradient(kiln::sum(block(a[0], {a[1], a[2], a[3], a[4]}) * r), a);
  });
  std::vector<Tensor> args{x};
  args.insert(args.end(), projections.begin(), projections.end());
  return {
      time_function("attention_forward", plan, [&] { return std::vector<Tensor>{forward(args)}; }),
      time_function("attention_train", plan, [&] { return backward(args); })};
}

int usage(std::string_view arg) {
  fmt::print(stderr,
             "usage: kiln_bench_layers [--quick] [--json]\n"
             "  --quick  batch 2 (conv) and 1 (attention), one call per measurement\n"
             "  --json   print the results as JSON\n");
  return arg == "--help" || arg == "-h" ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  const kiln::bench::BenchArgs args = kiln::bench::parse_bench_args(argc, argv, false);
  if (args.bad()) return usage(args.unknown);
  const kiln::bench::TimingPlan plan =
      args.quick ? kiln::bench::TimingPlan::quick() : kiln::bench::TimingPlan{0.5, 0.2, 11};
  const std::int64_t conv_batch = args.quick ? 2 : 32, attention_batch = args.quick ? 1 : 8;
  std::vector<Row> rows;
  try {
    rows = conv_rows(conv_batch, plan);
    for (Row& r : attention_rows(attention_batch, plan)) rows.push_back(std::move(r));
  } catch (const std::exception& e) {
    fmt::print(stderr, "kiln_bench_layers: {}\n", e.what());
    return 1;
  }
  if (args.json) {
    std::vector<std::string> items;
    for (const Row& r : rows)
      items.push_back(fmt::format(
          "{{\"workload\": \"{}\", \"variant\": \"kiln\", \"median_s\": {}, \"p10_s\": {}, "
          "\"p90_s\": {}, \"samples\": {}, \"checksum\": {}}}",
          r.workload, r.timing.median, r.timing.p10, r.timing.p90, r.timing.samples, r.checksum));
    fmt::print(
        "{{\"program\": \"kiln_bench_layers\", \"quick\": {}, \"conv_batch\": {}, "
        "\"attention_batch\": {}, \"rows\": [{}]}}\n",
        args.quick, conv_batch, attention_batch, fmt::join(items, ", "));
  } else {
    for (const Row& r : rows)
      fmt::print("{:<22} {:9.3f} ms (spread {:4.1f}%)\n", r.workload, r.timing.median * 1e3,
                 r.timing.spread() * 100);
  }
  return 0;
}
