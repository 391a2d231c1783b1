// io: bad and hostile files. Every case must throw kiln::Error "[op] <path>: <problem>", with
// no crash, no leak (the sanitizer build checks) and no tensor left alive.
#include <catch2/catch.hpp>
#include <kiln/kiln.hpp>

#include "io_test_support.hpp"
#include "zip_builder.hpp"

using io_test::TempDir;
namespace io = kiln::io;

namespace {

using Bytes = std::vector<std::uint8_t>;

enum class Loader { safetensors, npy, npz };

/// Writes `bytes` to a file, loads it with `loader` and checks the error names the operation,
/// the file and contains `problem`; also checks inspect() rejects it and nothing leaks.
void expect_error(const Bytes& bytes, Loader loader, const std::string& problem,
                  bool inspect_too = true) {
  TempDir dir;
  const char* ext = loader == Loader::safetensors ? "bad.safetensors"
                    : loader == Loader::npy       ? "bad.npy"
                                                  : "bad.npz";
  const auto path = dir / ext;
  io_test::write_bytes(path, bytes);
  const auto before = kiln::memory_stats();
  const char* op = loader == Loader::safetensors ? "load_safetensors"
                   : loader == Loader::npy       ? "load_npy"
                                                 : "load_npz";
  const std::string prefix = fmt::format("[{}] {}", op, path.string());
  try {
    if (loader == Loader::safetensors) (void)io::load_safetensors(path);
    if (loader == Loader::npy) (void)io::load_npy(path);
    if (loader == Loader::npz) (void)io::load_npz(path);
    FAIL("no error for a file that should give: " << problem);
  } catch (const kiln::Error& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.rfind(prefix, 0) == 0);
    CHECK(message.find(problem) != std::string::npos);
  }
  if (inspect_too) CHECK_THROWS_AS(io::inspect(path), kiln::Error);
  CHECK(kiln::memory_stats().live_tensors == before.live_tensors);
  CHECK(kiln::memory_stats().live_bytes == before.live_bytes);
}

Bytes st(const std::string& header, const Bytes& data = {}) {
  return io_test::safetensors_bytes(header, data);
}

Bytes zeros(std::size_t n) { return Bytes(n, 0); }

}  // namespace

