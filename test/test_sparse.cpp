// Row-sparse gradients (kiln/sparse.hpp): gather's gradient as indexed slices, eager and
// traced; Variable::scatter_* in place (and copy-on-write when the value is shared); the
// sparse optimizer updates against dense ones and hand-computed lazy rules; clipping; memory
// that scales with the rows touched; errors that change nothing.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <map>
#include <thread>

#include <kiln/kiln.hpp>

#include "io_test_support.hpp"

using kiln::Shape;
using kiln::Tensor;
using kiln::Variable;
namespace optim = kiln::optim;

namespace {

std::vector<double> doubles(const Tensor& t) {
  return kiln::cast(t, kiln::f64).to_vector<double>();
}

void check_close(const std::vector<double>& got, const std::vector<double>& want,
                 double tol = 1e-6) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[i]).margin(tol));
  }
}

// A table of 10 rows of 3, value r * 10 + c at [r, c].
Tensor table_values() {
  std::vector<float> v;
  for (int r = 0; r < 10; ++r)
    for (int c = 0; c < 3; ++c) v.push_back(static_cast<float>(r * 10 + c));
  return kiln::tensor(v, {10, 3});
}

// The dense gradient of sum(gather(table, ids) * weights) by hand: row ids[i] gets weights[i].
std::vector<double> dense_gather_gradient(const std::vector<std::int64_t>& ids,
                                          const std::vector<float>& weights, int rows, int cols) {
  std::vector<double> g(static_cast<std::size_t>(rows * cols), 0.0);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int64_t r = ids[i] < 0 ? ids[i] + rows : ids[i];
    for (int c = 0; c < cols; ++c)
      g[static_cast<std::size_t>(r * cols + c)] += weights[i * static_cast<std::size_t>(cols) + c];
  }
  return g;
}

}  // namespace

TEST_CASE("gather's gradient along axis 0 is indexed slices, duplicates summed", "[sparse]") {
  kiln::clear_session();
  Variable table(table_values(), "table");
  const std::vector<std::int64_t> ids{7, 2, 7, -1, 2};  // -1 is row 9, as gather reads it
  std::vector<float> weights;
  for (int i = 0; i < 15; ++i) weights.push_back(0.5f + static_cast<float>(i));
  const Tensor w = kiln::tensor(weights, {5, 3});
  kiln::GradientTape tape;
  const Tensor loss = kiln::sum(kiln::gather(table.value(), kiln::tensor(ids), 0) * w);
  const Tensor g = tape.gradient(loss, std::vector<Variable>{table})[0];
  REQUIRE(g.is_indexed_slices());
  CHECK(g.shape() == Shape{10, 3});
  CHECK(g.dtype() == kiln::f32);
  const kiln::IndexedSlices parts = kiln::slices_of(g);
  // Distinct rows in increasing order, then unused -1 entries: as many as ids.
  CHECK(parts.indices.to_vector<std::int64_t>() == std::vector<std::int64_t>{2, 7, 9, -1, -1});
  CHECK(parts.values.shape() == Shape{5, 3});
  const std::vector<double> want = dense_gather_gradient(ids, weights, 10, 3);
  check_close(doubles(kiln::to_dense(g)), want);
  // Reading its elements, printing it and using it in an op make it dense.
  check_close(doubles(g), want);
  CHECK(g.at<float>({7, 1}) == Approx(want[22]));
  check_close(doubles(g * 2.0f), [&] {
    auto twice = want;
    for (double& x : twice) x *= 2;
    return twice;
  }());
  CHECK(fmt::format("{}", g).starts_with("IndexedSlices(indices="));
  // deduplicate keeps a gradient kiln made as it is.
  CHECK(kiln::deduplicate(g).impl() == g.impl());
}

