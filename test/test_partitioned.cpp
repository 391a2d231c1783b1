// Partitioned variables and embedding lookups (kiln/partitioned.hpp): shards and their names,
// partitioners, mod and div lookups against the whole table, gradients per shard as indexed
// slices, training against an unpartitioned table, embedding_lookup_sparse's combiners, and
// checkpoints restored into another number of shards.
#include <catch2/catch.hpp>

#include <cmath>

#include <kiln/kiln.hpp>

#include "io_test_support.hpp"

using kiln::Shape;
using kiln::Tensor;
using kiln::Variable;

namespace {

std::vector<double> doubles(const Tensor& t) {
  return kiln::cast(t, kiln::f64).to_vector<double>();
}

// Row r of the table is [r, r + 0.5, -r].
Tensor table(std::int64_t rows) {
  std::vector<float> v;
  for (std::int64_t r = 0; r < rows; ++r)
    for (float c : {0.0f, 0.5f, -2.0f * static_cast<float>(r)})
      v.push_back(static_cast<float>(r) + c);
  return kiln::tensor(v, {rows, 3});
}

/// The logical row of the joined shards that id maps to under `strategy`.
std::int64_t logical_row(std::int64_t id, const std::vector<std::int64_t>& sizes,
                         kiln::PartitionStrategy strategy) {
  const auto n = static_cast<std::int64_t>(sizes.size());
  std::int64_t shard, row;
  if (strategy == kiln::PartitionStrategy::mod) {
    shard = id % n;
    row = id / n;
  } else {
    shard = 0;
    row = id;
    while (row >= sizes[static_cast<std::size_t>(shard)])
      row -= sizes[static_cast<std::size_t>(shard++)];
  }
  std::int64_t offset = 0;
  for (std::int64_t s = 0; s < shard; ++s) offset += sizes[static_cast<std::size_t>(s)];
  return offset + row;
}

}  // namespace

TEST_CASE("partitioned variables: shards, names, reuse and partitioners", "[partitioned]") {
  kiln::clear_session();
  const Tensor value = table(10);
  const auto emb = kiln::get_variable("emb", {10, 3}, kiln::init::from_value(value),
                                      {.partitioner = kiln::fixed_size_partitioner(4)});
  REQUIRE(emb.num_shards() == 4);
  CHECK(emb.name() == "emb");
  CHECK(emb.shards()[0].name() == "emb/part_0");
  CHECK(emb.shards()[3].name() == "emb/part_3");
  CHECK(emb.shards()[0].shape() == Shape{3, 3});
  CHECK(emb.shards()[3].shape() == Shape{2, 3});
  CHECK(emb.shard_offsets() == std::vector<std::int64_t>{0, 3, 6, 8});
  CHECK(doubles(emb.value()) == doubles(value));
  CHECK(kiln::find_variable("emb/part_2").defined());
  {
    kiln::NameScope scope("tower");
    const auto scoped = kiln::get_variable("w", {6, 2}, kiln::init::zeros(),
                                           {.partitioner = kiln::fixed_size_partitioner(2)});
    CHECK(scoped.shards()[1].name() == "tower/w/part_1");
  }
  // Reuse finds the same shards; other settings are errors that change nothing.
  const auto again = kiln::get_variable(
      "emb", {10, 3}, kiln::init::zeros(),
      {.partitioner = kiln::fixed_size_partitioner(4), .reuse = kiln::Reuse::Auto});
  CHECK(again.shards()[1] == emb.shards()[1]);
  CHECK_THROWS_WITH(kiln::get_variable("emb", {10, 3}, kiln::init::zeros(),
                                       {.partitioner = kiln::fixed_size_partitioner(4)}),
                    Catch::Contains("already exists"));
  CHECK_THROWS_WITH(kiln::get_variable("emb", {10, 3}, kiln::init::zeros(),
                                       {.partitioner = kiln::fixed_size_partitioner(2),
                                        .reuse = kiln::Reuse::Yes}),
                    Catch::Contains("exists as 4 shards"));
  CHECK_THROWS_WITH(kiln::get_variable("big", {3, 3}, kiln::init::zeros(),
                                       {.partitioner = kiln::fixed_size_partitioner(4)}),
                    Catch::Contains("asked for 4 shards of 3 rows"));
  CHECK_THROWS_WITH(
      kiln::get_variable("none", {3, 3}, kiln::init::zeros(), kiln::PartitionedVariableOptions{}),
      Catch::Contains("needs a partitioner"));
  CHECK_THROWS_WITH(kiln::fixed_size_partitioner(0), Catch::Contains("at least 1"));
  CHECK_FALSE(kiln::find_variable("big/part_0").defined());
  // min_max: 1000 x 64 f32 is 256,000 bytes: slices of >= 64 KiB give 4 shards, capped by max.
  const auto by_size = kiln::min_max_variable_partitioner(8, 64 << 10);
  CHECK(by_size({1000, 64}, kiln::f32) == 4);
  CHECK(kiln::min_max_variable_partitioner(3, 64 << 10)({1000, 64}, kiln::f32) == 3);
  CHECK(by_size({2, 64000}, kiln::f32) == 2);  // never more shards than rows
  CHECK(kiln::shard_sizes(10, 4) == std::vector<std::int64_t>{3, 3, 2, 2});
  // assign splits a whole value into the shards.
  emb.assign(value * 2.0f);
  CHECK(doubles(emb.shards()[2].value()) == doubles(kiln::slice(value * 2.0f, 0, 6, 8)));
}