TEST_CASE("safetensors: truncated files, bad lengths, bad magic", "[io]") {
  expect_error({}, Loader::safetensors, "file has 0 bytes, too few", false);
  expect_error({8, 0, 0}, Loader::safetensors, "file has 3 bytes, too few", false);
  Bytes past{100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
  expect_error(past, Loader::safetensors, "header length 100 runs past the end of the file", false);
  Bytes huge{0, 0, 0, 0, 0, 0, 0, 0x80, '{', '}'};
  expect_error(huge, Loader::safetensors, "exceeds the limit of 100000000 bytes", false);
  expect_error(st("[1,2]   "), Loader::safetensors, "does not start with '{'", false);
  expect_error(st("  {}    "), Loader::safetensors, "does not start with '{'", false);
  // A whole file cut short: the last tensor runs past the end of the data.
  const std::string header = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  expect_error(st(header, zeros(10)), Loader::safetensors,
               "tensor 'a' has data_offsets [0,16] past the end of the data (10 bytes)");
  expect_error(st(header.substr(0, 30)), Loader::safetensors, "header is not valid JSON");
}

TEST_CASE("safetensors: malformed, non-UTF-8 and duplicate-key JSON", "[io]") {
  expect_error(st(R"({"a":{"dtype":"F32",}})"), Loader::safetensors, "header is not valid JSON");
  expect_error(st("{\"a\xff\":{}}"), Loader::safetensors, "header is not valid UTF-8");
  expect_error(st("{\"\xc0\xaf\":1}"), Loader::safetensors, "header is not valid UTF-8");
  expect_error(st("{\"\xed\xa0\x80\":1}"), Loader::safetensors, "header is not valid UTF-8");
  expect_error(st(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                  R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                  zeros(8)),
               Loader::safetensors, "header has the key 'a' twice");
  expect_error(
      st(R"({"a":{"dtype":"F32","dtype":"I32","shape":[1],"data_offsets":[0,4]}})", zeros(4)),
      Loader::safetensors, "header has the key 'dtype' twice");
  expect_error(st(R"({"a":[1,2]})"), Loader::safetensors, "header entry 'a' is not an object");
  expect_error(st(R"({"a":{"dtype":"F32","shape":[1]}})"), Loader::safetensors,
               "tensor 'a' needs the fields dtype, shape and data_offsets");
  expect_error(st(R"({"a":{"dtype":5,"shape":[1],"data_offsets":[0,4]}})", zeros(4)),
               Loader::safetensors, "non-string dtype");
  expect_error(st(R"({"__metadata__":{"k":1}})"), Loader::safetensors,
               "__metadata__ value of 'k' is not a string");
  expect_error(st(R"({"__metadata__":[1]})"), Loader::safetensors, "__metadata__ is not an object");
  // Deep nesting is refused before parsing (more in test_io_hostile_paths.cpp).
  expect_error(st("{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}"),
               Loader::safetensors, "header nests deeper than 64 levels");
}

TEST_CASE("safetensors: dtypes, shapes and sizes that disagree", "[io]") {
  auto one = [](const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return fmt::format(R"({{"t":{{"dtype":"{}","shape":{},"data_offsets":{}}}}})", dtype, shape,
                       offsets);
  };
  expect_error(st(one("F99", "[1]", "[0,4]"), zeros(4)), Loader::safetensors,
               "tensor 't' has unknown dtype 'F99'");
  expect_error(st(one("F32", "[-1]", "[0,4]"), zeros(4)), Loader::safetensors,
               "has shape [-1] with a dimension that is not a non-negative integer");
  expect_error(st(one("F32", "[2.0]", "[0,8]"), zeros(8)), Loader::safetensors,
               "not a non-negative integer");
  expect_error(st(one("F32", "[\"2\"]", "[0,8]"), zeros(8)), Loader::safetensors,
               "not a non-negative integer");
  expect_error(st(one("F32", "3", "[0,12]"), zeros(12)), Loader::safetensors,
               "shape that is not a list of integers");
  expect_error(st(one("F32", "[1,1,1,1,1,1,1,1,1]", "[0,4]"), zeros(4)), Loader::safetensors,
               "has rank 9, more than kiln's maximum rank 8");
  expect_error(st(one("F32", "[4294967296,4294967296]", "[0,4]"), zeros(4)), Loader::safetensors,
               "the element count overflows 64 bits");
  // Empty, but the other dims' product (a stride) overflows (found by fuzz_npy).
  expect_error(st(one("F32", "[0,4294967296,4294967296]", "[0,0]")), Loader::safetensors,
               "the element count overflows 64 bits");
  expect_error(st(one("F32", "[99999999999999999999]", "[0,4]"), zeros(4)), Loader::safetensors,
               "not a non-negative integer");
  expect_error(st(one("F32", "[2,2]", "[0,12]"), zeros(12)), Loader::safetensors,
               "tensor 't' has data_offsets [0,12] (12 bytes) but F32 [2,2] needs 16 bytes");
  expect_error(st(one("F32", "[2]", "[8,0]"), zeros(8)), Loader::safetensors,
               "data_offsets [8,0] that end before they begin");
  expect_error(st(one("F32", "[2]", "[0]"), zeros(8)), Loader::safetensors,
               "expected [begin, end] non-negative integers");
  expect_error(st(one("F32", "[2]", "[0,-8]"), zeros(8)), Loader::safetensors,
               "expected [begin, end]");
  expect_error(st(one("F4", "[3]", "[0,2]"), zeros(2)), Loader::safetensors,
               "3 values of F4 do not fill a whole number of bytes");
  // A huge declared size in a tiny file is caught before anything is allocated.
  expect_error(st(one("F64", "[1152921504606846976]", "[0,9223372036854775808]"), zeros(16)),
               Loader::safetensors, "past the end of the data (16 bytes)");
}

TEST_CASE("safetensors: offsets that overlap, leave gaps or miss the end", "[io]") {
  const auto two = [](const std::string& a, const std::string& b) {
    return fmt::format(R"({{"a":{{"dtype":"F32","shape":[2],"data_offsets":{}}},)"
                       R"("b":{{"dtype":"F32","shape":[2],"data_offsets":{}}}}})",
                       a, b);
  };
  expect_error(st(two("[0,8]", "[4,12]"), zeros(12)), Loader::safetensors,
               "tensor 'b' (data_offsets [4,12]) overlaps tensor 'a', which ends at 8");
  expect_error(st(two("[0,8]", "[0,8]"), zeros(8)), Loader::safetensors, "overlaps tensor 'a'");
  expect_error(st(two("[0,8]", "[12,20]"), zeros(20)), Loader::safetensors,
               "tensor 'b' starts at 12, leaving a gap after byte 8 of the data");
  expect_error(st(two("[4,12]", "[12,20]"), zeros(20)), Loader::safetensors,
               "tensor 'a' starts at 4, leaving a gap after byte 0");
  expect_error(st(two("[0,8]", "[8,16]"), zeros(20)), Loader::safetensors,
               "the tensors cover 16 bytes of data, but the file holds 20 bytes after the header");
  expect_error(st(two("[0,8]", "[18446744073709551608,0]"), zeros(16)), Loader::safetensors,
               "end before they begin");
}

TEST_CASE("safetensors: valid oddities load", "[io]") {
  TempDir dir;
  // Trailing spaces, null metadata, zero-size tensors sharing an offset, any key order, an
  // element type kiln cannot load (listed by inspect, loadable around).
  const std::string header =
      R"({"z":{"dtype":"F32","shape":[0,5],"data_offsets":[4,4]},)"
      R"("__metadata__":null,"u":{"dtype":"F8_E8M0","shape":[4],"data_offsets":[4,8]},)"
      R"("e":{"dtype":"I64","shape":[0],"data_offsets":[4,4]},)"
      R"("a":{"shape":[],"data_offsets":[0,4],"dtype":"I32","extra":"ignored"}})"
      "        ";
  Bytes data{7, 0, 0, 0, 1, 2, 3, 4};
  io_test::write_bytes(dir / "odd.safetensors", st(header, data));
  const auto path = dir / "odd.safetensors";
  const auto infos = io::inspect(path);
  REQUIRE(infos.size() == 4);
  CHECK(infos[0].name == "a");
  CHECK(infos[3].name == "u");
  CHECK_FALSE(infos[3].dtype.has_value());
  CHECK(infos[3].stored_dtype == "F8_E8M0");
  const auto some = io::load_safetensors(path, {"a", "z", "e"});
  CHECK(some.at("a").item<std::int32_t>() == 7);
  CHECK(some.at("z").shape() == kiln::Shape{0, 5});
  CHECK_THROWS_WITH(io::load_safetensors(path),
                    Catch::Contains("tensor 'u' has dtype F8_E8M0, which kiln cannot load"));
  CHECK(io::load_safetensors_metadata(path).empty());
  // BOOL bytes other than 0 and 1 load as true.
  io_test::write_bytes(
      dir / "b.safetensors",
      st(R"({"b":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", Bytes{0, 2, 255}));
  CHECK(io::load_safetensors(dir / "b.safetensors").at("b").to_vector<bool>() ==
        std::vector<bool>{false, true, true});
}

// ------------------------------------------------------------------------------------ npy

namespace {
Bytes npy(const std::string& dict, const Bytes& data = {}, int major = 1) {
  return io_test::npy_bytes(dict, data, major);
}
std::string dict(const std::string& descr, const std::string& shape, bool fortran = false) {
  return fmt::format("{{'descr': '{}', 'fortran_order': {}, 'shape': {}, }}", descr,
                     fortran ? "True" : "False", shape);
}
}  // namespace

TEST_CASE("npy: bad magic, versions and header lengths", "[io]") {
  expect_error({}, Loader::npy, "not a .npy file", false);
  expect_error({'N', 'U', 'M', 'P', 'Y', 1, 0}, Loader::npy, "not a .npy file", false);
  expect_error({0x93, 'N', 'U', 'M', 'P', 'Y', 1}, Loader::npy, "truncated .npy file (7 bytes)",
               false);
  expect_error({0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 10, 0}, Loader::npy,
               "truncated .npy file (10 bytes)", false);
  expect_error({0x93, 'N', 'U', 'M', 'P', 'Y', 4, 0, 10, 0}, Loader::npy,
               "unsupported .npy format version 4.0");
  expect_error({0x93, 'N', 'U', 'M', 'P', 'Y', 1, 1, 10, 0}, Loader::npy,
               "unsupported .npy format version 1.1");
  expect_error({0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 200, 0, '{'}, Loader::npy,
               ".npy header of 210 bytes runs past the end of the data (11 bytes)");
  expect_error({0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0, 0, 0, 0x40}, Loader::npy,
               "exceeds the limit of 1048576 bytes");
}

TEST_CASE("npy: header dicts are validated strictly", "[io]") {
  const Bytes four = zeros(4);
  expect_error(npy("{'descr': '<f4', 'shape': (1,), }", four), Loader::npy,
               "must have the keys 'descr', 'fortran_order' and 'shape'");
  expect_error(npy(dict("<f4", "(1,)").replace(1, 0, "'x': 1, "), four), Loader::npy,
               "unexpected key 'x'");
  expect_error(npy("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", four),
               Loader::npy, "the key 'descr' appears twice");
  expect_error(
      npy(dict("<c8", "(2,)"), four), Loader::npy,
      ".npy dtype '<c8' is not supported (kiln reads f2, f4, f8, i1, i2, i4, i8, u1, u2, u4, u8, "
      "b1, and V2 as bfloat16)");
  expect_error(npy(dict("|f4", "(1,)"), four), Loader::npy,
               "uses '|' (no byte order) for a multi-byte type");
  expect_error(npy(dict("f4", "(1,)"), four), Loader::npy, "is not a NumPy type string");
  expect_error(npy(dict("!f4", "(1,)"), four), Loader::npy, "has no byte-order mark");
  expect_error(npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", four),
               Loader::npy, "structured dtypes are not supported");
  expect_error(npy(dict("<f4", "(1)"), four), Loader::npy,
               "'shape' is not a tuple (a one-element tuple needs a trailing comma)");
  expect_error(npy(dict("<f4", "(-1,)"), four), Loader::npy, "negative dimension in 'shape'");
  expect_error(npy(dict("<f4", "(01,)"), four), Loader::npy, "dimension with a leading zero");
  expect_error(npy(dict("<f4", "(1.0,)"), four), Loader::npy, "expected ',' or ')' in 'shape'");
  expect_error(npy(dict("<f4", "(99999999999999999999,)"), four), Loader::npy,
               "dimension too large");
  expect_error(npy(dict("<f4", "(4294967296, 4294967296)"), four), Loader::npy,
               "the element count overflows 64 bits");
  expect_error(npy(dict("<f2", "(44074, 0, 694, 2, 67, 9696, 6, 39949672963)")), Loader::npy,
               "the element count overflows 64 bits");
  expect_error(npy(dict("<f4", "(1,1,1,1,1,1,1,1,1)"), four), Loader::npy,
               "more than kiln's maximum rank 8");
  expect_error(npy("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,)}", four), Loader::npy,
               "'fortran_order' must be True or False");
  expect_error(npy("{'descr': '<\\x66', 'fortran_order': False, 'shape': (1,)}", four), Loader::npy,
               "escape sequences are not supported");
  expect_error(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x", four), Loader::npy,
               "unexpected text after the closing '}'");
  expect_error(npy("{'descr': '<f4' 'fortran_order': False, 'shape': (1,)}", four), Loader::npy,
               "expected ',' or '}' after a value");
  expect_error(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,", four), Loader::npy,
               "the header ends too early");
  expect_error(npy("['descr']", four), Loader::npy, "expected '{'");
}

TEST_CASE("npy: data sizes that disagree with the header", "[io]") {
  expect_error(npy(dict("<f4", "(2, 3)"), zeros(20)), Loader::npy,
               ".npy data is 20 bytes, but '<f4' (2, 3) needs 24 bytes (truncated file)");
  expect_error(npy(dict("<f4", "(2,)"), zeros(12)), Loader::npy,
               ".npy data is 12 bytes, but '<f4' (2,) needs 8 bytes");
  // Huge declared sizes are compared with the file before anything is allocated.
  expect_error(npy(dict("<f8", "(1152921504606846975,)"), zeros(8)), Loader::npy,
               "needs 9223372036854775800 bytes (truncated file)");
  expect_error(npy(dict("<f8", "(4611686018427387904,)"), zeros(8)), Loader::npy, "is too large");
}

TEST_CASE("npy: big-endian, Fortran order, version 2.0 and odd spellings load correctly", "[io]") {
  TempDir dir;
  auto load = [&](const Bytes& bytes) {
    io_test::write_bytes(dir / "x.npy", bytes);
    return io::load_npy(dir / "x.npy");
  };
  CHECK(load(npy(dict(">i4", "(2,)"), Bytes{0, 0, 1, 2, 0xff, 0xff, 0xff, 0xfe}))
            .to_vector<std::int32_t>() == std::vector<std::int32_t>{258, -2});
  Bytes fortran;
  io_test::append_values(fortran, std::vector<float>{1, 4, 2, 5, 3, 6});
  const auto f = load(npy(dict("<f4", "(2, 3)", true), fortran));
  CHECK(f.shape() == kiln::Shape{2, 3});
  CHECK(f.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  Bytes v2;
  io_test::append_values(v2, std::vector<std::int64_t>{-1, 5});
  CHECK(load(npy("{\"descr\":\"<i8\",\"shape\":(2L,),\"fortran_order\":False}", v2, 2))
            .to_vector<std::int64_t>() == std::vector<std::int64_t>{-1, 5});
  CHECK(load(npy(dict("|b1", "()"), Bytes{3})).item<bool>());
  CHECK(kiln::cast(load(npy(dict("<f2", "(2,)"), Bytes{0x00, 0x3c, 0x00, 0xc0})), kiln::f32)
            .to_vector<float>() == std::vector<float>{1.f, -2.f});
  CHECK(kiln::cast(load(npy(dict(">f2", "(1,)"), Bytes{0x7b, 0xff})), kiln::f32).item<float>() ==
        65504.f);
  CHECK(load(npy(dict(">u8", "(1,)"), Bytes{0xff, 0, 0, 0, 0, 0, 0, 1})).item<std::uint64_t>() ==
        0xff00000000000001ULL);
  CHECK(load(npy(dict("<f4", "(0, 3)", true))).shape() == kiln::Shape{0, 3});
  expect_error(
      npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), '\xff': 1}", zeros(4), 3),
      Loader::npy, ".npy 3.0 header is not valid UTF-8");
}