TEST_CASE("a table read twice gets one gradient; traced functions return it dense", "[sparse]") {
  kiln::clear_session();
  Variable table(table_values(), "table");
  const auto loss_of = [&](const Tensor& a, const Tensor& b) {
    const Tensor x = kiln::gather(table.value(), a, 0);
    const Tensor y = kiln::gather(table.value(), b, 0);
    return kiln::sum(kiln::square(x)) + kiln::sum(x * y);
  };
  const Tensor a = kiln::tensor(std::vector<std::int32_t>{1, 4, 1});
  const Tensor b = kiln::tensor(std::vector<std::int32_t>{4, 4, 0});
  Tensor eager;
  {
    kiln::GradientTape tape;
    eager = tape.gradient(loss_of(a, b), std::vector<Variable>{table})[0];
  }
  REQUIRE(eager.is_indexed_slices());
  // The reference: the same loss through a dense copy of the table.
  Tensor dense_reference;
  {
    const Tensor copy = table.value() + 0.0f;
    kiln::GradientTape tape;
    tape.watch(copy);
    const Tensor x = kiln::matmul(kiln::one_hot(a, 10), copy);
    const Tensor y = kiln::matmul(kiln::one_hot(b, 10), copy);
    dense_reference =
        tape.gradient(kiln::sum(kiln::square(x)) + kiln::sum(x * y), std::vector<Tensor>{copy})[0];
  }
  check_close(doubles(eager), doubles(dense_reference), 1e-4);
  auto traced = kiln::function([&](const Tensor& ia, const Tensor& ib) {
    kiln::GradientTape tape;
    return tape.gradient(loss_of(ia, ib), std::vector<Variable>{table})[0];
  });
  const Tensor t = traced(a, b);
  CHECK_FALSE(t.is_indexed_slices());
  check_close(doubles(t), doubles(dense_reference), 1e-4);
}

TEST_CASE("Variable::scatter_* update rows in place, or a copy when the value is shared",
          "[sparse][variables]") {
  kiln::clear_session();
  Variable v(table_values() + 0.0f, "v");
  const void* before = v.value().data();
  v.scatter_add(kiln::tensor(std::vector<std::int64_t>{3, 3, 0}),
                kiln::full({3, 3}, 1.0, kiln::f32));
  v.scatter_sub(kiln::tensor(std::vector<std::int32_t>{9}), kiln::full({1, 3}, 90.0, kiln::f32));
  v.scatter_update(kiln::tensor(std::vector<std::int64_t>{5}),
                   kiln::tensor(std::vector<float>{-1, -2, -3}, {1, 3}));
  CHECK(v.value().data() == before);  // nothing else held the buffer
  std::vector<double> want = doubles(table_values());
  for (int c = 0; c < 3; ++c) {
    want[static_cast<std::size_t>(3 * 3 + c)] += 2;
    want[static_cast<std::size_t>(c)] += 1;
    want[static_cast<std::size_t>(27 + c)] -= 90;
    want[static_cast<std::size_t>(15 + c)] = -1 - c;
  }
  check_close(doubles(v.value()), want);

  // A tensor read before keeps its value: the variable gets a fresh copy first.
  const Tensor held = v.value();
  v.scatter_add(kiln::tensor(std::vector<std::int64_t>{1}), kiln::full({1, 3}, 100.0, kiln::f32));
  check_close(doubles(held), want);
  CHECK(v.value().data() != held.data());
  CHECK(v.value().at<float>({1, 0}) == Approx(110.0));

  // Errors name the op and change nothing.
  const std::vector<double> now = doubles(v.value());
  CHECK_THROWS_WITH(
      v.scatter_add(kiln::tensor(std::vector<std::int64_t>{2, 10}), kiln::zeros({2, 3})),
      Catch::Contains("Variable.scatter_add") && Catch::Contains("row 10 is out of range"));
  CHECK_THROWS_WITH(v.scatter_add(kiln::tensor(std::vector<std::int64_t>{-1}), kiln::zeros({1, 3})),
                    Catch::Contains("row -1 is out of range"));
  CHECK_THROWS_WITH(v.scatter_add(kiln::tensor(std::vector<std::int64_t>{2}), kiln::zeros({1, 4})),
                    Catch::Contains("must have shape [1,3]"));
  CHECK_THROWS_WITH(
      v.scatter_add(kiln::tensor(std::vector<std::int64_t>{2}), kiln::zeros({1, 3}, kiln::f64)),
      Catch::Contains("kiln::cast"));
  CHECK_THROWS_WITH(v.scatter_add(kiln::tensor(std::vector<float>{2}), kiln::zeros({1, 3})),
                    Catch::Contains("i32 or i64"));
  CHECK_THROWS_WITH(v.scatter_add(kiln::zeros({10, 3})), Catch::Contains("indexed-slices"));
  Variable scalar(kiln::scalar(1.0, kiln::f32), "s");
  CHECK_THROWS_WITH(
      scalar.scatter_add(kiln::tensor(std::vector<std::int64_t>{0}), kiln::zeros({1})),
      Catch::Contains("scalar"));
  check_close(doubles(v.value()), now);
}