TEST_CASE("embedding_lookup over shards: mod and div, eager and traced, max_norm",
          "[partitioned]") {
  const Tensor whole = table(11);
  const Tensor ids = kiln::tensor(std::vector<std::int64_t>{0, 10, 4, 7, 4, 1}, {2, 3});
  const std::vector<std::int64_t> id_list{0, 10, 4, 7, 4, 1};
  for (const std::int64_t n : {1, 2, 3, 4}) {
    for (const auto strategy : {kiln::PartitionStrategy::mod, kiln::PartitionStrategy::div}) {
      INFO(n << " shards, strategy " << static_cast<int>(strategy));
      const std::vector<std::int64_t> sizes = kiln::shard_sizes(11, n);
      std::vector<Tensor> shards;
      std::int64_t row = 0;
      for (auto s : sizes) {
        shards.push_back(kiln::slice(whole, 0, row, row + s));
        row += s;
      }
      std::vector<double> want;
      const auto w = doubles(whole);
      for (auto id : id_list) {
        const std::int64_t r = logical_row(id, sizes, strategy);
        for (int c = 0; c < 3; ++c) want.push_back(w[static_cast<std::size_t>(r * 3 + c)]);
      }
      const Tensor eager = kiln::embedding_lookup(shards, ids, {.partition_strategy = strategy});
      CHECK(eager.shape() == Shape{2, 3, 3});
      CHECK(doubles(eager) == want);
      auto traced = kiln::function([&](const Tensor& i) {
        return kiln::embedding_lookup(shards, i, {.partition_strategy = strategy});
      });
      CHECK(doubles(traced(ids)) == want);
      CHECK_THROWS_WITH(traced(kiln::tensor(std::vector<std::int64_t>{3, 11})),
                        Catch::Contains("[embedding_lookup] id 11 is out of range for a table "
                                        "of 11 rows"));
      CHECK_THROWS_WITH(kiln::embedding_lookup(shards, kiln::tensor(std::vector<std::int32_t>{-1})),
                        Catch::Contains("id -1 is out of range"));
    }
  }
  // max_norm scales rows longer than it down to it, and leaves the others.
  const Tensor clipped = kiln::embedding_lookup(
      whole, kiln::tensor(std::vector<std::int64_t>{0, 5}), {.max_norm = 2.0});
  const auto c = doubles(clipped);
  CHECK(c[0] == 0.0);
  CHECK(c[1] == Approx(0.5));  // row 0 = [0, 0.5, 0]: norm 0.5
  CHECK(std::sqrt(c[3] * c[3] + c[4] * c[4] + c[5] * c[5]) == Approx(2.0));
}

TEST_CASE("a partitioned embedding trains like the whole table, shard by shard",
          "[partitioned][sparse]") {
  kiln::clear_session();
  const Tensor initial = table(13) * 0.01f;
  const auto emb = kiln::get_variable("emb", {13, 3}, kiln::init::from_value(initial),
                                      {.partitioner = kiln::fixed_size_partitioner(3)});
  Variable whole(initial + 0.0f, "whole");
  kiln::optim::Adam a({.learning_rate = 0.05}), b({.learning_rate = 0.05});
  const auto loss_of = [](const Tensor& rows) { return kiln::sum(kiln::square(rows - 0.3f)); };
  auto step = kiln::function([&](const Tensor& ids) {
    {
      kiln::GradientTape tape;
      const Tensor loss = loss_of(
          kiln::embedding_lookup(emb, ids, {.partition_strategy = kiln::PartitionStrategy::div}));
      const auto grads = tape.gradient(loss, emb.shards());
      for (const Tensor& g : grads)
        if (!g.is_indexed_slices()) throw std::runtime_error("a shard's gradient is dense");
      a.apply(grads, emb.shards());
    }
    kiln::GradientTape tape;
    const Tensor loss = loss_of(kiln::gather(whole.value(), ids, 0));
    b.apply(tape.gradient(loss, std::vector<Variable>{whole}), {whole});
  });
  for (const auto& batch :
       std::vector<std::vector<std::int64_t>>{{0, 12, 5, 5}, {4, 4, 9, 1}, {12, 11, 3, 0}})
    step(kiln::tensor(batch));
  CHECK(step.tracing_count() == 1);
  const auto got = doubles(emb.value()), want = doubles(whole.value());
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-6));
}

