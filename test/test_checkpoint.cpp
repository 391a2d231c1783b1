// save_weights / load_weights and kiln::Checkpoint: in-place, all-or-nothing, deferred restore,
// and no growth when weights are loaded into a cached function over and over.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include <kiln/checkpoint.hpp>
#include <kiln/kiln.hpp>

using kiln::Shape;
using kiln::Tensor;

namespace {

/// A dense layer that builds on its first call (input size from the input), like nn layers.
struct LazyDense : kiln::Module {
  std::int64_t units;
  explicit LazyDense(std::string name, std::int64_t u) : Module(std::move(name)), units(u) {}
  Tensor operator()(const Tensor& x) {
    const auto in = x.shape()[x.ndim() - 1];
    const auto w = add_variable("kernel", {in, units}, kiln::init::glorot_uniform(7));
    const auto b = add_variable("bias", {units}, kiln::init::zeros());
    return kiln::matmul(x, w.value()) + b.value();
  }
};

struct Net : kiln::Module {
  LazyDense l1{"l1", 8}, l2{"l2", 3};
  Net() : Module("net") {
    add_module("l1", l1);
    add_module("l2", l2);
  }
  Tensor operator()(const Tensor& x) { return l2(kiln::tanh(l1(x))); }
};

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("kiln-ckpt-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && kiln::all(kiln::equal(a, b)).item<bool>();
}

/// Equal up to float rounding: a traced dense layer adds its bias inside the GEMM (an epilogue),
/// so its sums round differently from the eager matmul-then-add.
bool close(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && kiln::max(kiln::abs(a - b)).item<float>() <= 1e-5f;
}

std::int64_t rss_pages() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident;
}

}  // namespace

TEST_CASE("save_weights and load_weights round trip by variable path", "[checkpoint]") {
  TempDir dir;
  const Tensor x = kiln::random::normal({4, 5}, 0, 1, 1);
  for (const char* file : {"w.safetensors", "w.npz"}) {
    INFO(file);
    Net a, b;
    const Tensor ya = a(x);
    b(x);  // built, different values (the seeds are equal, so perturb b)
    b.l1.variable("kernel").assign_add(kiln::ones({5, 8}));
    kiln::save_weights(a, dir.path / file);
    const auto inspected = kiln::io::inspect(dir.path / file);
    CHECK(inspected.size() == 4);
    const auto result = kiln::load_weights(b, dir.path / file);
    CHECK(result.loaded.size() == 4);
    CHECK(result.missing.empty());
    CHECK(same(b(x), ya));
  }
}

TEST_CASE("weights files are keyed relative to the module: auto-named instances share them",
          "[checkpoint]") {
  namespace nn = kiln::nn;
  TempDir dir;
  const Tensor x = kiln::random::normal({4, 6}, 0, 1, 21);
  // Two instances of one architecture with automatic names, in one process: the same paths
  // (names are unique among siblings, not counted up per process).
  const auto make = [] {
    return nn::Sequential({nn::Dense(8, nn::Activation::tanh), nn::Dense(3)});
  };
  nn::Sequential a = make();
  nn::Sequential b = make();
  CHECK(a.name() == "sequential");
  CHECK(b.name() == "sequential");
  const Tensor ya = a(x);
  b(x);
  CHECK(b.variables()[2].name() == "sequential/dense_1/kernel");
  const auto file = dir.path / "a.safetensors";
  kiln::save_weights(a, file);
  std::set<std::string> keys;
  for (const auto& [key, value] : kiln::io::load_safetensors(file)) keys.insert(key);
  CHECK(keys ==
        std::set<std::string>{"dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"});
  CHECK(kiln::load_weights(b, file).loaded.size() == 4);
  CHECK(same(b(x), ya));

  // A root of another name loads the file as well: the root's name is not in the keys.
  nn::Sequential named({nn::Dense(8, nn::Activation::tanh), nn::Dense(3)}, "classifier");
  named(x);
  kiln::load_weights(named, file);
  CHECK(same(named(x), ya));

  // Files written with keys rooted at the saving module's name (before keys were relative)
  // still load: the root every key shares, and no path of the module has, is dropped.
  const auto legacy = dir.path / "legacy.safetensors";
  std::map<std::string, Tensor> rooted;
  for (const auto& [path, v] : a.named_variables())
    rooted["sequential_1/" + path.substr(11)] = v.value();
  kiln::io::save_safetensors(legacy, rooted);
  nn::Sequential c = make();
  c(x);
  CHECK(kiln::load_weights(c, legacy).loaded.size() == 4);
  CHECK(same(c(x), ya));
  // A key map may name targets rooted at the module's name too.
  nn::Sequential d = make();
  d(x);
  const auto result = kiln::load_weights(d, legacy, {.key_map = [](const std::string& key) {
                                           return "sequential/" + key.substr(13);
                                         }});
  CHECK(result.loaded.size() == 4);
  CHECK(same(d(x), ya));
}