TEST_CASE("traced row updates run in place when the call ends, in program order", "[sparse]") {
  kiln::clear_session();
  Variable v(table_values() + 0.0f, "v");
  Variable out(kiln::zeros({2, 3}), "out");
  auto step = kiln::function([&](const Tensor& ids, const Tensor& delta) {
    const Tensor before = kiln::gather(v.value(), ids, 0);  // read before the update
    v.scatter_add(ids, delta);
    const Tensor after = kiln::gather(v.value(), ids, 0);  // sees the update
    out.assign(after - before);
    return before;
  });
  const void* buffer = v.value().data();
  const Tensor ids = kiln::tensor(std::vector<std::int64_t>{4, 6});
  const Tensor delta = kiln::tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor before = step(ids, delta);
  check_close(doubles(before), {40, 41, 42, 60, 61, 62});
  check_close(doubles(out.value()), {1, 2, 3, 4, 5, 6});
  check_close(doubles(kiln::gather(v.value(), ids, 0)), {41, 43, 45, 64, 66, 68});
  CHECK(v.value().data() == buffer);  // updated in place
  step(ids, delta);
  CHECK(step.tracing_count() == 1);
  check_close(doubles(kiln::gather(v.value(), ids, 0)), {42, 45, 48, 68, 71, 74});
  CHECK(step.get_concrete_function(ids, delta).graph().to_string().find("assign_rows[add]") !=
        std::string::npos);

  // A bad row fails the call before any side effect: nothing changes.
  const std::vector<double> now = doubles(v.value());
  const std::vector<double> out_now = doubles(out.value());
  CHECK_THROWS_WITH(step(kiln::tensor(std::vector<std::int64_t>{4, 12}), delta),
                    Catch::Contains("out of range"));
  check_close(doubles(v.value()), now);
  check_close(doubles(out.value()), out_now);

  // Dense assignment and row updates of one variable, in either order.
  Variable u(kiln::zeros({4, 2}), "u");
  auto mixed = kiln::function([&](const Tensor& rows) {
    u.scatter_add(rows, kiln::ones({2, 2}));
    u.assign(u.value() * 2.0f);  // sees the rows added
    u.scatter_update(rows, kiln::full({2, 2}, 7.0, kiln::f32));
    u.scatter_add(rows, kiln::ones({2, 2}));
  });
  mixed(kiln::tensor(std::vector<std::int64_t>{0, 3}));
  check_close(doubles(u.value()), {8, 8, 0, 0, 0, 0, 8, 8});
}

