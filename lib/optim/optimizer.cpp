// The Optimizer base (validation, clipping, learning rate, iteration counter, slots) and the
// learning-rate schedules.
#include <algorithm>
#include <cmath>
#include <map>

#include "core/fail.hpp"
#include "core/hooks.hpp"
#include "jit/log.hpp"
#include "kiln/creation.hpp"
#include "kiln/function.hpp"
#include "kiln/name_scope.hpp"
#include "kiln/ops.hpp"
#include "kiln/optim.hpp"
#include "kiln/sparse.hpp"
#include "ops/rows.hpp"
#include "state/variable_impl.hpp"

namespace kiln::optim {

// ------------------------------------------------------------------ schedules

Schedule::Schedule(std::string name, Rule rule)
    : name_(std::move(name)), rule_(std::make_shared<const Rule>(std::move(rule))) {
  if (!*rule_) detail::fail("optim.Schedule", "schedule '{}' has an empty rule", name_);
}

Tensor Schedule::operator()(const Tensor& step) const {
  Tensor rate = (*rule_)(step);
  if (!rate.defined() || rate.size() != 1 || !is_floating(rate.dtype()))
    detail::fail("optim.Schedule", "schedule '{}' must return a floating scalar, got {}", name_,
                 rate.defined() ? fmt::format("{} {}", dtype_name(rate.dtype()), rate.shape())
                                : std::string("an undefined tensor"));
  return rate.ndim() == 0 ? rate : reshape(rate, {});
}

namespace schedules {

namespace {
void check_rate(std::string_view op, std::string_view what, double v) {
  if (!std::isfinite(v) || v < 0) detail::fail(op, "{} must be finite and >= 0, got {}", what, v);
}
}  // namespace

Schedule constant(double rate) {
  check_rate("optim.schedules.constant", "rate", rate);
  return Schedule("constant", [rate](const Tensor&) { return full({}, rate, f32); });
}

Schedule exponential_decay(double initial_rate, std::int64_t decay_steps, double decay_rate,
                           bool staircase) {
  constexpr std::string_view op = "optim.schedules.exponential_decay";
  check_rate(op, "initial_rate", initial_rate);
  check_rate(op, "decay_rate", decay_rate);
  if (decay_steps <= 0) detail::fail(op, "decay_steps must be positive, got {}", decay_steps);
  return Schedule("exponential_decay", [=](const Tensor& step) {
    Tensor p = cast(step, f32) / static_cast<double>(decay_steps);
    if (staircase) p = kiln::floor(p);
    return kiln::pow(decay_rate, p) * initial_rate;
  });
}

Schedule piecewise_constant(std::vector<std::int64_t> boundaries, std::vector<double> values) {
  constexpr std::string_view op = "optim.schedules.piecewise_constant";
  if (values.size() != boundaries.size() + 1)
    detail::fail(op, "needs one more value than boundaries, got {} boundaries and {} values",
                 boundaries.size(), values.size());
  for (std::size_t i = 1; i < boundaries.size(); ++i)
    if (boundaries[i] <= boundaries[i - 1])
      detail::fail(op, "boundaries must increase, got {} after {}", boundaries[i],
                   boundaries[i - 1]);
  for (double v : values) check_rate(op, "every value", v);
  return Schedule("piecewise_constant", [boundaries = std::move(boundaries),
                                         values = std::move(values)](const Tensor& step) {
    Tensor rate = full({}, values[0], f32);
    for (std::size_t i = 0; i < boundaries.size(); ++i)
      rate = where(step > boundaries[i], full({}, values[i + 1], f32), rate);
    return rate;
  });
}

}  // namespace schedules

// ------------------------------------------------------------------ Optimizer

struct Optimizer::State {
  std::string kind;
  LearningRate learning_rate;
  std::optional<double> clipnorm;
  std::optional<double> global_clipnorm;
  std::vector<std::string> slot_names;
  Variable iterations;
  Variable rate;  // the constant learning rate (undefined for a schedule)
  // The variables this optimizer holds slots for, by id: a weak reference (to notice when the
  // variable dies) and the name its slots were created under.
  struct Owner {
    std::weak_ptr<detail::VariableImpl> variable;
    std::string base;
  };
  std::map<std::uint64_t, Owner> owners;
  double slot_initial = 0.0;
  GradientAggregator* aggregator = nullptr;
  // Eager apply() runs its dense updates as one compiled function per list of variables (and
  // which of them have gradients), traced on first use. The entries hold the variables weakly
  // and go when one of them dies; at most max_compiled are kept.
  struct Compiled {
    std::vector<std::weak_ptr<detail::VariableImpl>> variables;
    std::function<void(const std::vector<Tensor>&)> run;  // null: this list runs op by op
  };
  static constexpr std::size_t max_compiled = 8;
  std::map<std::vector<std::uint64_t>, Compiled> compiled;
  const std::function<void(const std::vector<Tensor>&)>* body = nullptr;  // while apply() runs