TEST_CASE("strict loading reports every problem and changes nothing", "[checkpoint]") {
  TempDir dir;
  const Tensor x = kiln::ones({2, 5});
  Net net;
  net(x);
  const auto before = net.get_weights();
  std::map<std::string, Tensor> values = {
      {"l1/kernel", kiln::zeros({5, 8})},  // fine
      {"l1/bias", kiln::zeros({9})},       // wrong shape
      {"l3/kernel", kiln::zeros({2, 2})},  // no such variable
  };                                       // l2/* missing
  kiln::io::save_safetensors(dir.path / "bad.safetensors", values);
  try {
    kiln::load_weights(net, dir.path / "bad.safetensors");
    FAIL("load_weights accepted a mismatched file");
  } catch (const kiln::Error& e) {
    const std::string what = e.what();
    CHECK(what.find("[load_weights]") == 0);
    CHECK(what.find("nothing was assigned") != std::string::npos);
    CHECK(what.find("missing from the file (2): l2/bias, l2/kernel") != std::string::npos);
    CHECK(what.find("unexpected in the file (1): l3/kernel") != std::string::npos);
    CHECK(what.find("l1/bias: file f32 [9], variable f32 [8]") != std::string::npos);
  }
  const auto after = net.get_weights();
  for (std::size_t i = 0; i < before.size(); ++i) CHECK(same(before[i], after[i]));

  const auto partial = kiln::load_weights(net, dir.path / "bad.safetensors", {.strict = false});
  CHECK(partial.loaded == std::vector<std::string>{"l1/kernel"});
  CHECK(partial.unexpected == std::vector<std::string>{"l3/kernel"});
  CHECK(partial.missing.size() == 2);
  CHECK(partial.mismatched.size() == 1);
  CHECK(kiln::sum(kiln::abs(net.variable("l1/kernel").value())).item<float>() == 0.f);
}

TEST_CASE("a key map loads weights named by another framework", "[checkpoint]") {
  TempDir dir;
  Net net;
  net(kiln::ones({1, 5}));
  std::map<std::string, Tensor> torch_names = {{"fc1.weight", kiln::full({5, 8}, 1.0)},
                                               {"fc1.bias", kiln::full({8}, 2.0)},
                                               {"fc2.weight", kiln::full({8, 3}, 3.0)},
                                               {"fc2.bias", kiln::full({3}, 4.0)},
                                               {"num_batches_tracked", kiln::scalar(0.0)}};
  kiln::io::save_safetensors(dir.path / "torch.safetensors", torch_names);
  const auto map = [](const std::string& key) -> std::string {
    if (key == "num_batches_tracked") return "";  // skipped
    const std::string layer = key.substr(0, 3) == "fc1" ? "l1" : "l2";
    return "net/" + layer + (key.find("weight") != std::string::npos ? "/kernel" : "/bias");
  };
  const auto result = kiln::load_weights(net, dir.path / "torch.safetensors", {.key_map = map});
  CHECK(result.loaded.size() == 4);
  CHECK(net.variable("l2/bias").value().to_vector<float>() == std::vector<float>{4, 4, 4});
  // PyTorch's Linear stores [out, in]: a transform transposes while loading.
  kiln::io::save_safetensors(dir.path / "linear.safetensors",
                             {{"fc1.weight", kiln::reshape(kiln::arange(40, kiln::f32), {8, 5})},
                              {"fc1.bias", kiln::zeros({8})},
                              {"fc2.weight", kiln::zeros({3, 8})},
                              {"fc2.bias", kiln::zeros({3})}});
  const auto transposed =
      kiln::load_weights(net, dir.path / "linear.safetensors",
                         {.key_map = map, .transform = [](const std::string& key, const Tensor& v) {
                            return key.find("weight") != std::string::npos ? kiln::transpose(v) : v;
                          }});
  CHECK(transposed.loaded.size() == 4);
  CHECK(net.variable("l1/kernel").value().to_vector<float>()[1] == 5.f);  // [0][1] = w[1][0]
}