namespace {

/// Trains an embedding table with `opt` for three steps of fixed ids, eagerly or traced, with
/// indexed-slices gradients or (dense) with the same gradients made dense; returns the table
/// and every slot after.
std::vector<std::vector<double>> train_table(optim::Optimizer& opt, bool traced, bool dense) {
  kiln::clear_session();
  Variable table(table_values() * 0.01f, "emb");
  const std::vector<std::vector<std::int64_t>> batches{{1, 3, 1}, {3, 8, 8}, {0, 1, 9}};
  const auto step = [&](const Tensor& ids) {
    kiln::GradientTape tape;
    const Tensor x = kiln::gather(table.value(), ids, 0);
    const Tensor loss = kiln::sum(kiln::square(x - 0.255f));
    std::vector<Tensor> grads = tape.gradient(loss, std::vector<Variable>{table});
    if (dense) grads[0] = kiln::to_dense(grads[0]);
    opt.apply(grads, {table});
  };
  auto traced_step = kiln::function([&](const Tensor& ids) { step(ids); });
  for (const auto& b : batches) {
    if (traced)
      traced_step(kiln::tensor(b));
    else
      step(kiln::tensor(b));
  }
  std::vector<std::vector<double>> out{doubles(table.value())};
  for (const auto& name : opt.slot_names()) out.push_back(doubles(opt.slot(table, name).value()));
  return out;
}

/// The lazy rules by hand: only rows a step's gradient names move, and only their slots.
std::vector<std::vector<double>> lazy_reference(const std::string& kind) {
  std::vector<double> w = doubles(table_values() * 0.01f);
  std::vector<double> s0(w.size(), kind == "adagrad" ? 0.1 : 0.0), s1(w.size(), 0.0);
  const std::vector<std::vector<std::int64_t>> batches{{1, 3, 1}, {3, 8, 8}, {0, 1, 9}};
  int t = 0;
  for (const auto& b : batches) {
    ++t;
    std::map<std::int64_t, std::vector<double>> g;
    for (auto r : b) {
      auto& row = g.try_emplace(r, std::vector<double>(3, 0.0)).first->second;
      for (int c = 0; c < 3; ++c)
        row[static_cast<std::size_t>(c)] += 2 * (w[static_cast<std::size_t>(r * 3 + c)] - 0.255);
    }
    for (const auto& [r, row] : g) {
      for (int c = 0; c < 3; ++c) {
        const auto i = static_cast<std::size_t>(r * 3 + c);
        const double gi = row[static_cast<std::size_t>(c)];
        if (kind == "adam") {
          const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-7;
          s0[i] += (gi - s0[i]) * (1 - b1);
          s1[i] += (gi * gi - s1[i]) * (1 - b2);
          const double alpha = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
          w[i] -= s0[i] * alpha / (std::sqrt(s1[i]) + eps);
        } else if (kind == "momentum") {
          s0[i] = 0.9 * s0[i] - 0.05 * gi;
          w[i] += s0[i];
        } else if (kind == "rmsprop") {
          s0[i] = 0.9 * s0[i] + 0.1 * gi * gi;
          const double inc = 0.01 * gi / std::sqrt(s0[i] + 1e-7);
          s1[i] = 0.5 * s1[i] + inc;
          w[i] -= s1[i];
        } else {  // adagrad
          s0[i] += gi * gi;
          w[i] -= 0.1 * gi / (std::sqrt(s0[i]) + 1e-7);
        }
      }
    }
  }
  if (kind == "adam" || kind == "rmsprop") return {w, s0, s1};
  return {w, s0};
}

void check_all(const std::vector<std::vector<double>>& got,
               const std::vector<std::vector<double>>& want, double tol = 1e-5) {
  REQUIRE(got.size() == want.size());
  for (std::size_t k = 0; k < got.size(); ++k) {
    INFO("array " << k << " (0: the table, then the slots)");
    check_close(got[k], want[k], tol);
  }
}

}  // namespace

TEST_CASE("sparse optimizer updates: exact where dense is, lazy where documented",
          "[sparse][optim]") {
  for (const bool traced : {false, true}) {
    INFO("traced " << traced);
    {  // Plain SGD and Adagrad: a row the gradient does not name would not move anyway.
      optim::SGD a({.learning_rate = 0.05}), b({.learning_rate = 0.05});
      check_all(train_table(a, traced, false), train_table(b, traced, true));
      optim::Adagrad c({.learning_rate = 0.1}), d({.learning_rate = 0.1});
      check_all(train_table(c, traced, false), train_table(d, traced, true));
      optim::Adagrad e({.learning_rate = 0.1});
      check_all(train_table(e, traced, false), lazy_reference("adagrad"));
    }
    {  // Adam: lazy by default, the dense update's result on request.
      optim::Adam lazy({.learning_rate = 0.01});
      check_all(train_table(lazy, traced, false), lazy_reference("adam"));
      optim::Adam a({.learning_rate = 0.01, .lazy = false}), b({.learning_rate = 0.01});
      check_all(train_table(a, traced, false), train_table(b, traced, true));
    }
    {  // Momentum and RMSprop update the rows named and their slots only.
      optim::SGD m({.learning_rate = 0.05, .momentum = 0.9});
      check_all(train_table(m, traced, false), lazy_reference("momentum"));
      optim::RMSprop r({.learning_rate = 0.01, .momentum = 0.5});
      check_all(train_table(r, traced, false), lazy_reference("rmsprop"));
    }
  }
}

