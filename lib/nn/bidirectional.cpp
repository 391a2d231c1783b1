// nn::Bidirectional: forward and backward copies of a recurrent layer, their outputs merged.
#include "kiln/nn/bidirectional.hpp"

#include <memory>
#include <utility>

#include "core/fail.hpp"
#include "kiln/ops.hpp"
#include "nn/time_reverse.hpp"

namespace kiln::nn {

namespace {

constexpr std::string_view bidirectional_op = "nn.Bidirectional";

/// A new layer of `layer`'s kind with its units and options, named `name`, with go_backwards
/// negated for the backward copy.
template <class L>
std::shared_ptr<Layer> copy_of(const L& layer, std::string name, bool backward) {
  auto options = layer.options();
  options.name = std::move(name);
  if (backward) options.go_backwards = !options.go_backwards;
  return std::make_shared<L>(layer.units(), std::move(options));
}

/// layer.call(x, options) for the recurrent layer kinds Bidirectional wraps.
std::vector<Tensor> call_recurrent(Layer& layer, const Tensor& x,
                                   const RecurrentCallOptions& options) {
  if (auto* lstm = dynamic_cast<LSTM*>(&layer)) return lstm->call(x, options);
  if (auto* gru = dynamic_cast<GRU*>(&layer)) return gru->call(x, options);
  return static_cast<SimpleRNN&>(layer).call(x, options);
}

/// A [batch, time, n] sequence with its time axis reversed (the time dim may be dynamic).
Tensor reverse_sequence(const Tensor& seq) {
  return transpose(reverse_time(transpose(seq, {1, 0, 2})), {1, 0, 2});
}

Tensor merge(MergeMode mode, const Tensor& forward, const Tensor& backward) {
  switch (mode) {
    case MergeMode::concat:
      return concat({forward, backward}, -1);
    case MergeMode::sum:
      return forward + backward;
    case MergeMode::mul:
      return forward * backward;
    case MergeMode::ave:
      return (forward + backward) * 0.5;
    case MergeMode::none:
      break;
  }
  detail::fail(bidirectional_op, "merge mode {} does not merge", merge_mode_name(mode));
}

}  // namespace

std::string_view merge_mode_name(MergeMode mode) {
  switch (mode) {
    case MergeMode::concat:
      return "concat";
    case MergeMode::sum:
      return "sum";
    case MergeMode::mul:
      return "mul";
    case MergeMode::ave:
      return "ave";
    case MergeMode::none:
      return "none";
  }
  return "unknown";
}

MergeMode merge_mode_named(std::string_view name) {
  for (MergeMode mode :
       {MergeMode::concat, MergeMode::sum, MergeMode::mul, MergeMode::ave, MergeMode::none})
    if (merge_mode_name(mode) == name) return mode;
  detail::fail(bidirectional_op,
               "unknown merge_mode '{}'; expected concat, sum, mul, ave or none (Keras's None)",
               name);
}

Bidirectional::Bidirectional(const Layer& layer, BidirectionalOptions options)
    : Layer("bidirectional", std::move(options.name)), merge_mode_(options.merge_mode) {
  if (merge_mode_name(merge_mode_) == "unknown")
    detail::fail(bidirectional_op, "{}: unknown merge_mode {}", path(),
                 static_cast<int>(merge_mode_));
  if (!layer.variables().empty())
    detail::fail(bidirectional_op,
                 "{}: the layer {} has been called already (it has variables); wrap a layer that "
                 "has not been built: Bidirectional copies its units and options, not its weights",
                 path(), layer.path());
  const std::string forward_name = "forward_" + layer.name();
  const std::string backward_name = "backward_" + layer.name();
  std::shared_ptr<Layer> forward, backward;
  const auto wrap = [&](const auto& recurrent, std::size_t state_size) {
    forward = copy_of(recurrent, forward_name, false);
    backward = copy_of(recurrent, backward_name, true);
    state_size_ = state_size;
    return_sequences_ = recurrent.options().return_sequences;
    return_state_ = recurrent.options().return_state;
  };
  if (const auto* lstm = dynamic_cast<const LSTM*>(&layer)) {
    wrap(*lstm, 2);
  } else if (const auto* gru = dynamic_cast<const GRU*>(&layer)) {
    wrap(*gru, 1);
  } else if (const auto* rnn = dynamic_cast<const SimpleRNN*>(&layer)) {
    wrap(*rnn, 1);
  } else {
    detail::fail(bidirectional_op,
                 "{}: can wrap an nn.LSTM, nn.GRU or nn.SimpleRNN (a sequence layer with "
                 "go_backwards); got the layer {}, which is not one",
                 path(), layer.path());
  }
  forward_ = &add_module(forward_name, std::move(forward));
  backward_ = &add_module(backward_name, std::move(backward));
}

Tensor Bidirectional::operator()(const Tensor& x) {
  if (merge_mode_ == MergeMode::none)
    detail::fail(bidirectional_op,
                 "{}: merge_mode none gives two outputs, not one; use call(x), which returns "
                 "{{forward output, backward output}}",
                 path());
  return call(x).front();
}

std::vector<Tensor> Bidirectional::call(const Tensor& x, const std::vector<Tensor>& initial_state) {
  return call(x, RecurrentCallOptions{.initial_state = initial_state});
}

std::vector<Tensor> Bidirectional::call(const Tensor& x, const RecurrentCallOptions& options) {
  RecurrentCallOptions forward_options = options, backward_options = options;
  forward_options.initial_state.clear();
  backward_options.initial_state.clear();
  const std::vector<Tensor>& init = options.initial_state;
  if (!init.empty()) {
    if (init.size() != 2 * state_size_)
      detail::fail(bidirectional_op,
                   "{}: initial_state must be empty or {} tensors ({} forward states, then {} "
                   "backward ones), got {}",
                   path(), 2 * state_size_, state_size_, state_size_, init.size());
    const auto half = init.begin() + static_cast<std::ptrdiff_t>(state_size_);
    forward_options.initial_state.assign(init.begin(), half);
    backward_options.initial_state.assign(half, init.end());
  }
  const std::vector<Tensor> forward = call_recurrent(*forward_, x, forward_options);
  const std::vector<Tensor> backward = call_recurrent(*backward_, x, backward_options);
  note_input(x);
  // The backward copy's sequence is in its processing order; back to input order.
  const Tensor backward_output = return_sequences_ ? reverse_sequence(backward[0]) : backward[0];
  std::vector<Tensor> out;
  if (merge_mode_ == MergeMode::none)
    out = {forward[0], backward_output};
  else
    out = {merge(merge_mode_, forward[0], backward_output)};
  if (return_state_) {
    out.insert(out.end(), forward.begin() + 1, forward.end());
    out.insert(out.end(), backward.begin() + 1, backward.end());
  }
  return out;
}

}  // namespace kiln::nn