TEST_CASE("loading weights into a cached function: no retrace, nothing grows", "[checkpoint]") {
  TempDir dir;
  Net net;
  const Tensor x = kiln::random::normal({4, 5}, 0, 1, 2);
  auto forward = kiln::function([&](const Tensor& in) { return net(in); });
  forward(x);
  Net other;
  other(x);
  other.l2.variable("bias").assign(kiln::full({3}, 5.0));
  kiln::save_weights(other, dir.path / "other.safetensors");
  kiln::save_weights(net, dir.path / "mine.safetensors");
  const auto nodes = forward.get_concrete_function(x).graph().num_nodes();

  kiln::load_weights(net, dir.path / "other.safetensors");
  CHECK(close(forward(x), other(x)));
  CHECK(forward.tracing_count() == 1);
  CHECK(forward.get_concrete_function(x).graph().num_nodes() == nodes);

  const auto variables = kiln::global_variables().size();
  const auto stats = kiln::memory_stats();
  const auto rss = rss_pages();
  for (int i = 0; i < 1000; ++i) {
    kiln::load_weights(net, dir.path / (i % 2 == 0 ? "mine.safetensors" : "other.safetensors"));
    forward(x);
  }
  const auto after = kiln::memory_stats();
  CHECK(forward.tracing_count() == 1);
  CHECK(kiln::global_variables().size() == variables);
  CHECK(after.live_bytes == stats.live_bytes);
  CHECK(after.live_tensors == stats.live_tensors);
  CHECK(after.live_graph_nodes == stats.live_graph_nodes);
#if !defined(__SANITIZE_ADDRESS__)  // AddressSanitizer keeps freed memory in quarantine
  CHECK(rss_pages() - rss < 256);   // under 1 MiB of 4 KiB pages
#else
  (void)rss;
#endif
}

TEST_CASE("checkpoints keep the last files and restore the newest", "[checkpoint]") {
  TempDir dir;
  const Tensor x = kiln::ones({2, 5});
  Net net;
  net(x);
  kiln::Variable step(kiln::scalar(0.0, kiln::i64), "step", false);
  kiln::Checkpoint ckpt({{"model", &net}}, {.keep_last = 2});
  ckpt.track("step", step);
  const auto prefix = dir.path / "run" / "ckpt";
  for (int i = 1; i <= 3; ++i) {
    step.assign(kiln::scalar(static_cast<double>(i), kiln::i64));
    net.l2.variable("bias").assign(kiln::full({3}, static_cast<double>(i)));
    ckpt.save(prefix);
  }
  CHECK(!std::filesystem::exists(prefix.string() + "-1.safetensors"));
  CHECK(std::filesystem::exists(prefix.string() + "-2.safetensors"));
  CHECK(kiln::Checkpoint::latest(prefix) == prefix.string() + "-3.safetensors");

  net.l2.variable("bias").assign(kiln::zeros({3}));
  step.assign(kiln::scalar(0.0, kiln::i64));
  ckpt.restore(prefix);
  CHECK(step.value().item<std::int64_t>() == 3);
  CHECK(net.l2.variable("bias").value().to_vector<float>() == std::vector<float>{3, 3, 3});
  ckpt.restore(prefix.string() + "-2.safetensors");
  CHECK(step.value().item<std::int64_t>() == 2);
}

TEST_CASE("restoring before a lazy layer builds defers the values", "[checkpoint]") {
  TempDir dir;
  const Tensor x = kiln::random::normal({3, 5}, 0, 1, 4);
  Net trained;
  trained(x);
  trained.l1.variable("kernel").assign_add(kiln::ones({5, 8}));
  const Tensor expected = trained(x);
  kiln::Checkpoint({{"model", &trained}}).save(dir.path / "ckpt");

  Net fresh;  // not built: it has no variables yet
  kiln::Checkpoint ckpt({{"model", &fresh}});
  ckpt.restore(dir.path / "ckpt");
  CHECK(ckpt.pending().size() == 4);
  CHECK_THROWS_WITH(ckpt.assert_consumed(), Catch::Contains("4 restored values were never used"));
  // The first call builds the layers (here inside a traced function) with the saved values.
  auto forward = kiln::function([&](const Tensor& in) { return fresh(in); });
  CHECK(same(forward(x), expected));
  CHECK(ckpt.pending().empty());
  CHECK_NOTHROW(ckpt.assert_consumed());
}

