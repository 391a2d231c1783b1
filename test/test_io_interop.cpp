// io: interop with NumPy and the reference safetensors package. Fixtures written by
// test/data/make_fixtures.py load with the values hard-coded here; when the private Python
// environment exists (scripts/python-env.sh), NumPy and safetensors must read kiln's files.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <kiln/kiln.hpp>
#include <limits>

#include "io_test_support.hpp"

using io_test::TempDir;
using kiln::Shape;
using kiln::Tensor;
namespace io = kiln::io;

namespace {

std::filesystem::path fixture(const std::string& name) {
  return std::filesystem::path(test_paths::data_dir()) / name;
}

template <class T>
void check_values(const Tensor& t, kiln::DType dtype, const Shape& shape,
                  const std::vector<T>& values) {
  CHECK(t.dtype() == dtype);
  CHECK(t.shape() == shape);
  CHECK(t.to_vector<T>() == values);
}

const float inf = std::numeric_limits<float>::infinity();

/// t, which must have dtype `stored` (f16 or bf16: files keep them), cast to f32 to compare.
Tensor widened(const Tensor& t, kiln::DType stored) {
  CHECK(t.dtype() == stored);
  return kiln::cast(t, kiln::f32);
}

}  // namespace

TEST_CASE("NumPy's .npy files load", "[io]") {
  check_values<float>(io::load_npy(fixture("np_f32.npy")), kiln::f32, {2, 3},
                      {-2.5f, -1.5f, -.5f, .5f, 1.5f, 2.5f});
  check_values<double>(io::load_npy(fixture("np_f64.npy")), kiln::f64, {4}, {0, .25, .5, .75});
  check_values<std::int32_t>(io::load_npy(fixture("np_i32.npy")), kiln::i32, {3, 2},
                             {-3, -2, -1, 0, 1, 2});
  check_values<std::int64_t>(io::load_npy(fixture("np_i64.npy")), kiln::i64, {3},
                             {0, 1000000000000, 2000000000000});
  check_values<bool>(io::load_npy(fixture("np_bool.npy")), kiln::boolean, {5},
                     {true, false, true, false, true});
  check_values<float>(io::load_npy(fixture("np_scalar.npy")), kiln::f32, {}, {3.5f});
  check_values<double>(io::load_npy(fixture("np_empty.npy")), kiln::f64, {0, 3}, {});
  check_values<float>(widened(io::load_npy(fixture("np_f16.npy")), kiln::f16), kiln::f32, {5},
                      {.5f, -2.f, 65504.f, std::ldexp(1.f, -24), inf});
  check_values<float>(io::load_npy(fixture("np_f32_big_endian.npy")), kiln::f32, {4},
                      {.5f, 1.5f, 2.5f, 3.5f});
  check_values<std::int64_t>(io::load_npy(fixture("np_i64_big_endian.npy")), kiln::i64, {3},
                             {-1, 0, 1});
  std::vector<double> counting(24);
  for (int i = 0; i < 24; ++i) counting[static_cast<std::size_t>(i)] = i;
  check_values<double>(io::load_npy(fixture("np_f64_fortran.npy")), kiln::f64, {2, 3, 4}, counting);
  check_values<std::int32_t>(io::load_npy(fixture("np_i32_v2.npy")), kiln::i32, {4}, {0, 1, 2, 3});
  check_values<float>(io::load_npy(fixture("np_f32_v3.npy")), kiln::f32, {3}, {0, 1, 2});

  const auto info = io::inspect(fixture("np_f32_big_endian.npy"));
  REQUIRE(info.size() == 1);
  CHECK(info[0].stored_dtype == ">f4");
  CHECK(info[0].dtype == kiln::f32);
}

TEST_CASE("NumPy's .npz archives load: stored and deflated members", "[io]") {
  const auto mixed = io::load_npz(fixture("np_mixed.npz"));
  REQUIRE(mixed.size() == 5);
  check_values<float>(mixed.at("stored"), kiln::f32, {2, 3}, {0, 1, 2, 3, 4, 5});
  std::vector<std::int64_t> hundred(100);
  for (int i = 0; i < 100; ++i) hundred[static_cast<std::size_t>(i)] = i;
  check_values<std::int64_t>(mixed.at("deflated"), kiln::i64, {100}, hundred);
  check_values<double>(mixed.at("layer1/kernel"), kiln::f64, {2, 2}, {0, 1, 2, 3});
  // Fortran order (decoded in place) and big-endian half (decoded through a copy) in members.
  check_values<float>(mixed.at("fortran"), kiln::f32, {2, 3}, {0, 1, 2, 3, 4, 5});
  check_values<float>(widened(mixed.at("half"), kiln::f16), kiln::f32, {2}, {1.5f, -.25f});

  const auto savez = io::load_npz(fixture("np_savez.npz"));
  check_values<float>(savez.at("a"), kiln::f32, {2, 3}, {-2.5f, -1.5f, -.5f, .5f, 1.5f, 2.5f});
  check_values<bool>(savez.at("b"), kiln::boolean, {5}, {true, false, true, false, true});
  const auto compressed = io::load_npz(fixture("np_savez_compressed.npz"));
  REQUIRE(compressed.size() == 3);
  check_values<std::int64_t>(compressed.at("c"), kiln::i64, {3}, {0, 1000000000000, 2000000000000});
  check_values<float>(compressed.at("s"), kiln::f32, {}, {3.5f});
  CHECK(io::inspect(fixture("np_savez_compressed.npz")).size() == 3);
}

