// io: round trips through safetensors, .npy and .npz; metadata, subsets, inspect; the
// reference safetensors layout; memory-mapped loads of large files; atomic saves.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <kiln/kiln.hpp>

#include "io/atomic_file.hpp"
#include "io/mapped_file.hpp"
#include "io_test_support.hpp"
#include "save_child.hpp"

using io_test::same;
using io_test::TempDir;
using kiln::Shape;
using kiln::Tensor;
namespace io = kiln::io;

TEST_CASE("safetensors round trip: every dtype and rank, zero-size and rank 0", "[io]") {
  TempDir dir;
  std::map<std::string, Tensor> tensors;
  for (auto dtype : io_test::all_dtypes) {
    int k = 0;
    for (const auto& shape : io_test::round_trip_shapes)
      tensors[fmt::format("{}/{}", kiln::dtype_name(dtype), k++)] = io_test::sample(dtype, shape);
  }
  const auto path = dir / "all.safetensors";
  io::save_safetensors(path, tensors);
  const auto loaded = io::load_safetensors(path);
  REQUIRE(loaded.size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    INFO(name);
    REQUIRE(loaded.count(name) == 1);
    CHECK(same(loaded.at(name), t));
  }
  // Loaded tensors own their memory: they outlive the file.
  std::filesystem::remove(path);
  CHECK(loaded.at("f32/3").to_vector<float>() ==
        std::vector<float>{-3.f, -2.5f, -2.f, -1.5f, -1.f, -.5f});
}

TEST_CASE("npy round trip: every dtype and rank", "[io]") {
  TempDir dir;
  for (auto dtype : io_test::all_dtypes)
    for (const auto& shape : io_test::round_trip_shapes) {
      INFO(kiln::dtype_name(dtype) << " " << shape.to_string());
      const Tensor t = io_test::sample(dtype, shape);
      const auto path = dir / "t.npy";
      io::save_npy(path, t);
      CHECK(same(io::load_npy(path), t));
      // The data starts at a multiple of 64 bytes, as NumPy writes it.
      const auto bytes = io_test::read_bytes(path);
      CHECK((bytes.size() - static_cast<std::size_t>(t.size()) * kiln::dtype_size(dtype)) % 64 ==
            0);
    }
}

TEST_CASE("npz round trip: stored and compressed, every dtype and rank", "[io]") {
  TempDir dir;
  std::map<std::string, Tensor> tensors;
  for (auto dtype : io_test::all_dtypes) {
    int k = 0;
    for (const auto& shape : io_test::round_trip_shapes)
      tensors[fmt::format("{}/{}", kiln::dtype_name(dtype), k++)] = io_test::sample(dtype, shape);
  }
  tensors["big"] = kiln::zeros({1000, 100});
  for (bool compressed : {false, true}) {
    const auto path = dir / (compressed ? "c.npz" : "s.npz");
    io::save_npz(path, tensors, compressed);
    const auto loaded = io::load_npz(path);
    REQUIRE(loaded.size() == tensors.size());
    for (const auto& [name, t] : tensors) {
      INFO(name << (compressed ? " compressed" : " stored"));
      CHECK(same(loaded.at(name), t));
    }
  }
  // Zeros deflate well; stored members do not shrink.
  CHECK(std::filesystem::file_size(dir / "c.npz") < std::filesystem::file_size(dir / "s.npz") / 10);
  // Equal inputs give equal archives (fixed time stamps).
  io::save_npz(dir / "s2.npz", tensors);
  CHECK(io_test::read_bytes(dir / "s.npz") == io_test::read_bytes(dir / "s2.npz"));
  // Subsets.
  const auto some = io::load_npz(dir / "c.npz", {"big", "i64/2"});
  CHECK(some.size() == 2);
  CHECK(same(some.at("i64/2"), tensors.at("i64/2")));
  CHECK_THROWS_WITH(io::load_npz(dir / "c.npz", {"big", "nope", "nada"}),
                    Catch::Contains("no array named 'nope', 'nada'"));
  // An empty archive.
  io::save_npz(dir / "empty.npz", {});
  CHECK(io::load_npz(dir / "empty.npz").empty());
}