TEST_CASE("a checkpoint with a foreign key restores nothing", "[checkpoint]") {
  TempDir dir;
  Net net;
  net(kiln::ones({1, 5}));
  const auto before = net.get_weights();
  kiln::io::save_safetensors(dir.path / "x.safetensors",
                             {{"model/net/l1/kernel", kiln::zeros({5, 8})},
                              {"optimizer/adam/iterations", kiln::scalar(1.0)}});
  kiln::Checkpoint ckpt({{"model", &net}});
  CHECK_THROWS_WITH(ckpt.restore(dir.path / "x.safetensors"),
                    Catch::Contains("'optimizer/adam/iterations' belongs to no object"));
  CHECK(same(net.get_weights()[0], before[0]));
  CHECK_THROWS_WITH(ckpt.restore(dir.path / "none"), Catch::Contains("no checkpoint"));

  // Keys are file content: quoted escaped, and a file of many bad keys lists only a few.
  std::map<std::string, Tensor> hostile;
  hostile[std::string("stray\0b\x1b[2J/x", 13)] = kiln::scalar(1.0);
  for (int i = 0; i < 500; ++i) hostile[fmt::format("stray{}/x", i)] = kiln::scalar(1.0);
  kiln::io::save_safetensors(dir.path / "hostile.safetensors", hostile);
  try {
    ckpt.restore(dir.path / "hostile.safetensors");
    FAIL("restore accepted foreign keys");
  } catch (const kiln::Error& e) {
    const std::string message = e.what();
    CHECK(message.find("'stray\\x00b\\x1b[2J/x' belongs to no object") != std::string::npos);
    CHECK(message.find('\0') == std::string::npos);
    CHECK(message.find('\x1b') == std::string::npos);
    CHECK(message.find("... and 481 more") != std::string::npos);
    CHECK(message.size() < 4000);
  }
  CHECK(same(net.get_weights()[0], before[0]));
}

TEST_CASE("a checkpoint saves and restores optimizer slots with the model", "[checkpoint]") {
  TempDir dir;
  const Tensor x = kiln::random::normal({8, 5}, 0, 1, 6), y = kiln::random::normal({8, 3}, 0, 1, 7);
  kiln::nn::Dense model(3, kiln::nn::Activation::none, {.name = "model_dense"});
  kiln::optim::Adam adam({.learning_rate = 0.01});
  const auto step = [&] {
    kiln::GradientTape tape;
    const Tensor loss = kiln::mean(kiln::square(model(x) - y));
    adam.apply(tape.gradient(loss, model.trainable_variables()), model.trainable_variables());
    return loss;
  };
  for (int i = 0; i < 3; ++i) step();
  kiln::Checkpoint ckpt({{"model", &model}, {"optimizer", &adam}});
  ckpt.save(dir.path / "ckpt");
  const auto saved_model = model.get_weights();
  const auto saved_optimizer = adam.get_weights();
  REQUIRE(saved_optimizer.size() >= 4);  // m and v of kernel and bias (and the counter)
  const Tensor next_loss = step();       // what the 4th step gives from the saved state
  step();
  ckpt.restore(dir.path / "ckpt");
  for (std::size_t i = 0; i < saved_model.size(); ++i)
    CHECK(same(model.get_weights()[i], saved_model[i]));
  for (std::size_t i = 0; i < saved_optimizer.size(); ++i)
    CHECK(same(adam.get_weights()[i], saved_optimizer[i]));
  CHECK(step().item<float>() == next_loss.item<float>());
}

namespace {

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::set<std::string> names_in(const std::filesystem::path& dir) {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    out.insert(e.path().filename().string());
  return out;
}

}  // namespace