  State(std::string k, LearningRate lr) : kind(std::move(k)), learning_rate(std::move(lr)) {}
};

namespace {
template <class S>
S& checked(const std::unique_ptr<S>& state) {
  if (!state) detail::fail("optim.Optimizer", "this optimizer was moved from");
  return *state;
}
}  // namespace

Optimizer::Optimizer(std::string kind, std::string_view default_name, std::string name,
                     const LearningRate& learning_rate, std::optional<double> clipnorm,
                     std::optional<double> global_clipnorm, std::vector<std::string> slot_names)
    : Module(name.empty() ? Module(AutomaticName{default_name}) : Module(std::move(name))),
      state_(std::make_unique<State>(std::move(kind), learning_rate)) {
  State& s = *state_;
  if (!learning_rate.is_schedule() &&
      (!std::isfinite(learning_rate.constant()) || learning_rate.constant() < 0))
    detail::fail(s.kind, "learning_rate must be finite and >= 0, got {}", learning_rate.constant());
  for (const auto& [value, what] :
       {std::pair{clipnorm, "clipnorm"}, std::pair{global_clipnorm, "global_clipnorm"}})
    if (value && !(std::isfinite(*value) && *value > 0))
      detail::fail(s.kind, "{} must be finite and > 0, got {}", what, *value);
  s.clipnorm = clipnorm;
  s.global_clipnorm = global_clipnorm;
  s.slot_names = std::move(slot_names);
  s.iterations = add_variable("iterations", {}, init::zeros(), /*trainable*/ false, i64);
  if (!learning_rate.is_schedule())
    s.rate = add_variable("learning_rate", {}, init::constant(learning_rate.constant()),
                          /*trainable*/ false, f32);
}

Optimizer::~Optimizer() = default;
Optimizer::Optimizer(Optimizer&&) noexcept = default;

const std::string& Optimizer::kind() const { return checked(state_).kind; }
Variable Optimizer::iterations() const { return checked(state_).iterations; }
const std::vector<std::string>& Optimizer::slot_names() const { return checked(state_).slot_names; }

Tensor Optimizer::learning_rate() const {
  const State& s = checked(state_);
  if (s.learning_rate.is_schedule()) return s.learning_rate.schedule()(s.iterations.value());
  return s.rate.value();
}

void Optimizer::set_gradient_aggregator(GradientAggregator* aggregator) {
  State& s = checked(state_);
  if (aggregator != nullptr && s.aggregator != nullptr && s.aggregator != aggregator)
    detail::fail(s.kind,
                 "{} already has a gradient aggregator (one DistributedOptimizer per "
                 "optimizer)",
                 path());
  s.aggregator = aggregator;
}

GradientAggregator* Optimizer::gradient_aggregator() const { return checked(state_).aggregator; }

void Optimizer::set_slot_initial_value(double value) { checked(state_).slot_initial = value; }

void Optimizer::update_sparse(const Variable& var, const Tensor& grad,
                              std::span<const Variable> slots, const Tensor& learning_rate,
                              const Tensor& step) {
  update(var, to_dense(grad), slots, learning_rate, step);
}

void Optimizer::set_learning_rate(double rate) {
  State& s = checked(state_);
  if (s.learning_rate.is_schedule())
    detail::fail(s.kind, "{} uses the schedule '{}'; set_learning_rate needs a constant rate",
                 path(), s.learning_rate.schedule().name());
  if (!std::isfinite(rate) || rate < 0)
    detail::fail(s.kind, "learning_rate must be finite and >= 0, got {}", rate);
  s.rate.assign(full({}, rate, f32));
}

Variable Optimizer::slot(const Variable& var, std::string_view slot_name) const {
  const State& s = checked(state_);
  if (!var.defined()) detail::fail(s.kind, "slot: empty Variable handle");
  auto it = s.owners.find(var.id());
  const std::string local =
      it == s.owners.end() ? std::string() : fmt::format("{}/{}", it->second.base, slot_name);
  if (it == s.owners.end() || !has_variable(local))
    detail::fail(s.kind,
                 "{} has no slot '{}' for variable {} (slots are created by the first apply() "
                 "that updates the variable; this optimizer's slots are: {})",
                 path(), slot_name, var.name(), fmt::join(s.slot_names, ", "));
  return variable(local);
}

void Optimizer::apply(const std::vector<Tensor>& grads, const std::vector<Variable>& vars) {
  State& s = checked(state_);
  const std::string& op = s.kind;
  if (grads.size() != vars.size())
    detail::fail(op, "got {} gradients for {} variables", grads.size(), vars.size());
  for (std::size_t i = 0; i < vars.size(); ++i) {
    if (!vars[i].defined()) detail::fail(op, "variable {} is an empty Variable handle", i);
    if (!is_floating(vars[i].dtype()))
      detail::fail(op, "variable {} ({}) is {}; only f32 and f64 variables can be trained", i,
                   vars[i].name(), dtype_name(vars[i].dtype()));
    if (grads[i].defined() &&
        (grads[i].dtype() != vars[i].dtype() || grads[i].shape() != vars[i].shape()))
      detail::fail(op, "gradient {} is {} {}, but its variable {} is {} {}", i,
                   dtype_name(grads[i].dtype()), grads[i].shape(), vars[i].name(),
                   dtype_name(vars[i].dtype()), vars[i].shape());
  }

  // Slots of destroyed variables go; two live variables may not share a name.
  for (auto it = s.owners.begin(); it != s.owners.end();) {
    if (it->second.variable.expired()) {
      for (const auto& slot_name : s.slot_names)
        remove_variable(fmt::format("{}/{}", it->second.base, slot_name));
      it = s.owners.erase(it);
    } else {
      ++it;
    }
  }
  std::erase_if(s.compiled, [](const auto& entry) {
    return std::ranges::any_of(entry.second.variables, [](const auto& v) { return v.expired(); });
  });
  std::map<std::string, std::uint64_t> ids_by_name;
  for (const auto& [id, owner] : s.owners) ids_by_name.emplace(owner.base, id);
  for (const Variable& v : vars) {
    auto [it, inserted] = ids_by_name.emplace(v.name(), v.id());
    if (!inserted && it->second != v.id())
      detail::fail(op,
                   "{} updates two different variables named {}; their slots would share a name "
                   "(give the models different names)",
                   path(), v.name());
  }

  // Indexed slices: each row once (so their values' norm is the dense gradient's).
  std::vector<Tensor> g = s.aggregator ? s.aggregator->aggregate(grads, vars) : grads;
  if (g.size() != grads.size())
    detail::fail(op, "the gradient aggregator returned {} gradients for {}", g.size(),
                 grads.size());
  for (Tensor& t : g)
    if (t.defined() && t.is_indexed_slices()) t = deduplicate(t);

  // Slots are created here, eagerly or by the first trace, never inside a compiled update.
  std::vector<std::vector<Variable>> slots(vars.size());
  for (std::size_t i = 0; i < vars.size(); ++i) {
    if (!g[i].defined()) continue;
    const Variable& v = vars[i];
    s.owners.try_emplace(v.id(), State::Owner{v.impl(), v.name()});
    const std::string& base = s.owners.at(v.id()).base;
    for (const auto& slot_name : s.slot_names)
      slots[i].push_back(
          add_variable(fmt::format("{}/{}", base, slot_name), v.shape(),
                       s.slot_initial == 0.0 ? init::zeros() : init::constant(s.slot_initial),
                       /*trainable*/ false, v.dtype()));
  }
  if (!apply_compiled(g, vars, slots)) apply_updates(std::move(g), vars, slots);
}

void Optimizer::apply_updates(std::vector<Tensor> g, const std::vector<Variable>& vars,
                              const std::vector<std::vector<Variable>>& slots) {
  State& s = *state_;
  // Clipping scales only an indexed-slices gradient's values.
  const auto values = [](const Tensor& t) {
    return t.is_indexed_slices() ? slices_of(t).values : t;
  };
  const auto scaled = [](const Tensor& t, const Tensor& scale) {
    if (!t.is_indexed_slices()) return t * scale;
    const detail::RowSlices& p = detail::slices_parts(t);
    return detail::make_slices(p.indices, p.values * scale, t.shape(), p.unique, p.padded);
  };
  if (s.clipnorm) {
    for (Tensor& t : g)
      if (t.defined())
        t = scaled(t, *s.clipnorm / maximum(sqrt(sum(square(values(t)))), *s.clipnorm));
  }
  if (s.global_clipnorm) {
    Tensor total;
    for (const Tensor& t : g) {
      if (!t.defined()) continue;
      Tensor part = sum(square(cast(values(t), f64)));
      total = total.defined() ? total + part : part;
    }
    if (total.defined()) {
      const Tensor scale = *s.global_clipnorm / maximum(sqrt(total), *s.global_clipnorm);
      for (Tensor& t : g)
        if (t.defined()) t = scaled(t, t.dtype() == f64 ? scale : cast(scale, t.dtype()));
    }
  }

  const Tensor step = s.iterations.value();
  const Tensor rate =
      s.learning_rate.is_schedule() ? s.learning_rate.schedule()(step) : s.rate.value();
  const Tensor next_step = step + std::int64_t{1};
  const auto as = [](const Tensor& t, DType dtype) {
    return t.dtype() == dtype ? t : cast(t, dtype);
  };
  for (std::size_t i = 0; i < vars.size(); ++i) {
    if (!g[i].defined()) continue;
    const Variable& v = vars[i];
    if (g[i].is_indexed_slices())
      update_sparse(v, g[i], slots[i], as(rate, v.dtype()), as(next_step, v.dtype()));
    else
      update(v, g[i], slots[i], as(rate, v.dtype()), as(next_step, v.dtype()));
  }
  s.iterations.assign(next_step);
}

bool Optimizer::apply_compiled(const std::vector<Tensor>& g, const std::vector<Variable>& vars,
                               const std::vector<std::vector<Variable>>& slots) {
  State& s = *state_;
  // Inside a trace the update joins the traced graph; a recording tape must see its ops.
  if (detail::tracing() || functions_run_eagerly() || detail::any_tape_recording()) return false;
  // The key: each variable's identity and whether it has a gradient (only dense ones compile).
  std::vector<std::uint64_t> key;
  key.reserve(vars.size());
  std::vector<Tensor> dense;
  for (std::size_t i = 0; i < vars.size(); ++i) {
    if (g[i].defined() && g[i].is_indexed_slices()) return false;
    key.push_back(vars[i].id() * 2 + (g[i].defined() ? 1 : 0));
    if (g[i].defined()) dense.push_back(g[i]);
  }
  if (dense.empty()) return false;

  // What the trace runs: the gradients (placeholders now) put back in their places.
  const std::function<void(const std::vector<Tensor>&)> body = [&](const std::vector<Tensor>& d) {
    std::vector<Tensor> all(vars.size());
    for (std::size_t i = 0, next = 0; i < vars.size(); ++i)
      if (g[i].defined()) all[i] = d[next++];
    apply_updates(std::move(all), vars, slots);
  };
  s.body = &body;
  struct Clear {
    State& s;
    ~Clear() { s.body = nullptr; }
  } clear{s};

  auto it = s.compiled.find(key);
  if (it == s.compiled.end()) {
    if (s.compiled.size() >= State::max_compiled) s.compiled.erase(s.compiled.begin());
    State::Compiled entry;
    for (const Variable& v : vars) entry.variables.push_back(v.impl());
    auto fn = kiln::function([&s](const std::vector<Tensor>& d) { (*s.body)(d); },
                             {.name = fmt::format("{}.apply", path())});
    // An update that cannot be traced (a subclass's update() reading values) runs op by op.
    try {
      fn.get_concrete_function(dense);
      entry.run = [fn](const std::vector<Tensor>& d) { fn(d); };
    } catch (const Error& e) {
      entry.run = nullptr;
      detail::log_warning(fmt::format(
          "{}: {}'s update cannot be traced, so apply() runs it op by op for these variables "
          "({})",
          s.kind, path(), e.what()));
    }
    it = s.compiled.emplace(key, std::move(entry)).first;
  }
  if (!it->second.run) return false;
  it->second.run(dense);
  return true;
}

}  // namespace kiln::optim
