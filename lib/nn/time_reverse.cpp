// reverse_time: a static time dim is a backwards slice; a dynamic one a gather of counted indices.
#include "nn/time_reverse.hpp"

#include <utility>
#include <vector>

#include "kiln/autodiff.hpp"
#include "kiln/control_flow.hpp"
#include "kiln/creation.hpp"
#include "kiln/ops.hpp"

namespace kiln::nn {

// A dynamic time dim cannot be sliced backwards while tracing, so there the indices T-1, ..., 0
// come from a counting scan run backwards (step t of a reversed scan is its (T-1-t)-th) and
// gather picks the rows. The gradient is the same reversal of the output gradient (gather's own
// gradient needs the size of the gathered axis, which is unknown while tracing).
Tensor reverse_time(const Tensor& seq) {
  if (!is_dynamic_dim(seq.dim(0))) return slice(seq, 0, Slice::none, Slice::none, -1);
  const auto count = [](const std::vector<Tensor>& c, const std::vector<Tensor>&) {
    return std::pair<std::vector<Tensor>, std::vector<Tensor>>{{c[0] + 1}, {c[0]}};
  };
  const Tensor indices =
      scan(count, {scalar(0.0, DType::i64)}, {stop_gradient(seq)}, {.reverse = true}).second[0];
  const auto reverse = [indices](const Tensor& t) { return gather(t, indices, 0); };
  return custom_gradient([reverse](const std::vector<Tensor>& v) {
    return std::pair<Tensor, GradFn>{
        reverse(v[0]), [reverse](const Tensor& g) { return std::vector<Tensor>{reverse(g)}; }};
  })({seq});
}

}  // namespace kiln::nn