TEST_CASE("checkpoint names kiln does not write are never read, counted or deleted",
          "[checkpoint]") {
  TempDir dir;
  Net net;
  net(kiln::ones({2, 5}));
  const auto prefix = dir.path / "ck";
  const auto numbered = [&](const std::string& n) {
    return prefix.string() + "-" + n + ".safetensors";
  };
  kiln::Checkpoint ckpt({{"model", &net}}, {.keep_last = 1});
  net.l2.variable("bias").assign(kiln::full({3}, 1.0));
  CHECK(ckpt.save(prefix) == numbered("1"));
  // Names of the right shape but not numbers kiln writes: 2^64 - 1 (20 digits, the name that
  // made the next save wrap to 0), 19 digits, leading zeros, zero, signs, letters, spaces.
  const std::vector<std::string> strays = {"ck-18446744073709551615.safetensors",
                                           "ck-1000000000000000000.safetensors",
                                           "ck-007.safetensors",
                                           "ck-0.safetensors",
                                           "ck-00.safetensors",
                                           "ck-+5.safetensors",
                                           "ck--5.safetensors",
                                           "ck- 5.safetensors",
                                           "ck-5 .safetensors",
                                           "ck-1a.safetensors",
                                           "ck-0x10.safetensors",
                                           "ck-.safetensors",
                                           "ck-5.safetensors.bak",
                                           "ck-5.SAFETENSORS",
                                           "ck-5safetensors",
                                           "xck-9.safetensors",
                                           "ck9.safetensors"};
  for (const auto& name : strays) write_text(dir.path / name, "stray " + name);
  CHECK(kiln::Checkpoint::latest(prefix) == numbered("1"));

  net.l2.variable("bias").assign(kiln::full({3}, 2.0));
  const auto second = ckpt.save(prefix);
  CHECK(second == numbered("2"));  // not -0: the stray numbers count for nothing
  CHECK(std::filesystem::exists(second));
  CHECK_FALSE(std::filesystem::exists(numbered("1")));  // keep_last = 1 removes kiln's own
  for (const auto& name : strays) {
    INFO(name);
    CHECK(read_text(dir.path / name) == "stray " + name);
  }
  CHECK(kiln::Checkpoint::latest(prefix) == second);
  net.l2.variable("bias").assign(kiln::zeros({3}));
  CHECK(ckpt.restore(prefix) == second);
  CHECK(net.l2.variable("bias").value().to_vector<float>() == std::vector<float>{2, 2, 2});

  // Only strays in the folder: no checkpoint to restore, and the first save is -1.
  TempDir other;
  for (const auto& name : strays) write_text(other.path / name, "stray");
  const auto other_prefix = other.path / "ck";
  CHECK(kiln::Checkpoint::latest(other_prefix).empty());
  CHECK_THROWS_WITH(ckpt.restore(other_prefix), Catch::Contains("no checkpoint"));
  const auto first = ckpt.save(other_prefix);
  CHECK(first == other_prefix.string() + "-1.safetensors");
  CHECK(std::filesystem::exists(first));
  CHECK(names_in(other.path).size() == strays.size() + 1);
}

TEST_CASE("checkpoint numbers stop at their limit instead of wrapping", "[checkpoint]") {
  TempDir dir;
  Net net;
  net(kiln::ones({2, 5}));
  const auto prefix = dir.path / "ck";
  kiln::Checkpoint ckpt({{"model", &net}}, {.keep_last = 1});
  const auto seed = ckpt.save(dir.path / "seed");
  std::filesystem::rename(seed, prefix.string() + "-999999999999999998.safetensors");
  const auto last = ckpt.save(prefix);
  CHECK(last == prefix.string() + "-999999999999999999.safetensors");
  CHECK(std::filesystem::exists(last));
  CHECK_FALSE(std::filesystem::exists(prefix.string() + "-999999999999999998.safetensors"));
  CHECK(kiln::Checkpoint::latest(prefix) == last);

  const auto before = names_in(dir.path);
  const std::string where = "[Checkpoint.save] " + prefix.string() + "-999999999999999999";
  const std::string why = "checkpoint numbers end at 999999999999999999";
  CHECK_THROWS_WITH(ckpt.save(prefix), Catch::StartsWith(where) && Catch::Contains(why));
  kiln::Checkpoint fresh({{"model", &net}});  // no memory of earlier saves: the file decides
  CHECK_THROWS_WITH(fresh.save(prefix), Catch::StartsWith(where) && Catch::Contains(why));
  CHECK(names_in(dir.path) == before);  // nothing written, nothing deleted, no temporary file
  CHECK(fresh.restore(prefix) == last);
}

TEST_CASE("checkpoint numbering does not go back when files disappear", "[checkpoint]") {
  TempDir dir;
  Net net;
  net(kiln::ones({2, 5}));
  const auto prefix = dir.path / "run" / "ck";
  kiln::Checkpoint ckpt({{"model", &net}}, {.keep_last = 0});
  ckpt.save(prefix);
  ckpt.save(prefix);
  std::filesystem::remove_all(dir.path / "run");
  CHECK(ckpt.save(prefix) == prefix.string() + "-3.safetensors");
  // The same prefix spelled another way is the same series.
  CHECK(ckpt.save(dir.path / "run" / "." / "ck") ==
        (dir.path / "run" / "." / "ck").string() + "-4.safetensors");
  // Another checkpoint counts from the files.
  kiln::Checkpoint other({{"model", &net}});
  CHECK(other.save(prefix) == prefix.string() + "-5.safetensors");
}