TEST_CASE("Views are saved in row-major order", "[io]") {
  TempDir dir;
  const Tensor x = kiln::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  const Tensor xt = kiln::transpose(x);
  REQUIRE_FALSE(xt.is_contiguous());
  io::save_safetensors(dir / "v.safetensors", {{"xt", xt}});
  io::save_npy(dir / "v.npy", xt);
  io::save_npz(dir / "v.npz", {{"xt", xt}}, true);
  const std::vector<float> expected{1, 4, 2, 5, 3, 6};
  CHECK(io::load_safetensors(dir / "v.safetensors").at("xt").to_vector<float>() == expected);
  CHECK(io::load_npy(dir / "v.npy").to_vector<float>() == expected);
  CHECK(io::load_npz(dir / "v.npz").at("xt").to_vector<float>() == expected);
}

TEST_CASE("safetensors metadata, subsets and SafetensorsFile", "[io]") {
  TempDir dir;
  const auto path = dir / "m.safetensors";
  const io::Metadata metadata{{"format", "pt"}, {"note", "ünïcode \"quoted\"\n"}};
  const std::map<std::string, Tensor> tensors{{"a", io_test::sample(kiln::f32, {2, 2})},
                                              {"b", io_test::sample(kiln::i64, {3})},
                                              {"c", io_test::sample(kiln::boolean, {4})}};
  io::save_safetensors(path, tensors, metadata);
  CHECK(io::load_safetensors_metadata(path) == metadata);

  const auto subset = io::load_safetensors(path, {"c", "a"});
  REQUIRE(subset.size() == 2);
  CHECK(same(subset.at("a"), tensors.at("a")));
  CHECK(same(subset.at("c"), tensors.at("c")));
  CHECK(io::load_safetensors(path, std::vector<std::string>{}).empty());
  CHECK_THROWS_WITH(io::load_safetensors(path, {"a", "x", "y"}),
                    Catch::StartsWith("[load_safetensors] ") &&
                        Catch::Contains("m.safetensors: no tensor named 'x', 'y'"));

  io::SafetensorsFile file(path);
  CHECK(file.metadata() == metadata);
  REQUIRE(file.tensors().size() == 3);
  CHECK(file.contains("b"));
  CHECK_FALSE(file.contains("z"));
  CHECK(file.info("a").shape == Shape{2, 2});
  CHECK(file.info("a").dtype == kiln::f32);
  CHECK(file.info("a").stored_dtype == "F32");
  CHECK(file.info("a").size_bytes == 16);
  CHECK_THROWS_WITH(file.info("z"), Catch::Contains("no tensor named 'z'"));
  CHECK(same(file.load("b"), tensors.at("b")));
  const auto all = file.load_all();
  CHECK(all.size() == 3);
  io::SafetensorsFile moved = std::move(file);
  CHECK(moved.path() == path);
  CHECK(same(moved.load("a"), tensors.at("a")));

  // No metadata: the key is absent, and loading it gives an empty map.
  io::save_safetensors(dir / "n.safetensors", tensors);
  CHECK(io::load_safetensors_metadata(dir / "n.safetensors").empty());
  const auto text = io_test::read_bytes(dir / "n.safetensors");
  CHECK(std::string(text.begin(), text.end()).find("__metadata__") == std::string::npos);
}

