#include "kiln/variable.hpp"

#include <atomic>
#include <map>
#include <mutex>

#include "core/fail.hpp"
#include "core/hooks.hpp"
#include "core/tensor_impl.hpp"
#include "kiln/name_scope.hpp"
#include "kiln/ops.hpp"
#include "kiln/sparse.hpp"
#include "ops/dispatch.hpp"
#include "ops/rows.hpp"
#include "state/deferred_restore.hpp"
#include "state/names.hpp"
#include "state/variable_impl.hpp"

namespace kiln {

namespace detail {

namespace {

std::atomic<std::uint64_t> next_variable_id{1};

// The registry behind the collections: every live variable by id (ids grow with creation, so
// the map is in creation order). Entries are removed by ~VariableImpl under the mutex, so
// while the mutex is held every listed object is still intact (its destructor, if running,
// waits for the mutex before its members go). Nothing that could release a variable may run
// while the mutex is held.
struct Registration {
  VariableImpl* impl;
  std::weak_ptr<VariableImpl> weak;
};
std::mutex registry_mutex;
std::map<std::uint64_t, Registration>& registry() {
  static auto* map = new std::map<std::uint64_t, Registration>;
  return *map;
}

std::vector<Variable> collect(std::string_view scope_prefix, bool trainable_only) {
  std::vector<Variable> out;
  std::lock_guard lock(registry_mutex);
  for (const auto& [id, reg] : registry()) {
    if (!path_has_prefix(reg.impl->name, scope_prefix)) continue;
    if (trainable_only && !reg.impl->trainable.load()) continue;
    if (auto strong = reg.weak.lock()) out.emplace_back(std::move(strong));
  }
  return out;
}

}  // namespace

VariableImpl::~VariableImpl() {
  if (id == 0) return;
  std::lock_guard lock(registry_mutex);
  registry().erase(id);
}

void rename_variable(VariableImpl& v, std::string name) {
  std::lock_guard lock(registry_mutex);
  v.name = std::move(name);
}

void check_assignable(const VariableImpl& v, const Tensor& t, const char* op) {
  if (!t.defined()) fail(op, "cannot assign an undefined tensor to variable '{}'", v.name);
  if (t.dtype() != v.dtype || t.shape() != v.shape)
    fail(op, "variable '{}' is {} {}; the new value is {} {}", v.name, dtype_name(v.dtype), v.shape,
         dtype_name(t.dtype()), t.shape());
}

void check_variable_creation_allowed(std::string_view name) {
  TraceHooks* trace = active_trace();
  if (trace == nullptr || trace->allow_variable_creation()) return;
  fail(trace->function_name(),
       "tried to create variable '{}' while retracing. Variables may be created only during a "
       "function's first trace; create it outside the function or on the first call (layers do "
       "this lazily), and reuse it afterwards",
       name);
}

Variable create_variable(const Tensor& initial, std::string name, bool trainable) {
  if (!initial.defined()) fail("Variable", "variable '{}' needs a defined initial value", name);
  check_variable_creation_allowed(name);
  TraceHooks* trace = active_trace();
  if (trace != nullptr && initial.impl()->is_symbolic())
    fail(trace->function_name(),
         "the initial value of variable '{}' depends on the function's arguments; initial "
         "values are computed eagerly, once (use an initializer or a constant)",
         name);
  auto impl = std::make_shared<VariableImpl>();
  impl->name = std::move(name);
  impl->dtype = initial.dtype();
  impl->shape = initial.shape();
  impl->trainable = trainable;
  impl->value = initial.contiguous();
  // A checkpoint restored before this variable existed queued its value (deferred restore).
  if (std::optional<Tensor> restored = take_deferred_restore(impl->name)) {
    if (restored->dtype() != impl->dtype || restored->shape() != impl->shape)
      fail("Variable",
           "the checkpoint value restored for '{}' is {} {}, but the variable is created as {} "
           "{}",
           impl->name, dtype_name(restored->dtype()), restored->shape(), dtype_name(impl->dtype),
           impl->shape);
    impl->value = restored->contiguous();
  }
  {
    std::lock_guard lock(registry_mutex);
    impl->id = next_variable_id.fetch_add(1);
    registry().emplace(impl->id, Registration{impl.get(), impl});
  }
  if (trace != nullptr) trace->add_created_variable(impl);
  return Variable(std::move(impl));
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
  std::string full = name.empty() ? scoped_name(unique_name("Variable")) : scoped_name(name);
  *this = detail::create_variable(initial, std::move(full), trainable);
}

Tensor Variable::value() const {
  const auto& v = checked(impl_, "Variable.value");
  detail::TraceHooks* trace = detail::active_trace();
  if (trace == nullptr) detail::note_eager_use(*impl_);
  Tensor value = trace != nullptr ? trace->read_variable(impl_) : v.read();
  if (detail::any_tape_recording()) detail::tape_hooks.note_variable_read(*this, value);
  return value;
}

void Variable::assign(const Tensor& value) const {
  auto& v = const_cast<detail::VariableImpl&>(checked(impl_, "Variable.assign"));
  detail::check_assignable(v, value, "Variable.assign");
  if (detail::TraceHooks* trace = detail::active_trace()) {
    trace->assign_variable(impl_, value);
    return;
  }
  detail::check_concrete(*value.impl(), "Variable.assign");
  detail::note_eager_use(v);
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

namespace {

/// The row update behind scatter_add / scatter_sub / scatter_update.
void update_rows(const std::shared_ptr<detail::VariableImpl>& impl, const Tensor& rows,
                 const Tensor& values, detail::RowUpdate mode, bool padded, const char* op) {
  auto& v = const_cast<detail::VariableImpl&>(checked(impl, op));
  detail::check_defined(rows, op, 0);
  detail::check_defined(values, op, 1);
  if (v.shape.empty()) detail::fail(op, "variable '{}' is a scalar; it has no rows", v.name);
  if (v.dtype == DType::boolean)
    detail::fail(op, "variable '{}' is bool; row updates need a numeric variable", v.name);
  if (compute_dtype(v.dtype) != v.dtype && mode != detail::RowUpdate::assign)
    detail::fail(op,
                 "variable '{}' is {}, which ops compute in {}: adding rows in place needs one "
                 "of the compute dtypes f32, f64, i32, i64 or u64 (scatter_update stores rows "
                 "as they are)",
                 v.name, dtype_name(v.dtype), dtype_name(compute_dtype(v.dtype)));
  if (rows.dtype() != DType::i32 && rows.dtype() != DType::i64)
    detail::fail(op, "indices must be i32 or i64, got {}", dtype_name(rows.dtype()));
  if (values.dtype() != v.dtype)
    detail::fail(op, "variable '{}' is {}; the values are {} (use kiln::cast)", v.name,
                 dtype_name(v.dtype), dtype_name(values.dtype()));
  const Shape expected = detail::row_values_shape(rows.shape(), v.shape);
  if (values.shape() != expected)
    detail::fail(op,
                 "variable '{}' is {}; values for indices of shape {} must have shape {}, got {}",
                 v.name, v.shape, rows.shape(), expected, values.shape());
  const Tensor r = to_dense(rows);
  const Tensor x = to_dense(values);
  if (detail::TraceHooks* trace = detail::active_trace()) {
    trace->update_variable_rows(impl, r, x, static_cast<std::int64_t>(mode), padded);
    return;
  }
  detail::check_concrete(*r.impl(), op);
  detail::check_concrete(*x.impl(), op);
  detail::note_eager_use(v);
  v.update_rows(r, x, static_cast<std::int64_t>(mode), padded, op);
}

void update_rows(const std::shared_ptr<detail::VariableImpl>& impl, const Tensor& slices,
                 detail::RowUpdate mode, const char* op) {
  checked(impl, op);
  detail::check_defined(slices, op, 0);
  if (!slices.is_indexed_slices())
    detail::fail(op, "expects an indexed-slices value (or indices and values), got a dense tensor");
  if (slices.shape() != impl->shape || slices.dtype() != impl->dtype)
    detail::fail(op, "variable '{}' is {} {}; the indexed slices are {} {}", impl->name,
                 dtype_name(impl->dtype), impl->shape, dtype_name(slices.dtype()), slices.shape());
  const detail::RowSlices& parts = *slices.impl()->slices;
  update_rows(impl, parts.indices, parts.values, mode, parts.padded, op);
}

}  // namespace

void Variable::scatter_add(const Tensor& indices, const Tensor& values) const {
  update_rows(impl_, indices, values, detail::RowUpdate::add, false, "Variable.scatter_add");
}
void Variable::scatter_sub(const Tensor& indices, const Tensor& values) const {
  update_rows(impl_, indices, values, detail::RowUpdate::sub, false, "Variable.scatter_sub");
}
void Variable::scatter_update(const Tensor& indices, const Tensor& values) const {
  update_rows(impl_, indices, values, detail::RowUpdate::assign, false, "Variable.scatter_update");
}
void Variable::scatter_add(const Tensor& slices) const {
  update_rows(impl_, slices, detail::RowUpdate::add, "Variable.scatter_add");
}
void Variable::scatter_sub(const Tensor& slices) const {
  update_rows(impl_, slices, detail::RowUpdate::sub, "Variable.scatter_sub");
}
void Variable::scatter_update(const Tensor& slices) const {
  update_rows(impl_, slices, detail::RowUpdate::assign, "Variable.scatter_update");
}

const std::string& Variable::name() const { return checked(impl_, "Variable.name").name; }
bool Variable::trainable() const { return checked(impl_, "Variable.trainable").trainable.load(); }
void Variable::set_trainable(bool trainable) const {
  const_cast<detail::VariableImpl&>(checked(impl_, "Variable.set_trainable")).trainable = trainable;
}
DType Variable::dtype() const { return checked(impl_, "Variable.dtype").dtype; }
const Shape& Variable::shape() const { return checked(impl_, "Variable.shape").shape; }
std::uint64_t Variable::id() const { return checked(impl_, "Variable.id").id; }

std::vector<Variable> global_variables(std::string_view scope_prefix) {
  return detail::collect(scope_prefix, false);
}

std::vector<Variable> trainable_variables(std::string_view scope_prefix) {
  return detail::collect(scope_prefix, true);
}

}  // namespace kiln
