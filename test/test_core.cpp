// Core: shapes, tensor handles, views made by dispatch, strided copies, memory accounting.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <kiln/kiln.hpp>

#include "core/storage.hpp"
#include "core/tensor_impl.hpp"
#include "ops/dispatch.hpp"

using kiln::Shape;
using kiln::Tensor;
namespace detail = kiln::detail;

TEST_CASE("Shape basics", "[core]") {
  Shape s{2, 3, 4};
  CHECK(s.size() == 3);
  CHECK(s.numel() == 24);
  CHECK(s.to_string() == "[2,3,4]");
  CHECK(s.at(-1) == 4);
  CHECK_THROWS_WITH(s.at(3), "[shape] dimension index 3 out of range for rank 3");
  CHECK(Shape{}.numel() == 1);
  CHECK(Shape{}.to_string() == "[]");
  CHECK(Shape{0, 5}.numel() == 0);
  s.insert(0, 7);
  CHECK(s == Shape{7, 2, 3, 4});
  s.erase(1);
  CHECK(s == Shape{7, 3, 4});
  CHECK(s != Shape{7, 3});
  CHECK_THROWS_AS((Shape{1, 1, 1, 1, 1, 1, 1, 1, 1}), kiln::Error);
  Shape full{1, 2, 3, 4, 5, 6, 7, 8};
  CHECK_THROWS_WITH(full.push_back(9), "[shape] rank 9 exceeds the maximum rank 8");
}

TEST_CASE("Tensor handle: metadata, copies share, undefined tensors throw", "[core]") {
  Tensor t = kiln::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  CHECK(t.dtype() == kiln::f32);
  CHECK(t.shape() == Shape{2, 3});
  CHECK(t.ndim() == 2);
  CHECK(t.size() == 6);
  CHECK(t.dim(-1) == 3);
  CHECK(t.is_contiguous());
  Tensor copy = t;
  CHECK(copy.data() == t.data());

  Tensor undefined;
  CHECK_FALSE(undefined.defined());
  CHECK_THROWS_WITH(undefined.shape(), "[tensor] shape of an undefined tensor");
  CHECK_THROWS_AS(undefined.to_vector<float>(), kiln::Error);
  CHECK_THROWS_WITH(t.to_vector<double>(),
                    "[to_vector] tensor has dtype f32, but f64 was requested");
  CHECK_THROWS_WITH(t.item<float>(),
                    "[item] tensor of shape [2,3] has 6 elements, item() needs exactly one");
  CHECK(kiln::tensor({7}, {1, 1}).item<int>() == 7);
  CHECK_THROWS_WITH(kiln::tensor({1.f, 2.f}, {3}),
                    "[tensor] 2 values do not fill shape [3] (3 elements)");
}

TEST_CASE("Buffers are 64-byte aligned and counted, zero-size and inline ones included",
          "[core]") {
  // Up to 16 floats live inside their Storage's allocation; 17 and more get a block of their own.
  for (std::int64_t n : {0, 1, 3, 16, 17, 1000}) {
    const std::int64_t before = kiln::memory_stats().live_bytes;
    {
      Tensor t = kiln::ones({n});
      CHECK(reinterpret_cast<std::uintptr_t>(t.data()) % 64 == 0);
      CHECK(kiln::memory_stats().live_bytes == before + 4 * n);
      CHECK(t.to_vector<float>() == std::vector<float>(static_cast<std::size_t>(n), 1.f));
    }
    CHECK(kiln::memory_stats().live_bytes == before);
  }
}

TEST_CASE("dispatch makes views: reshape of contiguous, transpose, slice, broadcast", "[core]") {
  Tensor t = kiln::tensor({0, 1, 2, 3, 4, 5}, {2, 3});
  detail::Attrs none;

  Tensor r = detail::apply(detail::Prim::reshape, {t}, none, kiln::i32, Shape{3, 2});
  CHECK(r.impl()->storage == t.impl()->storage);
  CHECK(r.to_vector<int>() == std::vector<int>{0, 1, 2, 3, 4, 5});

  detail::Attrs perm;
  perm.axes = Shape{1, 0};
  Tensor tt = detail::apply(detail::Prim::transpose, {t}, perm, kiln::i32, Shape{3, 2});
  CHECK(tt.impl()->storage == t.impl()->storage);
  CHECK_FALSE(tt.is_contiguous());
  CHECK(tt.to_vector<int>() == std::vector<int>{0, 3, 1, 4, 2, 5});
  Tensor c = tt.contiguous();
  CHECK(c.is_contiguous());
  CHECK(c.impl()->storage != t.impl()->storage);
  CHECK(c.to_vector<int>() == std::vector<int>{0, 3, 1, 4, 2, 5});

  // Reshape of the transposed view into 6 elements must copy (layout does not allow a view)...
  Tensor flat = detail::apply(detail::Prim::reshape, {tt}, none, kiln::i32, Shape{6});
  CHECK(flat.to_vector<int>() == std::vector<int>{0, 3, 1, 4, 2, 5});
  // ...but splitting a dim of the transposed view is still a view.
  Tensor split = detail::apply(detail::Prim::reshape, {tt}, none, kiln::i32, Shape{3, 1, 2});
  CHECK(split.impl()->storage == t.impl()->storage);
  CHECK(split.to_vector<int>() == std::vector<int>{0, 3, 1, 4, 2, 5});

  detail::Attrs sl;  // rows 1..1, columns 2,0 (step -2)
  sl.ints = {1, 1, 2, -2};
  Tensor s = detail::apply(detail::Prim::slice, {t}, sl, kiln::i32, Shape{1, 2});
  CHECK(s.impl()->storage == t.impl()->storage);
  CHECK(s.to_vector<int>() == std::vector<int>{5, 3});

  Tensor row = kiln::tensor({7, 8, 9}, {1, 3});
  Tensor b = detail::apply(detail::Prim::broadcast_to, {row}, none, kiln::i32, Shape{2, 2, 3});
  CHECK(b.impl()->storage == row.impl()->storage);
  CHECK(b.to_vector<int>() == std::vector<int>{7, 8, 9, 7, 8, 9, 7, 8, 9, 7, 8, 9});
}