TEST_CASE("safetensors files have the reference layout", "[io]") {
  TempDir dir;
  const auto path = dir / "layout.safetensors";
  io::save_safetensors(path,
                       {{"z_bool", kiln::tensor(std::vector<bool>{true, false, true})},
                        {"a_i32", kiln::tensor({1, 2})},
                        {"b_f32", kiln::tensor({1.f})},
                        {"c_f64", kiln::tensor({1.0})},
                        {"d_i64", kiln::tensor(std::vector<std::int64_t>{1})},
                        {"a_f64", kiln::tensor({2.0})}},
                       {{"k", "v"}});
  const auto bytes = io_test::read_bytes(path);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<std::size_t>(i)];
  CHECK(n % 8 == 0);
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  // __metadata__ first, then by descending dtype alignment (I64, F64, F32, I32, BOOL) and name;
  // compact JSON padded with spaces.
  std::string expected =
      "{\"__metadata__\":{\"k\":\"v\"},"
      "\"d_i64\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
      "\"a_f64\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[8,16]},"
      "\"c_f64\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[16,24]},"
      "\"b_f32\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[24,28]},"
      "\"a_i32\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[28,36]},"
      "\"z_bool\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[36,39]}}";
  expected.append((8 - expected.size() % 8) % 8, ' ');
  CHECK(header == expected);
  CHECK(bytes.size() == 8 + n + 39);
  // Offsets in file order, as inspect lists them.
  std::vector<std::string> names;
  for (const auto& info : io::inspect(path)) names.push_back(info.name);
  CHECK(names == std::vector<std::string>{"d_i64", "a_f64", "c_f64", "b_f32", "a_i32", "z_bool"});
}

TEST_CASE("inspect reads headers of all three formats", "[io]") {
  TempDir dir;
  const std::map<std::string, Tensor> tensors{{"w", io_test::sample(kiln::f64, {3, 4})},
                                              {"flags", io_test::sample(kiln::boolean, {0})}};
  io::save_safetensors(dir / "t.safetensors", tensors);
  io::save_npz(dir / "t.npz", tensors, true);
  io::save_npy(dir / "weights.npy", tensors.at("w"));
  CHECK(io::detect_format(dir / "t.safetensors") == io::FileFormat::safetensors);
  CHECK(io::detect_format(dir / "t.npz") == io::FileFormat::npz);
  CHECK(io::detect_format(dir / "weights.npy") == io::FileFormat::npy);

  const auto st = io::inspect(dir / "t.safetensors");
  REQUIRE(st.size() == 2);
  CHECK(st[0].name == "w");
  CHECK(st[0].dtype == kiln::f64);
  CHECK(st[0].stored_dtype == "F64");
  CHECK(st[0].shape == Shape{3, 4});
  CHECK(st[0].size_bytes == 96);
  CHECK(st[1].name == "flags");
  CHECK(st[1].size_bytes == 0);

  const auto npz = io::inspect(dir / "t.npz");
  REQUIRE(npz.size() == 2);
  std::map<std::string, io::TensorInfo> by_name;
  for (const auto& info : npz) by_name[info.name] = info;
  CHECK(by_name.at("w").stored_dtype == "<f8");
  CHECK(by_name.at("w").shape == Shape{3, 4});
  CHECK(by_name.at("w").size_bytes == 96);
  CHECK(by_name.at("flags").stored_dtype == "|b1");
  CHECK(by_name.at("flags").dtype == kiln::boolean);

  const auto npy = io::inspect(dir / "weights.npy");
  REQUIRE(npy.size() == 1);
  CHECK(npy[0].name == "weights");
  CHECK(npy[0].shape == Shape{3, 4});

  io_test::write_bytes(dir / "junk.bin", {1, 2, 3});
  CHECK_THROWS_WITH(io::inspect(dir / "junk.bin"),
                    Catch::StartsWith("[inspect] ") && Catch::Contains("unknown file format"));
  CHECK_THROWS_WITH(io::inspect(dir / "missing.npy"),
                    Catch::StartsWith("[inspect] ") && Catch::Contains("cannot open the file"));
  CHECK_THROWS_WITH(io::inspect(dir.path()), Catch::Contains("not a regular file"));
}

