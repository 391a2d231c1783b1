// Values that wait for variables: load_weights into a model that is not built (deferred by
// path), and a Checkpoint of one module keyed by its variable paths.
#include <catch2/catch.hpp>

#include <algorithm>

#include <kiln/checkpoint.hpp>
#include <kiln/kiln.hpp>

#include "io_test_support.hpp"

using kiln::Tensor;

namespace {

bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && kiln::all(kiln::equal(a, b)).item<bool>();
}

}  // namespace

TEST_CASE("loading into a model that is not built defers the values by path", "[checkpoint]") {
  namespace nn = kiln::nn;
  io_test::TempDir dir;
  nn::Sequential built({nn::Dense(4), nn::Dense(2)});
  const Tensor x = kiln::ones({1, 3});
  const Tensor expected = built(x);
  const auto file = dir.path() / "w.safetensors";
  kiln::save_weights(built, file);
  {
    nn::Sequential unbuilt({nn::Dense(4), nn::Dense(2)});
    const auto result = kiln::load_weights(unbuilt, file);
    CHECK(result.loaded.empty());
    CHECK(result.deferred ==
          std::vector<std::string>{"dense/bias", "dense/kernel", "dense_1/bias", "dense_1/kernel"});
    CHECK(unbuilt.variables().empty());
    CHECK(same(unbuilt(x), expected));  // the layers were built with the loaded values
    CHECK_THROWS_WITH(nn::Sequential({nn::Dense(4), nn::Dense(2)}).set_weights(built.get_weights()),
                      Catch::StartsWith("[Module.set_weights] sequential has no variables yet") &&
                          Catch::Contains("it is not built"));
  }
  // A model built for another input size finds values of another shape: an error naming both.
  nn::Sequential other({nn::Dense(4), nn::Dense(2)});
  kiln::load_weights(other, file);
  CHECK_THROWS_WITH(other(kiln::ones({1, 5})), Catch::Contains("dense/kernel"));
  // Values a destroyed model never used are dropped with it: a new model builds fresh.
  {
    nn::Sequential dropped({nn::Dense(4), nn::Dense(2)});
    kiln::load_weights(dropped, file);
  }
  nn::Sequential fresh({nn::Dense(4), nn::Dense(2)});
  CHECK_FALSE(same(fresh(x), expected));
}

TEST_CASE("a checkpoint of one module keys its files by the variable paths", "[checkpoint]") {
  namespace nn = kiln::nn;
  io_test::TempDir dir;
  nn::Sequential model({nn::Dense(3, nn::Activation::relu), nn::Dense(1)});
  kiln::Variable step(kiln::scalar(std::int64_t{7}), "step", /*trainable*/ false);
  const Tensor x = kiln::ones({2, 4});
  const Tensor expected = model(x);
  kiln::Checkpoint ckpt(model);
  ckpt.track("step", step);
  const auto file = ckpt.save(dir.path() / "ckpt");
  std::vector<std::string> keys;
  for (const auto& info : kiln::list_variables(file)) keys.push_back(info.name);
  std::sort(keys.begin(), keys.end());
  CHECK(keys == std::vector<std::string>{"dense/bias", "dense/kernel", "dense_1/bias",
                                         "dense_1/kernel", "step"});
  // Restore into a copy not built yet: the paths wait for the layers, the counter is assigned.
  nn::Sequential copy({nn::Dense(3, nn::Activation::relu), nn::Dense(1)});
  kiln::Variable restored_step(kiln::scalar(std::int64_t{0}), "step", false);
  kiln::Checkpoint into(copy);
  into.track("step", restored_step);
  const kiln::RestoreResult result = into.restore(dir.path() / "ckpt", {});
  CHECK(result.deferred.size() == 4);
  CHECK(result.assigned == std::vector<std::string>{"step"});
  CHECK(same(copy(x), expected));
  CHECK(restored_step.value().item<std::int64_t>() == 7);
  into.assert_consumed();
  // The same file also loads with load_weights (the tracked counter is then unexpected).
  nn::Sequential third({nn::Dense(3, nn::Activation::relu), nn::Dense(1)});
  third(x);
  CHECK(kiln::load_weights(third, file, {.strict = false}).unexpected ==
        std::vector<std::string>{"step"});
  CHECK(same(third(x), expected));
  CHECK_THROWS_WITH(into.track_store(), Catch::Contains("name the module"));
}