TEST_CASE("clipping reads only the values of indexed slices", "[sparse][optim]") {
  for (const bool traced : {false, true}) {
    optim::SGD a({.learning_rate = 0.05, .clipnorm = 0.5}),
        b({.learning_rate = 0.05, .clipnorm = 0.5});
    check_all(train_table(a, traced, false), train_table(b, traced, true));
    optim::SGD c({.learning_rate = 0.05, .global_clipnorm = 0.3});
    optim::SGD d({.learning_rate = 0.05, .global_clipnorm = 0.3});
    check_all(train_table(c, traced, false), train_table(d, traced, true));
  }
}

TEST_CASE("a traced lazy Adam step's memory scales with the rows touched", "[sparse][memory]") {
  kiln::clear_session();
  constexpr std::int64_t vocab = 200000, dim = 16, batch = 512;
  kiln::nn::Embedding embedding(vocab, dim);
  optim::Adam opt({.learning_rate = 0.01});
  auto step = kiln::function([&](const Tensor& ids) {
    kiln::GradientTape tape;
    const Tensor loss = kiln::mean(kiln::square(embedding(ids) - 1.0f));
    auto vars = embedding.trainable_variables();
    opt.apply(tape.gradient(loss, vars), vars);
    return loss;
  });
  const Tensor ids = kiln::random::uniform_int({batch}, 0, vocab, 7);
  step(ids);  // creates the slots
  const void* table = embedding.embeddings().value().data();
  const std::int64_t table_bytes = vocab * dim * 4;
  kiln::reset_peak_bytes();
  const std::int64_t live = kiln::memory_stats().live_bytes;
  const float first = step(ids).item<float>();
  const std::int64_t extra = kiln::memory_stats().peak_bytes - live;
  INFO("extra peak bytes " << extra << ", table " << table_bytes);
  CHECK(extra < table_bytes / 10);                        // nothing of the vocabulary's size
  CHECK(extra <= 16 * batch * dim * 4);                   // a few copies of the rows touched
  CHECK(embedding.embeddings().value().data() == table);  // updated in place
  for (int i = 0; i < 20; ++i) step(ids);
  CHECK(step(ids).item<float>() < first);
  CHECK(step.tracing_count() == 1);
}

TEST_CASE("train::fit trains an embedding model with sparse updates", "[sparse][training]") {
  kiln::clear_session();
  kiln::nn::Sequential model({kiln::nn::Embedding(50, 8), kiln::nn::Dense(1)});
  optim::Adam opt({.learning_rate = 0.05});
  const Tensor x = kiln::random::uniform_int({64, 1}, 0, 50, 3);
  const Tensor y = kiln::cast(kiln::reshape(x, {64, 1, 1}), kiln::f32) / 50.0f;
  const auto history = kiln::train::fit(model, opt, kiln::nn::losses::mean_squared_error, x, y,
                                        {.epochs = 30, .batch_size = 16, .verbose = 0});
  CHECK(history.loss.back() < history.loss.front() * 0.5);
  CHECK(history.traces == 1);
}