TEST_CASE("Loading one tensor of a 4 GiB file costs that tensor's bytes", "[io]") {
  TempDir dir;
  const auto path = dir / "huge.safetensors";
  // A sparse file: a 4 GiB F32 tensor that is a hole on disk, then a small I64 tensor.
  const std::uint64_t big = std::uint64_t{1} << 32;
  std::string header = fmt::format(
      "{{\"big\":{{\"dtype\":\"F32\",\"shape\":[{}],\"data_offsets\":[0,{}]}},"
      "\"small\":{{\"dtype\":\"I64\",\"shape\":[3],\"data_offsets\":[{},{}]}}}}",
      big / 4, big, big, big + 24);
  header.append((8 - header.size() % 8) % 8, ' ');
  const std::vector<std::int64_t> small{7, -8, 9};
  {
    auto bytes = io_test::safetensors_bytes(header);
    io_test::write_bytes(path, bytes);
    std::filesystem::resize_file(path, bytes.size() + big);
    std::vector<std::uint8_t> tail;
    io_test::append_values(tail, small);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(bytes.size() + big));
    f.write(reinterpret_cast<const char*>(tail.data()), static_cast<std::streamsize>(tail.size()));
  }
  REQUIRE(std::filesystem::file_size(path) == 8 + header.size() + big + 24);
  CHECK(kiln::io::detail::MappedFile(path, "test").is_mapped());

  const auto before = kiln::memory_stats().live_bytes;
  const auto loaded = io::load_safetensors(path, {"small"});
  CHECK(loaded.at("small").to_vector<std::int64_t>() == small);
  CHECK(kiln::memory_stats().live_bytes - before < 4096);

  io::SafetensorsFile file(path);
  CHECK(file.info("big").size_bytes == big);
  CHECK(file.info("big").shape == Shape{static_cast<std::int64_t>(big / 4)});
  CHECK(file.load("small").to_vector<std::int64_t>() == small);
  CHECK(io::inspect(path).size() == 2);
}

TEST_CASE("Small files are read, large ones mapped", "[io]") {
  TempDir dir;
  io::save_npy(dir / "small.npy", kiln::zeros({10}));
  io::save_npy(dir / "large.npy", kiln::zeros({1 << 19}));
  CHECK_FALSE(kiln::io::detail::MappedFile(dir / "small.npy", "test").is_mapped());
  CHECK(kiln::io::detail::MappedFile(dir / "large.npy", "test").is_mapped());
  CHECK(io::load_npy(dir / "large.npy").shape() == Shape{1 << 19});
  io::save_npz(dir / "large.npz", {{"x", kiln::ones({1 << 19})}});
  CHECK(kiln::sum(io::load_npz(dir / "large.npz").at("x")).item<float>() == 524288.f);
}

namespace {

/// start_save_and_stop (save_child.hpp) for a save of `tensors` to `path`.
pid_t start_save_and_stop(const std::filesystem::path& path,
                          const std::map<std::string, Tensor>& tensors, bool npz) {
  return io_test::start_save_and_stop([&] {
    if (npz)
      io::save_npz(path, tensors);
    else
      io::save_safetensors(path, tensors);
  });
}

}  // namespace

TEST_CASE("A process killed while saving leaves the old file loadable", "[io]") {
  TempDir dir;
  const Tensor old_value = io_test::sample(kiln::f32, {4});
  const std::map<std::string, Tensor> big{{"w", kiln::ones({1 << 22})}, {"b", kiln::ones({7})}};
  for (bool npz : {false, true}) {
    INFO((npz ? "npz" : "safetensors"));
    const auto path = dir / (npz ? "w.npz" : "w.safetensors");
    if (npz)
      io::save_npz(path, {{"w", old_value}});
    else
      io::save_safetensors(path, {{"w", old_value}});
    const pid_t child = start_save_and_stop(path, big, npz);
    // The child is in the middle of writing its temporary file.
    int temps = 0;
    for (const auto& name : dir.entries())
      if (name.rfind(fmt::format(".{}.tmp-", path.filename().string()), 0) == 0) ++temps;
    CHECK(temps == 1);
    REQUIRE(::kill(child, SIGKILL) == 0);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFSIGNALED(status));
    const auto loaded = npz ? io::load_npz(path) : io::load_safetensors(path);
    REQUIRE(loaded.size() == 1);
    CHECK(same(loaded.at("w"), old_value));
    // The next save replaces the file.
    if (npz)
      io::save_npz(path, big);
    else
      io::save_safetensors(path, big);
    CHECK((npz ? io::load_npz(path) : io::load_safetensors(path)).size() == 2);
  }
}

