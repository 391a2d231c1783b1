// KernelMemo (kernels/kernel.hpp): state a kernel keeps between the calls of a compiled plan.

#include "core/storage.hpp"
#include "kernels/kernel.hpp"

namespace kiln::detail {

KernelMemo::~KernelMemo() { clear(); }

bool KernelMemo::all_fixed(const KernelCall& call, std::span<const int> inputs) {
  for (const int i : inputs) {
    const auto at = static_cast<std::size_t>(i);
    if (at >= call.fixed.size() || call.fixed[at] == nullptr) return false;
  }
  return true;
}

KernelMemo::State* KernelMemo::find(const KernelCall& call, std::span<const int> inputs) const {
  if (state_ == nullptr || !all_fixed(call, inputs) || inputs.size() != buffers_.size())
    return nullptr;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const auto at = static_cast<std::size_t>(inputs[k]);
    if (call.fixed[at] != buffers_[k] || call.inputs[at].data != addresses_[k]) return nullptr;
  }
  return state_.get();
}

void KernelMemo::keep(const KernelCall& call, std::span<const int> inputs,
                      std::unique_ptr<State> state) {
  clear();
  for (const int i : inputs) {
    const auto at = static_cast<std::size_t>(i);
    buffers_.push_back(call.fixed[at]);
    addresses_.push_back(call.inputs[at].data);
  }
  state_ = std::move(state);
}

void KernelMemo::count(std::int64_t bytes) {
  bytes_ += bytes;
  count_cached_function(0, 0, bytes);
}

void KernelMemo::clear() {
  count_cached_function(0, 0, -bytes_);
  bytes_ = 0;
  state_.reset();
  buffers_.clear();
  addresses_.clear();
}

bool keeps_memo(Prim p) { return p == Prim::lstm_sequence || p == Prim::gru_sequence; }

std::shared_ptr<KernelMemo> KernelMemos::of(std::int32_t node) {
  const std::lock_guard lock(mutex_);
  const auto at = static_cast<std::size_t>(node);
  if (memos_.size() <= at) memos_.resize(at + 1);
  if (memos_[at] == nullptr) memos_[at] = std::make_shared<KernelMemo>();
  return memos_[at];
}

}  // namespace kiln::detail