TEST_CASE("a checkpoint file that names one variable twice restores nothing", "[checkpoint]") {
  TempDir dir;
  // Object "m" holds module "m": "m/m/kernel" (rooted, as save writes it) and "m/kernel"
  // (relative) are one variable.
  LazyDense m("m", 2);
  m(kiln::ones({1, 3}));
  const auto before = m.get_weights();
  const auto file = dir.path / "twice.safetensors";
  kiln::io::save_safetensors(file, {{"m/m/kernel", kiln::zeros({3, 2})},
                                    {"m/kernel", kiln::ones({3, 2})},
                                    {"m/m/bias", kiln::full({2}, 3.0)}});
  kiln::Checkpoint ckpt({{"m", &m}});
  CHECK_THROWS_WITH(ckpt.restore(file),
                    Catch::StartsWith("[Checkpoint.restore] " + file.string()) &&
                        Catch::Contains("nothing was restored") &&
                        Catch::Contains("'m/kernel' and 'm/m/kernel' both name the variable "
                                        "'m/kernel' of object 'm'"));
  for (std::size_t i = 0; i < before.size(); ++i) CHECK(same(m.get_weights()[i], before[i]));
  CHECK_THROWS_WITH(kiln::load_weights(m, file), Catch::Contains("nothing was assigned"));

  // The same for values waiting for variables that do not exist yet.
  Net fresh;
  kiln::io::save_safetensors(file, {{"model/net/l1/kernel", kiln::zeros({5, 8})},
                                    {"model/l1/kernel", kiln::ones({5, 8})}});
  kiln::Checkpoint lazy({{"model", &fresh}});
  CHECK_THROWS_WITH(lazy.restore(file),
                    Catch::Contains("'model/l1/kernel' and 'model/net/l1/kernel' both name the "
                                    "variable 'net/l1/kernel' (not created yet)"));
  CHECK(lazy.pending().empty());
  // One relative key alone is fine: it waits for net/l1/kernel and is used when that is built.
  kiln::io::save_safetensors(file, {{"model/l1/kernel", kiln::ones({5, 8})}});
  lazy.restore(file);
  CHECK(lazy.pending() == std::vector<std::string>{"model/l1/kernel"});
  fresh(kiln::ones({1, 5}));
  CHECK(lazy.pending().empty());
  CHECK(same(fresh.l1.variable("kernel").value(), kiln::ones({5, 8})));
}

TEST_CASE("a variable shared by two objects restores when its values agree", "[checkpoint]") {
  TempDir dir;
  Net net;
  net(kiln::ones({1, 5}));
  net.l2.variable("bias").assign(kiln::full({3}, 7.0));
  kiln::Variable bias = net.l2.variable("bias");
  kiln::Checkpoint ckpt({{"a", &net}, {"b", &net}});
  ckpt.track("bias", bias);
  const auto file = ckpt.save(dir.path / "ck");
  CHECK(kiln::io::inspect(file).size() == 9);  // 4 + 4 + 1 keys for 4 variables
  bias.assign(kiln::zeros({3}));
  CHECK(ckpt.restore(file) == file);
  CHECK(bias.value().to_vector<float>() == std::vector<float>{7, 7, 7});

  kiln::io::save_safetensors(dir.path / "differ.safetensors",
                             {{"a/net/l2/bias", kiln::full({3}, 1.0)},
                              {"b/net/l2/bias", kiln::full({3}, 2.0)},
                              {"bias", kiln::full({3}, 1.0)}});
  CHECK_THROWS_WITH(ckpt.restore(dir.path / "differ.safetensors"),
                    Catch::Contains("'a/net/l2/bias' and 'b/net/l2/bias' name one variable "
                                    "('net/l2/bias') with different values") &&
                        !Catch::Contains("'bias'"));
  CHECK(bias.value().to_vector<float>() == std::vector<float>{7, 7, 7});
}