TEST_CASE("A failed save changes nothing and leaves no temporary file", "[io]") {
  TempDir dir;
  const auto path = dir / "keep.safetensors";
  const Tensor value = io_test::sample(kiln::i32, {3});
  io::save_safetensors(path, {{"v", value}});
  const auto before = io_test::read_bytes(path);

  CHECK_THROWS_WITH(io::save_safetensors(path, {{"v", Tensor()}}),
                    "[save_safetensors] " + path.string() + ": tensor 'v' is undefined");
  CHECK_THROWS_WITH(io::save_safetensors(path, {{"__metadata__", value}}),
                    Catch::Contains("'__metadata__' cannot be a tensor name"));
  CHECK_THROWS_WITH(io::save_safetensors(path, {{"", value}}),
                    Catch::Contains("'' cannot be a tensor name"));
  CHECK_THROWS_WITH(io::save_safetensors(path, {{"\xff", value}}),
                    Catch::Contains("not valid UTF-8"));
  CHECK_THROWS_WITH(io::save_safetensors(path, {{"v", value}}, {{"k", "\xc3"}}),
                    Catch::Contains("metadata entries must be valid UTF-8"));
  CHECK_THROWS_WITH(io::save_npz(dir / "x.npz", {{"../escape", value}}),
                    Catch::Contains("'../escape' cannot be an archive member name"));
  CHECK_THROWS_WITH(io::save_npz(dir / "x.npz", {{"/abs", value}}),
                    Catch::Contains("cannot be an archive member name"));
  CHECK_THROWS_WITH(io::save_npy(dir / "x.npy", Tensor()), Catch::Contains("undefined"));
  // The target is a folder: the rename fails and the temporary file is removed.
  std::filesystem::create_directory(dir / "folder.npy");
  std::filesystem::create_directory(dir / "folder.npy" / "inside");
  CHECK_THROWS_WITH(io::save_npy(dir / "folder.npy", value),
                    Catch::StartsWith("[save_npy] ") &&
                        Catch::Contains("cannot rename the temporary file over the target"));
  CHECK_THROWS_WITH(io::save_npy(dir / "no" / "such" / "folder.npy", value),
                    Catch::Contains("cannot create a temporary file in its folder"));

  CHECK(io_test::read_bytes(path) == before);
  auto names = dir.entries();
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"folder.npy", "keep.safetensors"});
}

TEST_CASE("Saves and loads leave no memory behind", "[io]") {
  TempDir dir;
  const std::map<std::string, Tensor> tensors{{"a", kiln::ones({64, 64})},
                                              {"b", io_test::sample(kiln::i64, {10})}};
  const auto path = dir / "r.safetensors";
  const auto stats = kiln::memory_stats();
  for (int i = 0; i < 20; ++i) {
    io::save_safetensors(path, tensors);
    io::save_npz(dir / "r.npz", tensors, i % 2 == 0);
    (void)io::load_safetensors(path);
    (void)io::load_npz(dir / "r.npz");
    CHECK_THROWS(io::load_npy(path));
  }
  CHECK(kiln::memory_stats().live_tensors == stats.live_tensors);
  CHECK(kiln::memory_stats().live_bytes == stats.live_bytes);
}
