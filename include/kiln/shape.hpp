#pragma once
/// @file shape.hpp
/// Tensor shapes: a short, fixed-capacity list of int64 dimensions.

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

namespace kiln {

/// Dynamic dims. While kiln::function traces with an input_signature that marks a dim -1,
/// that dim is a *symbol*: a placeholder value that `x.shape()[0]` returns and that shapes
/// built from it (`kiln::zeros({x.shape()[0], 20})`) carry into the graph. Symbols compare equal
/// only to themselves; arithmetic on them is not supported (it gives a value that is not a
/// valid dim, which ops reject). Outside tracing every dim is a concrete size >= 0.
inline constexpr std::int64_t dynamic_dim_base = -(std::int64_t{1} << 48);
inline constexpr std::int64_t dynamic_dim_stride = std::int64_t{1} << 16;
/// The dim value that stands for symbol `id` (0, 1, ...).
constexpr std::int64_t dynamic_dim(std::int64_t id) {
  return dynamic_dim_base - id * dynamic_dim_stride;
}
/// True when d is (or was computed from) a symbol rather than a size.
constexpr bool is_dynamic_dim(std::int64_t d) { return d <= dynamic_dim_base; }
/// The symbol id of d, or -1 when d is not exactly a symbol's value.
constexpr std::int64_t dynamic_dim_id(std::int64_t d) {
  if (!is_dynamic_dim(d) || d < dynamic_dim_base - (std::int64_t{1} << 62)) return -1;
  const std::int64_t offset = dynamic_dim_base - d;
  return offset % dynamic_dim_stride == 0 ? offset / dynamic_dim_stride : -1;
}

/// Dimensions of a tensor, outermost first. Rank 0 is a scalar; zero-size dims are legal.
/// Storage is inline (no heap allocation); the rank is at most Shape::max_rank.
class Shape {
 public:
  static constexpr std::size_t max_rank = 8;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims);
  explicit Shape(std::span<const std::int64_t> dims);
  explicit Shape(const std::vector<std::int64_t>& dims)
      : Shape(std::span<const std::int64_t>(dims)) {}

  std::size_t size() const { return rank_; }
  bool empty() const { return rank_ == 0; }
  std::int64_t operator[](std::size_t i) const { return dims_[i]; }
  std::int64_t& operator[](std::size_t i) { return dims_[i]; }
  /// Dimension i; negative i counts from the end. Throws kiln::Error when out of range.
  std::int64_t at(std::int64_t i) const;
  const std::int64_t* begin() const { return dims_.data(); }
  const std::int64_t* end() const { return dims_.data() + rank_; }
  std::int64_t* begin() { return dims_.data(); }
  std::int64_t* end() { return dims_.data() + rank_; }
  const std::int64_t* data() const { return dims_.data(); }
  std::int64_t back() const { return dims_[rank_ - 1]; }

  void push_back(std::int64_t d);
  void insert(std::size_t pos, std::int64_t d);
  void erase(std::size_t pos);
  void resize(std::size_t rank, std::int64_t fill = 0);

  /// Product of the dims (1 for rank 0). Throws kiln::Error for a shape with a dynamic dim.
  std::int64_t numel() const;
  /// True when some dim is a dynamic dim (see dynamic_dim).
  bool has_dynamic_dims() const {
    for (std::size_t i = 0; i < rank_; ++i)
      if (is_dynamic_dim(dims_[i])) return true;
    return false;
  }
  std::vector<std::int64_t> to_vector() const { return {begin(), end()}; }
  /// "[2,3]"; a dynamic dim prints as "?0", "?1", ...
  std::string to_string() const;

  friend bool operator==(const Shape& a, const Shape& b) {
    if (a.rank_ != b.rank_) return false;
    for (std::size_t i = 0; i < a.rank_; ++i)
      if (a.dims_[i] != b.dims_[i]) return false;
    return true;
  }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }

 private:
  std::array<std::int64_t, max_rank> dims_{};
  std::uint8_t rank_ = 0;
};

}  // namespace kiln