TEST_CASE("indexed_slices, slices_of and to_dense check their arguments", "[sparse]") {
  const Tensor ids = kiln::tensor(std::vector<std::int64_t>{0, 2});
  const Tensor s = kiln::indexed_slices(ids, kiln::ones({2, 3}), {4, 3});
  CHECK(s.is_indexed_slices());
  check_close(doubles(kiln::to_dense(s)), {1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0});
  const Tensor dup = kiln::indexed_slices(kiln::tensor(std::vector<std::int64_t>{2, 0, 2}),
                                          kiln::ones({3, 3}), {4, 3});
  const kiln::IndexedSlices d = kiln::slices_of(kiln::deduplicate(dup));
  CHECK(d.indices.to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 2, -1});
  check_close(doubles(d.values), {1, 1, 1, 2, 2, 2, 0, 0, 0});
  CHECK_THROWS_WITH(kiln::indexed_slices(ids, kiln::ones({3, 3}), {4, 3}),
                    Catch::Contains("[indexed_slices]"));
  CHECK_THROWS_WITH(kiln::indexed_slices(kiln::ones({2}), kiln::ones({2, 3}), {4, 3}),
                    Catch::Contains("i32 or i64"));
  CHECK_THROWS_WITH(kiln::slices_of(kiln::ones({2})), Catch::Contains("not an indexed-slices"));
  CHECK(kiln::to_dense(kiln::ones({2})).shape() == Shape{2});
  CHECK_THROWS_WITH(s.data(), Catch::Contains("kiln::to_dense"));
  const Tensor bad = kiln::indexed_slices(kiln::tensor(std::vector<std::int64_t>{0, 4}),
                                          kiln::ones({2, 3}), {4, 3});
  CHECK_THROWS_WITH(kiln::to_dense(bad), Catch::Contains("row 4 is out of range"));
}

TEST_CASE("an exported sparse train step updates rows as the original does", "[sparse][export]") {
  kiln::clear_session();
  Variable table(table_values() * 0.01f, "emb");
  optim::Adam opt({.learning_rate = 0.01});
  auto step = kiln::function([&](const Tensor& ids) {
    kiln::GradientTape tape;
    const Tensor loss = kiln::sum(kiln::square(kiln::gather(table.value(), ids, 0) - 0.255f));
    opt.apply(tape.gradient(loss, std::vector<Variable>{table}), {table});
    return loss;
  });
  const Tensor ids = kiln::tensor(std::vector<std::int64_t>{1, 3, 1, 8});
  step(ids);  // the slots exist from here on
  io_test::TempDir dir;
  const auto path = dir.path() / "step.kiln";
  kiln::export_function(step.get_concrete_function(ids), path);
  const kiln::LoadedFunction loaded = kiln::load_function(path);
  for (int i = 0; i < 3; ++i) {
    const float want = step(ids).item<float>();
    CHECK(loaded(ids)[0].item<float>() == want);
  }
  CHECK(doubles(loaded.variable("emb").value()) == doubles(table.value()));
  CHECK(loaded.graph().to_string().find("assign_rows[sub] 'emb'") != std::string::npos);
}

TEST_CASE("row updates in place never change a tensor another thread holds", "[sparse][threads]") {
  kiln::clear_session();
  Variable v(kiln::zeros({64, 8}), "v");
  const Tensor ids = kiln::tensor(std::vector<std::int64_t>{3, 17, 40, 63});
  auto step = kiln::function([&](const Tensor& rows) { v.scatter_add(rows, kiln::ones({4, 8})); });
  std::atomic<bool> done{false};
  std::atomic<int> changed{0}, reads{0};
  std::thread reader([&] {
    while (!done.load()) {
      const Tensor held = v.value();
      const auto first = held.to_vector<float>();
      const auto again = held.to_vector<float>();
      if (first != again) ++changed;
      ++reads;
    }
  });
  while (reads.load() == 0) std::this_thread::yield();  // the reader runs from here on
  constexpr int calls = 200;
  for (int i = 0; i < calls; ++i) {
    if (i % 2 == 0)
      step(ids);
    else
      v.scatter_add(ids, kiln::ones({4, 8}));
  }
  done = true;
  reader.join();
  CHECK(changed.load() == 0);
  const auto final = doubles(v.value());
  for (std::int64_t r : {3, 17, 40, 63}) CHECK(final[static_cast<std::size_t>(r * 8)] == calls);
  CHECK(final[0] == 0.0);
}