TEST_CASE("strided copy handles every element size and rank", "[core]") {
  for (auto dtype : {kiln::boolean, kiln::i32, kiln::f64}) {
    Tensor src = kiln::cast(kiln::arange(24, kiln::i64), dtype);
    Tensor v = detail::make_view(src, Shape{2, 3, 2}, Shape{1, 8, 2}, 0);  // a permuted view
    Tensor c = v.contiguous();
    Tensor expected =
        kiln::cast(kiln::tensor(std::vector<std::int64_t>{0, 2, 8, 10, 16, 18, 1, 3, 9, 11, 17, 19},
                                Shape{2, 3, 2}),
                   dtype);
    CHECK(kiln::all(kiln::equal(c, expected)).item<bool>());
  }
}

TEST_CASE("broadcast_shapes and normalize_axis", "[core]") {
  CHECK(detail::broadcast_shapes(Shape{3, 1}, Shape{1, 4}, "add") == Shape{3, 4});
  CHECK(detail::broadcast_shapes(Shape{}, Shape{2, 3}, "add") == Shape{2, 3});
  CHECK(detail::broadcast_shapes(Shape{5, 1, 4}, Shape{3, 1}, "add") == Shape{5, 3, 4});
  CHECK(detail::broadcast_shapes(Shape{0, 1}, Shape{1, 3}, "add") == Shape{0, 3});
  CHECK_THROWS_WITH(detail::broadcast_shapes(Shape{2, 3}, Shape{4}, "add"),
                    "[add] shapes [2,3] and [4] cannot be broadcast");
  CHECK(detail::normalize_axis(-1, 3, "sum") == 2);
  CHECK_THROWS_WITH(detail::normalize_axis(3, 2, "concat"),
                    "[concat] axis 3 out of range for rank 2");
}

TEST_CASE("memory_stats counts live tensors and bytes and returns to baseline", "[core]") {
  const auto before = kiln::memory_stats();
  {
    Tensor a = kiln::zeros({1000});  // 4000 bytes
    Tensor view = detail::make_view(a, Shape{10, 100}, Shape{100, 1}, 0);
    const auto during = kiln::memory_stats();
    CHECK(during.live_tensors == before.live_tensors + 2);
    CHECK(during.live_buffers == before.live_buffers + 1);
    CHECK(during.live_bytes == before.live_bytes + 4000);
    CHECK(during.peak_bytes >= during.live_bytes);
  }
  const auto after = kiln::memory_stats();
  CHECK(after.live_tensors == before.live_tensors);
  CHECK(after.live_buffers == before.live_buffers);
  CHECK(after.live_bytes == before.live_bytes);
}

TEST_CASE("a large buffer just freed is kept for reuse, the oldest kept ones make room",
          "[core]") {
  // The cache is bounded (1 GiB unless KILN_CACHED_BYTES_LIMIT says otherwise). A buffer freed
  // when the cache is full must push out older ones, not be unmapped itself: a plan's arena is
  // freed and asked for again by every call, and unmapping it costs a page fault per 4 KiB.
  if (std::getenv("KILN_CACHED_BYTES_LIMIT") != nullptr) return;
  kiln::release_cached_memory();
  const std::int64_t mib = std::int64_t{1} << 20;
  {  // three 300 MiB buffers (never touched, so never resident), freed: 900 MiB cached
    std::vector<Tensor> old;
    for (int i = 0; i < 3; ++i) old.push_back(detail::empty(Shape{300 * mib}, kiln::boolean));
  }
  CHECK(kiln::memory_stats().cached_bytes >= 900 * mib);
  { Tensor arena = detail::empty(Shape{400 * mib}, kiln::boolean); }
  const auto kept = kiln::memory_stats().cached_bytes;
  CHECK(kept <= std::int64_t{1} << 30);
  {
    Tensor again = detail::empty(Shape{400 * mib}, kiln::boolean);  // from the cache
    CHECK(kiln::memory_stats().cached_bytes <= kept - 400 * mib);
  }
  kiln::release_cached_memory();
  CHECK(kiln::memory_stats().cached_bytes == 0);
}