TEST_CASE("build(input_shape) creates the variables without data, so weights load first",
          "[checkpoint]") {
  namespace nn = kiln::nn;
  TempDir dir;
  const Tensor x = kiln::random::normal({4, 7, 6}, 0, 1, 31);
  const auto make = [] {
    return nn::Sequential({nn::LSTM(5, {.return_sequences = true}), nn::GRU(4), nn::Dense(2)});
  };
  nn::Sequential trained = make();
  const Tensor want = trained(x);
  const auto file = dir.path / "rnn.safetensors";
  kiln::save_weights(trained, file);

  nn::Sequential fresh = make();
  CHECK(fresh.variables().empty());
  fresh.build({-1, -1, 6});  // any batch, any length
  CHECK(fresh.variables().size() == trained.variables().size());
  for (std::size_t i = 0; i < fresh.variables().size(); ++i) {
    CHECK(fresh.variables()[i].name() == trained.variables()[i].name());
    CHECK(fresh.variables()[i].shape() == trained.variables()[i].shape());
  }
  kiln::load_weights(fresh, file);
  CHECK(same(fresh(x), want));
  fresh.build({2, 3, 6});  // the same input size: nothing changes
  CHECK(fresh.variables().size() == trained.variables().size());
  CHECK_THROWS_WITH(fresh.build({2, 3, 5}),
                    Catch::Contains("was built for f32 inputs with last dim 6"));

  // set_weights and Checkpoint::restore work on a built model too.
  nn::Dense dense(3);
  dense.build({-1, 4});
  dense.set_weights({kiln::ones({4, 3}), kiln::zeros({3})});
  CHECK(same(dense(kiln::ones({1, 4})), kiln::full({1, 3}, 4.0)));

  nn::LSTM stateful(3, {.stateful = true});
  CHECK_THROWS_WITH(stateful.build({-1, 2, 4}),
                    Catch::StartsWith("[nn.Layer.build] lstm is stateful") &&
                        Catch::Contains("needs a static batch dim"));
  stateful.build({2, 5, 4});
  CHECK(stateful.non_trainable_variables().front().shape() == Shape{2, 3});
  CHECK_THROWS_WITH(dense.build({}), Catch::Contains("needs the input's shape"));
  auto inside = kiln::function([&](const Tensor& v) {
    dense.build({-1, 4});
    return v;
  });
  CHECK_THROWS_WITH(inside(kiln::ones({1})),
                    Catch::Contains("cannot build while a function is being traced"));
}

TEST_CASE("list_variables and load_variable read one file or a prefix's newest checkpoint",
          "[checkpoint]") {
  TempDir dir;
  Net net;
  net(kiln::ones({2, 5}));
  kiln::Checkpoint ckpt({{"model", &net}});
  const auto prefix = dir.path / "ck";
  ckpt.save(prefix);
  net.l1.variable("bias").assign(kiln::full({8}, 2.0));
  const auto newest = ckpt.save(prefix);
  std::set<std::string> names;
  for (const auto& info : kiln::list_variables(prefix)) {
    names.insert(info.name);
    if (info.name == "model/net/l1/kernel") CHECK(info.shape == Shape{5, 8});
  }
  CHECK(names == std::set<std::string>{"model/net/l1/kernel", "model/net/l1/bias",
                                       "model/net/l2/kernel", "model/net/l2/bias"});
  CHECK(same(kiln::load_variable(prefix, "model/net/l1/bias"), kiln::full({8}, 2.0)));
  CHECK(same(kiln::load_variable(newest, "model/net/l1/bias"), kiln::full({8}, 2.0)));
  // .npz and .npy files as well.
  kiln::save_weights(net, dir.path / "w.npz");
  CHECK(kiln::list_variables(dir.path / "w.npz").size() == 4);
  CHECK(same(kiln::load_variable(dir.path / "w.npz", "l1/bias"), kiln::full({8}, 2.0)));
  kiln::io::save_npy(dir.path / "one.npy", kiln::ones({3}));
  CHECK(same(kiln::load_variable(dir.path / "one.npy", "one"), kiln::ones({3})));
  CHECK_THROWS_WITH(kiln::load_variable(prefix, "model/net/l9/bias"),
                    Catch::StartsWith("[load_variable] " + newest.string() +
                                      " holds no tensor 'model/net/l9/bias'"));
  CHECK_THROWS_WITH(kiln::list_variables(dir.path / "nothing"),
                    Catch::StartsWith("[list_variables] ") && Catch::Contains("and no files '"));
}