// ------------------------------------------------------------------------------------ npz

namespace {
Bytes small_npy() {
  Bytes data;
  io_test::append_values(data, std::vector<float>{1, 2, 3});
  return npy(dict("<f4", "(3,)"), data);
}
}  // namespace

TEST_CASE("npz: bad CRCs are detected in stored and deflated members", "[io]") {
  for (bool deflate : {false, true}) {
    INFO((deflate ? "deflated" : "stored"));
    io_test::ZipMember good{"good.npy", small_npy(), deflate};
    io_test::ZipMember bad{"bad.npy", small_npy(), deflate, true};
    expect_error(io_test::make_zip({good, bad}), Loader::npz,
                 "(member 'bad.npy'): the member is corrupt: CRC error", false);
    TempDir dir;
    io_test::write_bytes(dir / "ok.npz", io_test::make_zip({good}));
    CHECK(io::load_npz(dir / "ok.npz").at("good").to_vector<float>() ==
          std::vector<float>{1, 2, 3});
  }
  // A flipped byte inside deflated data.
  io_test::ZipMember member{"x.npy", small_npy(), true};
  auto zip = io_test::make_zip({member});
  zip[30 + 5 + 20] ^= 0x55;
  expect_error(zip, Loader::npz, "(member 'x.npy')", false);
}

