// Vector-Jacobian rules of the indexing primitives (cumsum ... scatter_nd), written with kiln ops
// like those of vjp.cpp, so they also work under an outer tape and while tracing.

#include "autodiff/tape.hpp"
#include "core/fail.hpp"
#include "kiln/creation.hpp"
#include "kiln/ops.hpp"
#include "ops/dispatch.hpp"
#include "ops/indexing.hpp"

namespace kiln::detail {

namespace {

/// For assign mode: true at each update that reached the output, false at one that a later
/// update to the same position overwrote. Each update is tagged with its row-major number,
/// the tags are scattered like the updates, and each update reads back the tag that won.
template <class Scatter, class Gather>
Tensor winning_updates(const Tensor& x, const Tensor& updates, Scatter scatter_tags,
                       Gather read_back, std::string_view op) {
  require_static_shape(updates.shape(), op, "the updates' shape (in the gradient of assign)");
  const Tensor tags = reshape(arange(updates.size(), DType::i64), updates.shape());
  const Tensor none = cast(zeros_like(x), DType::i64) - 1;
  return equal(read_back(scatter_tags(none, tags)), tags);
}

}  // namespace

std::vector<Tensor> indexing_vjp(const TapeEntry& e, const Tensor& g) {
  const auto& in = e.inputs;
  const Tensor& y = e.output;
  const std::int64_t axis = e.attrs.axis;
  const auto mode = [&e] { return static_cast<ScatterMode>(e.attrs.ints.at(0)); };
  switch (e.prim) {
    case Prim::cumsum:  // each input reaches every output after it in scan order
      return {running(Prim::cumsum, g, axis, e.attrs.ints[0] != 0, e.attrs.ints[1] == 0)};
    case Prim::cumprod: {
      // d y_j / d x_i is the product of the other factors of y_j. Before the first zero (in scan
      // order) that is y_j / x_i; at the first zero z, the products with x_z taken as 1; after
      // it, 0 (every such product holds x_z).
      const Tensor& x = in[0];
      const bool exclusive = e.attrs.ints[0] != 0, reverse = e.attrs.ints[1] != 0;
      const auto later_sum = [&](const Tensor& v) {
        return running(Prim::cumsum, v, axis, exclusive, !reverse);
      };
      const Tensor zero = equal(x, 0.0);
      const Tensor zeros_so_far =
          running(Prim::cumsum, cast(zero, x.dtype()), axis, false, reverse);
      const Tensor before_first = equal(zeros_so_far, 0.0);
      const Tensor first_zero = logical_and(zero, equal(zeros_so_far, 1.0));
      const Tensor one = ones_like(x);
      const Tensor plain = later_sum(g * y) / where(before_first, x, one);
      const Tensor without_zero =
          running(Prim::cumprod, where(first_zero, one, x), axis, exclusive, reverse);
      return {where(before_first, plain,
                    where(first_zero, later_sum(g * without_zero), zeros_like(x)))};
    }
    case Prim::take_along_axis:
      return {scatter_exact(zeros_like(in[0]), in[1], g, axis, ScatterMode::add), Tensor()};
    case Prim::scatter: {
      const Tensor& indices = in[1];
      const Tensor picked = take_along_exact(g, indices, axis);
      if (mode() == ScatterMode::add) return {g, Tensor(), picked};
      if (mode() != ScatterMode::assign) break;
      const Tensor won = winning_updates(
          in[0], in[2],
          [&](const Tensor& base, const Tensor& tags) {
            return scatter_exact(base, indices, tags, axis, ScatterMode::assign);
          },
          [&](const Tensor& marks) { return take_along_exact(marks, indices, axis); }, "scatter");
      return {scatter_exact(g, indices, zeros_like(in[2]), axis, ScatterMode::assign), Tensor(),
              where(won, picked, zeros_like(picked))};
    }
    case Prim::gather_nd:
      return {scatter_nd_exact(zeros_like(in[0]), in[1], g, ScatterMode::add, axis), Tensor()};
    case Prim::scatter_nd: {
      const Tensor& indices = in[1];
      const Tensor picked = gather_nd_exact(g, indices, axis);
      if (mode() == ScatterMode::add) return {g, Tensor(), picked};
      if (mode() != ScatterMode::assign) break;
      const Tensor won = winning_updates(
          in[0], in[2],
          [&](const Tensor& base, const Tensor& tags) {
            return scatter_nd_exact(base, indices, tags, ScatterMode::assign, axis);
          },
          [&](const Tensor& marks) { return gather_nd_exact(marks, indices, axis); }, "scatter_nd");
      return {scatter_nd_exact(g, indices, zeros_like(in[2]), ScatterMode::assign, axis), Tensor(),
              where(won, picked, zeros_like(picked))};
    }
    default:
      fail(name(e.prim), "has no indexing gradient rule");
  }
  fail(name(e.prim), "has no gradient in modes other than assign and add");
}

}  // namespace kiln::detail