TEST_CASE("restore with options: var_list, partial files, key maps, and a report", "[checkpoint]") {
  TempDir dir;
  const Tensor x = kiln::ones({2, 5});
  Net net;
  net(x);
  kiln::Variable step(kiln::scalar(7.0f), "opts/step");
  kiln::Checkpoint ckpt({{"model", &net}});
  ckpt.track("step", step);
  const auto file = ckpt.save(dir.path / "ck");
  const auto saved = net.get_weights();
  const auto scramble = [&] {
    for (const auto& v : net.variables()) v.assign(kiln::zeros(v.shape()));
    step.assign(kiln::scalar(0.0f));
  };

  // Only the variables of var_list.
  scramble();
  kiln::RestoreResult only = ckpt.restore(file, {.var_list = {net.l1.variable("kernel"), step}});
  CHECK(only.file == file);
  CHECK(std::set<std::string>(only.assigned.begin(), only.assigned.end()) ==
        std::set<std::string>{"model/net/l1/kernel", "step"});
  CHECK(only.skipped.size() == 3);
  CHECK(only.missing.empty());
  CHECK(same(net.l1.variable("kernel").value(), saved[0]));
  CHECK(kiln::max(kiln::abs(net.l1.variable("bias").value())).item<float>() == 0.0f);
  CHECK(step.value().item<float>() == 7.0f);

  // A partial file with a stranger key and a wrong shape: strict refuses, non-strict reports.
  std::map<std::string, Tensor> values = kiln::io::load_safetensors(file);
  values.erase("model/net/l2/bias");
  values["model/net/l1/bias"] = kiln::zeros({9});
  values["other/w"] = kiln::zeros({1});
  const auto partial = dir.path / "partial.safetensors";
  kiln::io::save_safetensors(partial, values);
  scramble();
  CHECK_THROWS_WITH(ckpt.restore(partial, {}), Catch::Contains("nothing was restored"));
  CHECK(step.value().item<float>() == 0.0f);
  const kiln::RestoreResult report = ckpt.restore(partial, {.strict = false});
  CHECK(report.unused == std::vector<std::string>{"other/w"});
  CHECK(report.mismatched ==
        std::vector<std::string>{"model/net/l1/bias: file f32 [9], variable f32 [8]"});
  CHECK(report.missing == std::vector<std::string>{"model/net/l2/bias"});  // l1/bias: mismatched
  CHECK(report.assigned.size() == 3);  // l1/kernel, l2/kernel, step
  CHECK(step.value().item<float>() == 7.0f);

  // Keys renamed by a map (a checkpoint written under another object name).
  std::map<std::string, Tensor> renamed;
  for (const auto& [key, value] : kiln::io::load_safetensors(file))
    renamed[key.starts_with("model/") ? "encoder/" + key.substr(6) : key] = value;
  const auto other = dir.path / "renamed.safetensors";
  kiln::io::save_safetensors(other, renamed);
  scramble();
  const kiln::RestoreResult mapped =
      ckpt.restore(other, {.key_map = [](const std::string& key) {
                     return key.starts_with("encoder/") ? "model/" + key.substr(8) : key;
                   }});
  CHECK(mapped.assigned.size() == 5);
  CHECK(mapped.missing.empty());
  for (std::size_t i = 0; i < saved.size(); ++i) CHECK(same(net.get_weights()[i], saved[i]));
  CHECK_THROWS_WITH(
      ckpt.restore(other, {.key_map = [](const std::string&) { return std::string("step"); }}),
      Catch::Contains("two keys map to 'step'; nothing was restored"));
  CHECK_THROWS_WITH(ckpt.restore(file, {.var_list = {kiln::Variable()}}),
                    Catch::Contains("var_list holds an empty Variable handle"));
}

TEST_CASE("track_store saves get_variable's variables by full name, restores before creation",
          "[checkpoint]") {
  TempDir dir;
  kiln::clear_session();
  const auto model = [](const Tensor& x) {
    kiln::NameScope scope("tf1");
    const auto w =
        kiln::get_variable("w", {3, 2}, kiln::init::glorot_uniform(5), kiln::Reuse::Auto);
    const auto b = kiln::get_variable("b", {2}, kiln::init::zeros(), kiln::Reuse::Auto);
    return kiln::matmul(x, w.value()) + b.value();
  };
  const Tensor x = kiln::ones({1, 3});
  const Tensor want = model(x);
  kiln::Checkpoint ckpt({});
  ckpt.track_store();
  const auto file = ckpt.save(dir.path / "tf1");
  std::set<std::string> keys;
  for (const auto& info : kiln::list_variables(file)) keys.insert(info.name);
  CHECK(keys == std::set<std::string>{"tf1/w", "tf1/b"});

  kiln::find_variable("tf1/w").assign(kiln::zeros({3, 2}));
  const kiln::RestoreResult r = ckpt.restore(file, {});
  CHECK(r.assigned.size() == 2);
  CHECK(same(model(x), want));

  // A fresh session: the values wait for get_variable to create their variables.
  kiln::clear_session();
  ckpt.restore(file);
  CHECK(ckpt.pending().size() == 2);
  CHECK(same(model(x), want));
  ckpt.assert_consumed();

  // A store variable named like an object's keys would be ambiguous in the file.
  Net net;
  net(kiln::ones({2, 5}));
  kiln::get_variable("model/extra", {1}, kiln::init::zeros());
  kiln::Checkpoint both({{"model", &net}});
  both.track_store();
  CHECK_THROWS_WITH(both.save(dir.path / "both"),
                    Catch::StartsWith("[Checkpoint.save] the store's variable 'model/extra' would "
                                      "share its key"));
  kiln::clear_session();
}