TEST_CASE("npz: unsafe, duplicate and non-.npy member names are rejected", "[io]") {
  for (const char* name :
       {"../x.npy", "/abs.npy", "a/../../b.npy", "a//b.npy", "./a.npy", "a\\b.npy", "C:x.npy"})
    expect_error(io_test::make_zip({{name, small_npy()}}), Loader::npz,
                 fmt::format("unsafe member name '{}'", name));
  expect_error(io_test::make_zip({{"notes.txt", small_npy()}}), Loader::npz,
               "member 'notes.txt' is not a .npy file");
  expect_error(io_test::make_zip({{".npy", small_npy()}}), Loader::npz, "is not a .npy file");
  expect_error(io_test::make_zip({{"a.npy", small_npy()}, {"a.npy", small_npy(), true}}),
               Loader::npz, "the archive has two members with the same name");
  TempDir dir;
  io_test::write_bytes(dir / "nested.npz", io_test::make_zip({{"layer1/kernel.npy", small_npy()}}));
  CHECK(io::load_npz(dir / "nested.npz").count("layer1/kernel") == 1);
}

TEST_CASE("npz: broken archives and members", "[io]") {
  const auto good = io_test::make_zip({{"a.npy", small_npy()}, {"b.npy", small_npy(), true}});
  expect_error(Bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(good.size() / 2)),
               Loader::npz, "not a zip archive (no end-of-central-directory record)", false);
  expect_error({'P', 'K', 3, 4, 0, 0}, Loader::npz,
               "not a zip archive (6 bytes, fewer than an end-of-central-directory record)", false);
  expect_error(io_test::make_zip({{"a.npy", Bytes{1, 2, 3}}}), Loader::npz,
               "(member 'a.npy'): not a .npy file");
  Bytes short_data = small_npy();
  short_data.resize(short_data.size() - 4);
  expect_error(io_test::make_zip({{"a.npy", short_data}}), Loader::npz,
               "the member has 8 bytes of data, but '<f4' [3] needs 12");
  expect_error(io_test::make_zip({{"a.npy", npy(dict("<f4", "(1152921504606846975,)"))}}),
               Loader::npz, "needs 4611686018427387900");
  // A version 1.0 header of length 0 (found by fuzz_npz: the header ends before the prefix).
  expect_error(
      io_test::make_zip({{"a.npy", Bytes{0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0, '{', '}'}}}),
      Loader::npz, "(member 'a.npy'): bad .npy header at byte 0: the header ends too early");
  expect_error(io_test::make_zip({{"a.npy", Bytes{0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0}}}),
               Loader::npz, "(member 'a.npy'): truncated .npy file (9 bytes)");
  io_test::ZipMember encrypted{"e.npy", small_npy()};
  encrypted.flags = 1;
  expect_error(io_test::make_zip({encrypted}), Loader::npz, "member 'e.npy' is encrypted");
  io_test::ZipMember bzip{"z.npy", small_npy()};
  bzip.method = 12;
  expect_error(io_test::make_zip({bzip}), Loader::npz, "uses compression method 12");
  // Members whose data overlaps (libzip accepts them; kiln's layout check does not).
  expect_error(io_test::make_overlapping_zip(Bytes(1000, 7)), Loader::npz,
               "members 'a.npy' (bytes 0 to 1070) and 'b.npy' (bytes 35 to 1070) overlap");
  // A member that claims a size its stored bytes cannot have.
  auto lying = io_test::make_zip({{"a.npy", small_npy()}});
  const std::size_t local_size_field = 22, central = lying.size() - 22 - 46 - 5;
  for (std::size_t at : {local_size_field, central + 24}) lying[at] = 0xff;
  expect_error(lying, Loader::npz, "a.npy", false);
}
