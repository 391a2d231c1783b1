#include "kiln/shape.hpp"

#include <fmt/format.h>

#include "kiln/error.hpp"

namespace kiln {

namespace {
[[noreturn]] void rank_error(std::size_t rank) {
  throw Error(fmt::format("[shape] rank {} exceeds the maximum rank {}", rank, Shape::max_rank));
}
}  // namespace

Shape::Shape(std::initializer_list<std::int64_t> dims)
    : Shape(std::span<const std::int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const std::int64_t> dims) {
  if (dims.size() > max_rank) rank_error(dims.size());
  rank_ = static_cast<std::uint8_t>(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) dims_[i] = dims[i];
}

std::int64_t Shape::at(std::int64_t i) const {
  const auto r = static_cast<std::int64_t>(rank_);
  if (i < -r || i >= r)
    throw Error(fmt::format("[shape] dimension index {} out of range for rank {}", i, r));
  return dims_[static_cast<std::size_t>(i < 0 ? i + r : i)];
}

void Shape::push_back(std::int64_t d) {
  if (rank_ == max_rank) rank_error(rank_ + 1u);
  dims_[rank_++] = d;
}

void Shape::insert(std::size_t pos, std::int64_t d) {
  if (rank_ == max_rank) rank_error(rank_ + 1u);
  for (std::size_t i = rank_; i > pos; --i) dims_[i] = dims_[i - 1];
  dims_[pos] = d;
  ++rank_;
}

void Shape::erase(std::size_t pos) {
  for (std::size_t i = pos; i + 1 < rank_; ++i) dims_[i] = dims_[i + 1];
  dims_[--rank_] = 0;
}

void Shape::resize(std::size_t rank, std::int64_t fill) {
  if (rank > max_rank) rank_error(rank);
  for (std::size_t i = rank_; i < rank; ++i) dims_[i] = fill;
  for (std::size_t i = rank; i < rank_; ++i) dims_[i] = 0;
  rank_ = static_cast<std::uint8_t>(rank);
}

std::int64_t Shape::numel() const {
  if (has_dynamic_dims())
    throw Error(fmt::format(
        "[shape] {} has a dynamic dim: its element count is known only when the function runs",
        to_string()));
  std::int64_t n = 1;
  bool overflow = false;
  for (std::size_t i = 0; i < rank_; ++i) {
    if (dims_[i] == 0) return 0;
    overflow = overflow || __builtin_mul_overflow(n, dims_[i], &n);
  }
  if (overflow)
    throw Error(fmt::format("[shape] {} has more elements than int64 can count", to_string()));
  return n;
}

std::string Shape::to_string() const {
  std::string out = "[";
  for (std::size_t i = 0; i < rank_; ++i) {
    if (i > 0) out += ',';
    const std::int64_t id = dynamic_dim_id(dims_[i]);
    if (id >= 0)
      fmt::format_to(std::back_inserter(out), "?{}", id);
    else
      fmt::format_to(std::back_inserter(out), "{}", dims_[i]);
  }
  out += ']';
  return out;
}

}  // namespace kiln