TEST_CASE("embedding_lookup_sparse combines each segment's rows", "[partitioned]") {
  const Tensor whole = table(6);
  const std::vector<Tensor> shards{kiln::slice(whole, 0, 0, 3), kiln::slice(whole, 0, 3, 6)};
  const Tensor ids = kiln::tensor(std::vector<std::int64_t>{1, 4, 2, 5});
  const Tensor segments = kiln::tensor(std::vector<std::int64_t>{0, 0, 2, 2});
  const Tensor weights = kiln::tensor(std::vector<float>{1.0f, 3.0f, 2.0f, 0.5f});
  const auto w = doubles(whole);
  const auto row = [&](std::int64_t r, int c) { return w[static_cast<std::size_t>(r * 3 + c)]; };
  for (const auto combiner : {kiln::Combiner::sum, kiln::Combiner::mean, kiln::Combiner::sqrtn}) {
    INFO("combiner " << static_cast<int>(combiner));
    const Tensor out = kiln::embedding_lookup_sparse(
        shards, ids, segments, 4, weights,
        {.combiner = combiner, .partition_strategy = kiln::PartitionStrategy::div});
    REQUIRE(out.shape() == Shape{4, 3});
    const auto got = doubles(out);
    const double n0 = combiner == kiln::Combiner::sum    ? 1.0
                      : combiner == kiln::Combiner::mean ? 4.0
                                                         : std::sqrt(10.0);
    const double n2 = combiner == kiln::Combiner::sum    ? 1.0
                      : combiner == kiln::Combiner::mean ? 2.5
                                                         : std::sqrt(4.25);
    for (int c = 0; c < 3; ++c) {
      CHECK(got[static_cast<std::size_t>(c)] == Approx((row(1, c) + 3 * row(4, c)) / n0));
      CHECK(got[static_cast<std::size_t>(3 + c)] == 0.0);  // no ids
      CHECK(got[static_cast<std::size_t>(6 + c)] == Approx((2 * row(2, c) + 0.5 * row(5, c)) / n2));
      CHECK(got[static_cast<std::size_t>(9 + c)] == 0.0);
    }
  }
  // Its gradient reaches the shards as indexed slices; an empty segment gives no NaN.
  Variable a(shards[0] + 0.0f, "a"), b(shards[1] + 0.0f, "b");
  kiln::GradientTape tape;
  const Tensor out =
      kiln::embedding_lookup_sparse(std::vector<Tensor>{a.value(), b.value()}, ids, segments, 4,
                                    weights, {.partition_strategy = kiln::PartitionStrategy::div});
  const auto grads = tape.gradient(kiln::sum(out), std::vector<Variable>{a, b});
  CHECK(grads[0].is_indexed_slices());
  // d sum / d row 1 = 1/4 (weight 1 over 4), row 2: 2/2.5.
  const auto ga = doubles(grads[0]);
  CHECK(ga[3] == Approx(0.25));
  CHECK(ga[6] == Approx(0.8));
  for (double v : doubles(grads[1])) CHECK(std::isfinite(v));
  CHECK_THROWS_WITH(
      kiln::embedding_lookup_sparse(shards, ids, segments, 4, kiln::ones({4}, kiln::f64)),
      Catch::Contains("weights must be f32"));
}

TEST_CASE("a checkpoint restores partitioned variables into another shard count",
          "[partitioned][checkpoint]") {
  io_test::TempDir dir;
  const Tensor value = table(9);
  {
    kiln::clear_session();
    kiln::get_variable("emb", {9, 3}, kiln::init::from_value(value),
                       {.partitioner = kiln::fixed_size_partitioner(4)});
    kiln::Checkpoint ckpt({});
    ckpt.track_store();
    ckpt.save((dir / "ckpt").string());
  }
  const auto names = kiln::list_variables((dir / "ckpt").string());
  CHECK(names.size() == 4);
  for (const std::int64_t shards : {2, 4, 1, 3}) {
    kiln::clear_session();
    const auto emb = kiln::get_variable("emb", {9, 3}, kiln::init::zeros(),
                                        {.partitioner = kiln::fixed_size_partitioner(shards)});
    kiln::Checkpoint ckpt({});
    ckpt.track_store();
    ckpt.restore((dir / "ckpt").string());
    CHECK(doubles(emb.value()) == doubles(value));
  }
  // A variable of another row count does not take the file's shards; nothing is restored.
  kiln::clear_session();
  const auto other = kiln::get_variable("emb", {8, 3}, kiln::init::zeros(),
                                        {.partitioner = kiln::fixed_size_partitioner(2)});
  kiln::Checkpoint ckpt({});
  ckpt.track_store();
  CHECK_THROWS_WITH(ckpt.restore((dir / "ckpt").string()),
                    Catch::Contains("hold 9 rows; the variable has 8"));
  CHECK(doubles(other.value()) == std::vector<double>(24, 0.0));
}