TEST_CASE("The reference safetensors package's files load, F16 and BF16 as f16 and bf16", "[io]") {
  const auto all = io::load_safetensors(fixture("st_all.safetensors"));
  REQUIRE(all.size() == 7);
  check_values<float>(all.at("f32"), kiln::f32, {2, 3}, {-2.5f, -1.5f, -.5f, .5f, 1.5f, 2.5f});
  check_values<std::int32_t>(all.at("i32"), kiln::i32, {3, 2}, {-3, -2, -1, 0, 1, 2});
  check_values<bool>(all.at("bool"), kiln::boolean, {5}, {true, false, true, false, true});
  check_values<float>(all.at("scalar"), kiln::f32, {}, {3.5f});
  check_values<double>(all.at("empty"), kiln::f64, {0, 3}, {});
  CHECK(io::load_safetensors_metadata(fixture("st_all.safetensors")) ==
        io::Metadata{{"format", "np"}, {"source", "make_fixtures.py"}});

  const auto half = io::load_safetensors(fixture("st_half.safetensors"));
  check_values<float>(widened(half.at("half"), kiln::f16), kiln::f32, {2, 3},
                      {1.f, -.5f, 65504.f, std::ldexp(1.f, -24), -inf, 0.f});
  check_values<float>(widened(half.at("brain"), kiln::bf16), kiln::f32, {4},
                      {1.f, -3.5f, .15625f, 256.f});
  check_values<float>(half.at("weights"), kiln::f32, {4}, {0, 1, 2, 3});
  io::SafetensorsFile file(fixture("st_half.safetensors"));
  CHECK(file.metadata() == io::Metadata{{"dtype_note", "half and bfloat16"}});
  CHECK(file.info("half").stored_dtype == "F16");
  CHECK(file.info("half").dtype == kiln::f16);
  CHECK(file.info("half").size_bytes == 12);
  CHECK(file.info("brain").stored_dtype == "BF16");
}

TEST_CASE("F16 and BF16 conversion covers every class of value", "[io]") {
  TempDir dir;
  // F16: zero, -zero, smallest subnormal, largest subnormal, smallest normal, 1, max, inf, NaN.
  const std::vector<std::uint16_t> half{0x0000, 0x8000, 0x0001, 0x03ff, 0x0400,
                                        0x3c00, 0x7bff, 0xfc00, 0x7e00};
  const std::vector<std::uint16_t> brain{0x3f80, 0xc060, 0x0001, 0x7f80, 0x7fc0};
  std::vector<std::uint8_t> data;
  io_test::append_values(data, half);
  io_test::append_values(data, brain);
  std::string header = R"({"h":{"dtype":"F16","shape":[9],"data_offsets":[0,18]},)"
                       R"("b":{"dtype":"BF16","shape":[5],"data_offsets":[18,28]}})";
  io_test::write_bytes(dir / "h.safetensors", io_test::safetensors_bytes(header, data));
  const auto loaded = io::load_safetensors(dir / "h.safetensors");
  const auto h = widened(loaded.at("h"), kiln::f16).to_vector<float>();
  CHECK(h[0] == 0.f);
  CHECK(std::signbit(h[1]));
  CHECK(h[2] == std::ldexp(1.f, -24));
  CHECK(h[3] == std::ldexp(1023.f, -24));
  CHECK(h[4] == std::ldexp(1.f, -14));
  CHECK(h[5] == 1.f);
  CHECK(h[6] == 65504.f);
  CHECK(h[7] == -inf);
  CHECK(std::isnan(h[8]));
  const auto b = widened(loaded.at("b"), kiln::bf16).to_vector<float>();
  CHECK(b[0] == 1.f);
  CHECK(b[1] == -3.5f);
  CHECK(b[2] == std::ldexp(1.f, -133));
  CHECK(b[3] == inf);
  CHECK(std::isnan(b[4]));
}

TEST_CASE("NumPy and the reference safetensors package read kiln's files", "[io]") {
  // The private environment made by scripts/python-env.sh (scripts/test.sh creates it).
  const std::string python = io_test::test_python("numpy, safetensors");
  if (python.empty()) {
    WARN(
        "skipped: no Python with numpy and safetensors (run scripts/python-env.sh, or set "
        "KILN_PYTHON)");
    return;
  }
  TempDir dir;
  std::map<std::string, Tensor> tensors;
  int dtype_index = 0;
  const char* names[] = {"f32", "f64",  "i32", "i64", "bool", "i8", "u8",
                         "f16", "bf16", "i16", "u16", "u32",  "u64"};
  for (auto dtype : io_test::all_dtypes) {
    int k = 0;
    for (const auto& shape : io_test::round_trip_shapes) {
      const std::string name = fmt::format("{}/{}", names[dtype_index], k++);
      tensors[name] = io_test::sample(dtype, shape);
      io::save_npy(dir / fmt::format("kiln_{}_{}.npy", names[dtype_index], k - 1), tensors[name]);
    }
    ++dtype_index;
  }
  io::save_npz(dir / "kiln_stored.npz", tensors, false);
  io::save_npz(dir / "kiln_compressed.npz", tensors, true);
  io::save_safetensors(dir / "kiln_all.safetensors", tensors, {{"format", "np"}});
  const std::string command = fmt::format("'{}' '{}/check_kiln_files.py' '{}'", python,
                                          test_paths::data_dir(), dir.path().string());
  const int status = std::system(command.c_str());
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
