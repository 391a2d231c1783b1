#include "kiln/variable.hpp"

#include <atomic>

#include "core/fail.hpp"
#include "core/tensor_impl.hpp"
#include "jit/trace.hpp"
#include "kiln/ops.hpp"
#include "state/variable_impl.hpp"

namespace kiln {

namespace detail {

namespace {
std::atomic<std::uint64_t> next_variable_id{1};
}

void check_assignable(const VariableImpl& v, const Tensor& t, const char* op) {
  if (!t.defined()) fail(op, "cannot assign an undefined tensor to variable '{}'", v.name);
  if (t.dtype() != v.dtype || t.shape() != v.shape)
    fail(op, "variable '{}' is {} {}; the new value is {} {}", v.name, dtype_name(v.dtype), v.shape,
         dtype_name(t.dtype()), t.shape());
}

}  // namespace detail

namespace {
const detail::VariableImpl& checked(const std::shared_ptr<detail::VariableImpl>& impl,
                                    const char* op) {
  if (!impl) detail::fail(op, "empty Variable handle");
  return *impl;
}
}  // namespace

Variable::Variable(const Tensor& initial, std::string name, bool trainable) {
  if (!initial.defined())
    detail::fail("Variable", "variable '{}' needs a defined initial value", name);
  detail::TraceContext* trace = detail::current_trace();
  if (trace != nullptr) {
    if (!trace->allow_variable_creation())
      detail::fail(trace->function_name(),
                   "tried to create variable '{}' while retracing. Variables may be created only "
                   "during a function's first trace; create it outside the function or on the "
                   "first call (layers do this lazily), and reuse it afterwards",
                   name);
    if (initial.impl()->is_symbolic())
      detail::fail(trace->function_name(),
                   "the initial value of variable '{}' depends on the function's arguments; "
                   "initial values are computed eagerly, once (use an initializer or a constant)",
                   name);
  }
  auto impl = std::make_shared<detail::VariableImpl>();
  impl->id = detail::next_variable_id.fetch_add(1);
  impl->name = std::move(name);
  impl->dtype = initial.dtype();
  impl->shape = initial.shape();
  impl->trainable = trainable;
  impl->value = initial.contiguous();
  if (trace != nullptr) trace->created_variables().push_back(impl);
  impl_ = std::move(impl);
}

Tensor Variable::value() const {
  const auto& v = checked(impl_, "Variable.value");
  if (detail::TraceContext* trace = detail::current_trace()) return trace->read_variable(impl_);
  return v.read();
}

void Variable::assign(const Tensor& value) const {
  auto& v = const_cast<detail::VariableImpl&>(checked(impl_, "Variable.assign"));
  detail::check_assignable(v, value, "Variable.assign");
  if (detail::TraceContext* trace = detail::current_trace()) {
    trace->assign_variable(impl_, value);
    return;
  }
  detail::check_concrete(*value.impl(), "Variable.assign");
  v.write(value);
}

void Variable::assign_add(const Tensor& delta) const {
  checked(impl_, "Variable.assign_add");
  assign(add(value(), delta));
}

void Variable::assign_sub(const Tensor& delta) const {
  checked(impl_, "Variable.assign_sub");
  assign(sub(value(), delta));
}

const std::string& Variable::name() const { return checked(impl_, "Variable.name").name; }
bool Variable::trainable() const { return checked(impl_, "Variable.trainable").trainable.load(); }
void Variable::set_trainable(bool trainable) const {
  const_cast<detail::VariableImpl&>(checked(impl_, "Variable.set_trainable")).trainable = trainable;
}
DType Variable::dtype() const { return checked(impl_, "Variable.dtype").dtype; }
const Shape& Variable::shape() const { return checked(impl_, "Variable.shape").shape; }
std::uint64_t Variable::id() const { return checked(impl_, "Variable.id").id; }

}  // namespace kiln
