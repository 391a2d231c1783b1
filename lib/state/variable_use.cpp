// How variables are used by concurrent calls and traces: reads through a per-call snapshot,
// and provisional variables (created by a trace that has not finished) with their claims.
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/tensor_impl.hpp"
#include "kernels/kernel.hpp"
#include "kernels/rows.hpp"
#include "state/variable_impl.hpp"

namespace kiln::detail {

/// The claims on a provisional variable and what undoes its creation.
struct ProvisionalRecord {
  int claims = 0;     // unfinished traces that created or used the variable
  bool kept = false;  // a trace that used it succeeded, or eager code used it
  std::vector<std::function<void()>> undo;
};

namespace {

// One lock for every provisional record: they change only while traces start and end.
std::mutex provisional_mutex;

using SnapshotValues = std::unordered_map<std::uint64_t, Tensor>;
thread_local SnapshotValues* active_snapshot = nullptr;

/// Whether a variable's value (read under its lock) is contiguous and held by exactly `owners`
/// tensors, its buffer by that tensor alone, so a write in place is seen by those owners only.
bool held_only_by(const Tensor& value, long owners) {
  const auto& impl = value.impl();
  if (impl.use_count() != owners || impl->storage.use_count() != 1 || !impl->is_contiguous())
    return false;
  // use_count() is a relaxed read. Taking and dropping one more reference of each is an
  // acquiring read-modify-write of the counts, so whatever an owner that let go did with the
  // buffer (its last reads) happens before the caller's writes.
  {
    const auto own = impl;
    const auto buffer = impl->storage;
  }
  return true;
}

}  // namespace

Tensor VariableImpl::read() const {
  if (SnapshotValues* snapshot = active_snapshot) {
    auto it = snapshot->find(id);
    if (it != snapshot->end()) return it->second;
    Tensor current;
    {
      std::lock_guard lock(mutex);
      current = value;
    }
    snapshot->emplace(id, current);
    return current;
  }
  std::lock_guard lock(mutex);
  return value;
}

void VariableImpl::write(Tensor t) {
  if (SnapshotValues* snapshot = active_snapshot) (*snapshot)[id] = t;
  std::lock_guard lock(mutex);
  value = std::move(t);
}

void VariableImpl::update_rows(const Tensor& rows, const Tensor& values, std::int64_t mode,
                               bool padded, const char* op) {
  const Tensor r = rows.contiguous();
  const Tensor v = values.contiguous();
  const auto run = [&](const Tensor& table) {
    update_rows_in_place(array_ref(table), array_ref(r), array_ref(v), static_cast<RowUpdate>(mode),
                         padded, op);
  };
  if (active_snapshot == nullptr) {
    std::lock_guard lock(mutex);
    // Only this variable holds the buffer: nobody can see it change.
    if (held_only_by(value, 1)) {
      run(value);
      return;
    }
  }
  Tensor copy = empty(shape, dtype, op);
  copy_strided(array_ref(read()), array_ref(copy));
  run(copy);
  write(std::move(copy));
}

std::unique_lock<std::mutex> VariableImpl::lock_sole_value(const Tensor& reading) {
  if (active_snapshot != nullptr) return {};
  std::unique_lock lock(mutex);
  // Two owners of the tensor (the variable and `reading`), none else of its buffer.
  if (value.impl() != reading.impl() || !held_only_by(value, 2)) return {};
  return lock;
}

VariableSnapshot::VariableSnapshot() : outermost_(active_snapshot == nullptr) {
  if (outermost_) active_snapshot = new SnapshotValues;
}

VariableSnapshot::~VariableSnapshot() {
  if (!outermost_) return;
  delete active_snapshot;
  active_snapshot = nullptr;
}

void mark_provisional(VariableImpl& v) {
  auto record = std::make_shared<ProvisionalRecord>();
  record->claims = 1;
  std::lock_guard lock(provisional_mutex);
  v.pending = std::move(record);
  v.provisional.store(true, std::memory_order_release);
}

bool claim_provisional(VariableImpl& v) {
  if (!v.provisional.load(std::memory_order_acquire)) return false;
  std::lock_guard lock(provisional_mutex);
  if (!v.pending) return false;
  ++v.pending->claims;
  return true;
}

void release_provisional(VariableImpl& v, bool succeeded) noexcept {
  std::vector<std::function<void()>> undo;
  {
    std::lock_guard lock(provisional_mutex);
    if (!v.pending) return;
    ProvisionalRecord& record = *v.pending;
    record.kept = record.kept || succeeded;
    if (--record.claims > 0) return;
    if (!record.kept) undo = std::move(record.undo);
    v.pending.reset();
    v.provisional.store(false, std::memory_order_release);
  }
  // Newest first, outside the lock: undo actions take the locks of modules and stores.
  for (auto it = undo.rbegin(); it != undo.rend(); ++it) (*it)();
}

void keep_provisional(VariableImpl& v) {
  std::lock_guard lock(provisional_mutex);
  if (v.pending) v.pending->kept = true;
}

bool on_rollback(VariableImpl& v, std::function<void()> undo) {
  std::lock_guard lock(provisional_mutex);
  if (!v.pending) return false;
  v.pending->undo.push_back(std::move(undo));
  return true;
}

}  // namespace kiln::detail