TEST_CASE("of the large buffers kept with one size, the one freed last is handed out first",
          "[core]") {
  // Its lines are the likeliest to be in the caches still: a cached function writing a 16 MiB
  // output each call, with eager work's buffers of that size kept, gets the same output buffer
  // every call (it had cycled through four).
  if (std::getenv("KILN_CACHED_BYTES_LIMIT") != nullptr) return;
  kiln::release_cached_memory();
  const Shape shape{std::int64_t{1} << 20};
  std::vector<const void*> addresses;
  std::vector<Tensor> kept;
  for (int i = 0; i < 4; ++i) {
    kept.push_back(detail::empty(shape, kiln::f32));
    addresses.push_back(kept.back().data());
  }
  for (Tensor& t : kept) t = Tensor();  // freed in order: the fourth last
  for (int call = 0; call < 3; ++call) {
    const Tensor out = detail::empty(shape, kiln::f32);
    CHECK(out.data() == addresses.back());
  }
  kiln::release_cached_memory();
}

TEST_CASE("huge-page blocks are 2 MiB aligned, kept for a request of the same size, and released",
          "[core]") {
  // A recurrence's weight panels: one block per part, asked for again by every call. Keeping
  // the block spares each call its page faults and keeps the pages the first call faulted in.
  if (std::getenv("KILN_CACHED_BYTES_LIMIT") != nullptr) return;
  kiln::release_cached_memory();
  const std::size_t mib = std::size_t{1} << 20;
  const std::size_t bytes = 4 * mib + 3 * 4096;  // two huge pages and a bit: three of them
  void* first = detail::allocate_huge_block(bytes);
  REQUIRE(first != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(first) % (2 * mib) == 0);
  std::memset(first, 1, bytes);  // the whole request is writable
  detail::free_huge_block(first, bytes);
  CHECK(kiln::memory_stats().cached_bytes == static_cast<std::int64_t>(6 * mib));
  void* other_size = detail::allocate_huge_block(9 * mib);  // not the kept block: sizes differ
  CHECK(other_size != first);
  void* again = detail::allocate_huge_block(bytes);
  CHECK(again == first);
  CHECK(kiln::memory_stats().cached_bytes == 0);
  detail::free_huge_block(again, bytes);
  detail::free_huge_block(other_size, 9 * mib);
  CHECK(kiln::memory_stats().cached_bytes == static_cast<std::int64_t>(16 * mib));
  kiln::release_cached_memory();
  CHECK(kiln::memory_stats().cached_bytes == 0);
}

TEST_CASE("Empty shapes whose other dims overflow are rejected, not given overflowing strides",
          "[core]") {
  // Found by fuzzing the .npy reader: numel is 0, but the strides would overflow int64.
  const std::int64_t big = std::int64_t{1} << 40;
  CHECK_THROWS_WITH(detail::empty(Shape{0, big, big}, kiln::f32),
                    "[empty] shape [0,1099511627776,1099511627776] has too many elements");
  CHECK_THROWS_AS(kiln::zeros({big, 0, big}), kiln::Error);
  CHECK(detail::empty(Shape{0, big}, kiln::f32).size() == 0);
}

TEST_CASE("at() reads one element in place, by index per dim", "[core]") {
  const Tensor x = kiln::reshape(kiln::arange(0.0, 12.0, 1.0, kiln::f32), Shape{3, 4});
  CHECK(x.at<float>({0, 0}) == 0.0f);
  CHECK(x.at<float>({2, 3}) == 11.0f);
  CHECK(x.at<float>({-1, 0}) == 8.0f);
  const Tensor t = kiln::transpose(x);  // a view: strides, not a copy
  REQUIRE_FALSE(t.is_contiguous());
  CHECK(t.at<float>({3, 1}) == 7.0f);
  const Tensor s = kiln::slice(x, 1, 1, 3);
  CHECK(s.at<float>({1, 1}) == 6.0f);
  CHECK(kiln::scalar(5, kiln::i64).at<std::int64_t>({}) == 5);
  CHECK(kiln::tensor({false, true}, {2}).at<bool>({1}));
  CHECK_THROWS_WITH(x.at<float>({1}), "[at] tensor of shape [3,4] needs 2 indices, got 1");
  CHECK_THROWS_WITH(x.at<float>({3, 0}),
                    "[at] index 3 is out of range for dim 0 of size 3 (shape [3,4])");
  CHECK_THROWS_WITH(x.at<float>({0, -5}),
                    "[at] index -5 is out of range for dim 1 of size 4 (shape [3,4])");
  CHECK_THROWS_WITH(x.at<double>({0, 0}), "[at] tensor has dtype f32, but f64 was requested");
  auto traced = kiln::function([](const Tensor& v) {
    (void)v.at<float>({0, 0});
    return v;
  });
  CHECK_THROWS_WITH(traced(x), Catch::StartsWith("[at]"));
}
