// io: hostile files through every reading path. Each case runs every reader its format applies
// to (inspect, load_safetensors with and without names, SafetensorsFile,
// load_safetensors_metadata, load_npy, load_npz with and without names, load_weights strict and
// not, Checkpoint::restore) and checks that the kiln::Error starts "[op] <path>", contains the
// problem, holds no raw control byte, stays short, and that no tensor or byte is left behind.
// FIFOs and other files that are not regular files must be refused without blocking.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <thread>

#include <kiln/checkpoint.hpp>
#include <kiln/kiln.hpp>

#include "io_test_support.hpp"
#include "zip_builder.hpp"

using io_test::TempDir;
namespace io = kiln::io;

namespace {

using Bytes = std::vector<std::uint8_t>;
using Path = std::filesystem::path;

enum class Format { safetensors, npy, npz };
constexpr Format all_formats[] = {Format::safetensors, Format::npy, Format::npz};

const char* extension(Format format) {
  switch (format) {
    case Format::safetensors:
      return ".safetensors";
    case Format::npy:
      return ".npy";
    case Format::npz:
      return ".npz";
  }
  return "";
}

/// A module with one variable "w", for load_weights and Checkpoint.
struct OneWeight : kiln::Module {
  OneWeight() : Module("m") { add_variable("w", {3}, kiln::init::zeros()); }
};

struct Reader {
  const char* name;  // for the test log
  const char* op;    // the operation its errors must name
  std::vector<Format> formats;
  std::function<void(const Path&)> read;
  bool reads(Format f) const {
    return std::find(formats.begin(), formats.end(), f) != formats.end();
  }
};

const std::vector<Reader>& readers() {
  const std::vector<Format> st{Format::safetensors}, npy{Format::npy}, npz{Format::npz};
  const std::vector<Format> any(std::begin(all_formats), std::end(all_formats));
  static const std::vector<Reader> all = {
      {"inspect", "inspect", any, [](const Path& p) { (void)io::inspect(p); }},
      {"load_safetensors", "load_safetensors", st,
       [](const Path& p) { (void)io::load_safetensors(p); }},
      {"load_safetensors(names)", "load_safetensors", st,
       [](const Path& p) { (void)io::load_safetensors(p, {"w"}); }},
      {"SafetensorsFile", "load_safetensors", st,
       [](const Path& p) { (void)io::SafetensorsFile(p).load_all(); }},
      {"load_safetensors_metadata", "load_safetensors_metadata", st,
       [](const Path& p) { (void)io::load_safetensors_metadata(p); }},
      {"load_npy", "load_npy", npy, [](const Path& p) { (void)io::load_npy(p); }},
      {"load_npz", "load_npz", npz, [](const Path& p) { (void)io::load_npz(p); }},
      {"load_npz(names)", "load_npz", npz, [](const Path& p) { (void)io::load_npz(p, {"w"}); }},
      {"load_weights strict", "load_weights", any,
       [](const Path& p) {
         OneWeight module;
         (void)kiln::load_weights(module, p);
       }},
      {"load_weights non-strict", "load_weights", any,
       [](const Path& p) {
         OneWeight module;
         (void)kiln::load_weights(module, p, {.strict = false});
       }},
      {"Checkpoint::restore", "Checkpoint.restore", any,
       [](const Path& p) {
         OneWeight module;
         kiln::Checkpoint checkpoint({{"m", &module}});
         (void)checkpoint.restore(p);
       }},
  };
  return all;
}

/// Checks that `read` throws kiln::Error "[op] <path>..." containing `problem`, readable
/// (no control byte but line breaks) and short, and that nothing is left allocated.
void check_error(const std::string& op, const std::function<void()>& read, const Path& path,
                 const std::string& problem) {
  const auto before = kiln::memory_stats();
  try {
    read();
    FAIL("no error for a file that should give: " << problem);
  } catch (const kiln::Error& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.rfind(fmt::format("[{}] {}", op, path.string()), 0) == 0);
    CHECK(message.find(problem) != std::string::npos);
    CHECK(std::none_of(message.begin(), message.end(),
                       [](char c) { return static_cast<unsigned char>(c) < 0x20 && c != '\n'; }));
    CHECK(message.size() < 1200);
  }
  CHECK(kiln::memory_stats().live_tensors == before.live_tensors);
  CHECK(kiln::memory_stats().live_bytes == before.live_bytes);
}

/// Writes `bytes` as a `format` file and checks every reader of that format rejects it.
void expect_rejected(const Bytes& bytes, Format format, const std::string& problem) {
  TempDir dir;
  const Path path = dir / (std::string("bad") + extension(format));
  io_test::write_bytes(path, bytes);
  for (const Reader& r : readers()) {
    if (!r.reads(format)) continue;
    INFO(r.name);
    check_error(
        r.op, [&] { r.read(path); }, path, problem);
  }
}

Bytes st(const std::string& header, const Bytes& data = {}) {
  return io_test::safetensors_bytes(header, data);
}

std::string dict(const std::string& descr, const std::string& shape) {
  return "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
}

Bytes w_npy() {
  Bytes data;
  io_test::append_values(data, std::vector<float>{1, 2, 3});
  return io_test::npy_bytes(dict("<f4", "(3,)"), data);
}

std::uint32_t get32(const Bytes& b, std::size_t at) {
  return static_cast<std::uint32_t>(b[at] | b[at + 1] << 8 | b[at + 2] << 16 | b[at + 3] << 24);
}
void set32(Bytes& b, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i)
    b[at + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(v >> (8 * i));
}
/// Where the central directory of a zip made by make_zip (no comment) starts.
std::size_t central_offset(const Bytes& zip) { return get32(zip, zip.size() - 22 + 16); }

}  // namespace

// ------------------------------------------------------------------------------- nesting

TEST_CASE("safetensors: deep nesting is refused before parsing, on every reading path",
          "[io][hostile]") {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string nested_too_deep = "header nests deeper than 64 levels";
  const std::string headers[] = {
      R"({"w":{"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,12]}})",
      R"({"w":{"dtype":"F32","shape":[3],"data_offsets":)" + deep + "}}",
      R"({"__metadata__":{"k":)" + deep +
          R"(},"w":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})",
      R"({"w":)" + deep + "}",
      std::string(100000, '{'),
      R"({"w":{"dtype":"F32","shape":)" + std::string(100000, '['),
  };
  for (const auto& header : headers)
    expect_rejected(st(header, Bytes(12, 0)), Format::safetensors, nested_too_deep);

  // 64 levels are accepted (an extra field of a tensor is ignored); 65 are not.
  const auto extra = [](int levels) {
    return R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,12],"x":)" +
           std::string(static_cast<std::size_t>(levels), '[') +
           std::string(static_cast<std::size_t>(levels), ']') + "}}";
  };
  TempDir dir;
  io_test::write_bytes(dir / "ok.safetensors", st(extra(62), Bytes(12, 0)));
  CHECK(io::load_safetensors(dir / "ok.safetensors").at("w").shape() == kiln::Shape{3});
  CHECK(io::inspect(dir / "ok.safetensors").size() == 1);
  expect_rejected(st(extra(63), Bytes(12, 0)), Format::safetensors,
                  "header nests deeper than 64 levels (at byte 120 of the header)");
  // Brackets inside strings (escaped quotes included) do not count.
  const std::string key = "w" + std::string(200, '[') + "\\\"" + std::string(200, '{');
  io_test::write_bytes(
      dir / "key.safetensors",
      st(R"({")" + key + R"(":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})", Bytes(12, 0)));
  CHECK(io::inspect(dir / "key.safetensors").at(0).shape == kiln::Shape{3});
}

TEST_CASE("safetensors: messages quote header values as short, escaped excerpts", "[io][hostile]") {
  const std::string long_text(100000, 'x');
  // A shape or data_offsets value that is one long string, an unterminated string, a long
  // name: each message stays short.
  expect_rejected(
      st(R"({"w":{"dtype":"F32","shape":[")" + long_text + R"("],"data_offsets":[0,12]}})",
         Bytes(12, 0)),
      Format::safetensors, "has shape [\"xxxxxxxx");
  expect_rejected(
      st(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":")" + long_text + "\"}}", Bytes(12, 0)),
      Format::safetensors, "... (100002 bytes), expected [begin, end]");
  expect_rejected(st(R"({"w":")" + long_text), Format::safetensors, "header is not valid JSON");
  expect_rejected(st(R"({")" + long_text + R"(":{"dtype":"X"}})"), Format::safetensors,
                  "xxx... (100000 bytes)' needs the fields dtype, shape and data_offsets");
  // Control characters and bidirectional overrides in keys and values are escaped.
  expect_rejected(st(R"({"a\u0000b":5})"), Format::safetensors,
                  R"(header entry 'a\x00b' is not an object)");
  expect_rejected(
      st(R"({"w":{"dtype":"F3\u00002","shape":[3],"data_offsets":[0,12]}})", Bytes(12, 0)),
      Format::safetensors, R"(tensor 'w' has unknown dtype 'F3\x002')");
  expect_rejected(
      st(R"({"w\u0007\u202e":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", Bytes(8, 0)),
      Format::safetensors, R"(tensor 'w\x07\u202e' has data_offsets [0,8])");
  expect_rejected(st(R"({"__metadata__":{"k\u001b[31m":1}})"), Format::safetensors,
                  R"(__metadata__ value of 'k\x1b[31m' is not a string)");
  expect_rejected(st(R"({"\u0000":{},"\u0000":{}})"), Format::safetensors,
                  R"(header has the key '\x00' twice)");
  // load_weights lists the file's keys it cannot place escaped too.
  TempDir dir;
  io_test::write_bytes(
      dir / "keys.safetensors",
      st(R"({"m/w\u0000x":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})", Bytes(12, 0)));
  OneWeight module;
  CHECK_THROWS_WITH(kiln::load_weights(module, dir / "keys.safetensors"),
                    Catch::Contains(R"(unexpected in the file (1): w\x00x (from m/w\x00x))"));
}

// ------------------------------------------------------------------------------ escaping

TEST_CASE("npy and npz: bytes from the file are escaped in every message", "[io][hostile]") {
  // A NUL inside a descr no longer cuts the message short: what follows it is still there.
  const std::string nul_descr("<f4\0zz", 6);
  expect_rejected(io_test::npy_bytes(dict(nul_descr, "(3,)"), Bytes(12, 0)), Format::npy,
                  R"(.npy dtype '<f4\x00zz' is not supported (kiln reads)");
  expect_rejected(io_test::npy_bytes(dict("<f\xff", "(3,)"), Bytes(12, 0)), Format::npy,
                  R"(.npy dtype '<f\xff' is not supported)");
  expect_rejected(io_test::npy_bytes(std::string("{'k\0\x01': 1}", 10)), Format::npy,
                  R"(unexpected key 'k\x00\x01' (expected 'descr')");
  expect_rejected(io_test::npy_bytes(dict("<f4" + std::string(5000, 'z'), "(3,)")), Format::npy,
                  "zzz... (5003 bytes)' is not supported");
  // The same inside an archive member, and in member names.
  expect_rejected(io_test::make_zip({{"w.npy", io_test::npy_bytes(dict(nul_descr, "(3,)"))}}),
                  Format::npz, R"((member 'w.npy'): .npy dtype '<f4\x00zz' is not supported)");
  // libzip shows control bytes of names not flagged UTF-8 as CP437 glyphs; flagged names keep
  // their bytes.
  const auto utf8_named = [](const std::string& name) {
    io_test::ZipMember member{name, w_npy()};
    member.flags = 0x800;
    return io_test::make_zip({member});
  };
  expect_rejected(utf8_named("w\x7f\t\r\n"), Format::npz,
                  R"(member 'w\x7f\x09\x0d\x0a' is not a .npy file)");
  expect_rejected(utf8_named("w\u2028.npy\xc2\x85"), Format::npz,
                  R"(member 'w\u2028.npy\u0085' is not a .npy file)");
  expect_rejected(utf8_named("../\x1b[2J.npy"), Format::npz,
                  R"(member name '../\x1b[2J.npy' is marked as UTF-8 but has control characters)");
  expect_rejected(io_test::make_zip({{std::string("w\0x.npy", 7), w_npy()}}), Format::npz,
                  R"(member name 'w\x00x.npy' contains a NUL byte)");
}

// ----------------------------------------------------------------- tiny and empty files

TEST_CASE("Empty, tiny and garbage files are named for what they are not", "[io][hostile]") {
  for (Format format : all_formats) expect_rejected({}, format, "0 bytes");
  expect_rejected({}, Format::npz, "(0 bytes)");
  TempDir dir;
  io_test::write_bytes(dir / "empty.npz", {});
  CHECK_THROWS_WITH(
      io::load_npz(dir / "empty.npz"),
      fmt::format("[load_npz] {}: not a zip archive (0 bytes)", (dir / "empty.npz").string()));
  CHECK_THROWS_WITH(io::inspect(dir / "empty.npz"), Catch::Contains("empty file (0 bytes)"));

  expect_rejected({'P', 'K', 5, 6, 0, 0, 0, 0}, Format::npz,
                  "not a zip archive (8 bytes, fewer than an end-of-central-directory record)");
  Bytes local(300, 0x41);  // a local header signature, then no archive
  set32(local, 0, 0x04034b50);
  expect_rejected(local, Format::npz, "not a zip archive (no end-of-central-directory record)");
  // End records that claim entries or a directory the file does not hold.
  Bytes end(22, 0);
  set32(end, 0, 0x06054b50);
  Bytes claims = end;
  claims[8] = claims[10] = 1;
  expect_rejected(claims, Format::npz,
                  "the end record counts 1 members, more than a central directory of 0 bytes");
  Bytes past = end;
  set32(past, 12, 46);
  expect_rejected(past, Format::npz,
                  "the central directory (46 bytes at byte 0) runs past the end record at byte 0");
  Bytes disks = end;
  disks[8] = 1;
  expect_rejected(disks, Format::npz, "counts 1 members on this disk but 0 in all");
  // The empty archive NumPy and kiln write is an archive.
  io_test::write_bytes(dir / "none.npz", end);
  CHECK(io::load_npz(dir / "none.npz").empty());
  CHECK(io::inspect(dir / "none.npz").empty());
}

// ------------------------------------------------------------------------ zip structure

TEST_CASE("npz: overlaps, non-UTF-8 names and local/central mismatches are told apart",
          "[io][hostile]") {
  // Overlapping members: the zip bomb (one member's data holds the other), data that runs
  // into the next member's header, two entries for one local header.
  expect_rejected(io_test::make_overlapping_zip(Bytes(1000, 7)), Format::npz,
                  "members 'a.npy' (bytes 0 to 1070) and 'b.npy' (bytes 35 to 1070) overlap");
  auto into_next = io_test::make_zip({{"a.npy", w_npy()}, {"w.npy", w_npy()}});
  const std::size_t cd = central_offset(into_next);
  for (std::size_t at : {std::size_t{18}, std::size_t{22}, cd + 20, cd + 24})
    set32(into_next, at, get32(into_next, at) + 4);
  expect_rejected(into_next, Format::npz,
                  "members 'a.npy' (bytes 0 to 119) and 'w.npy' (bytes 115");
  auto twice = io_test::make_zip({{"a.npy", w_npy()}, {"w.npy", w_npy()}});
  set32(twice, central_offset(twice) + 46 + 5 + 42, 0);  // w.npy's entry points at a.npy's header
  expect_rejected(twice, Format::npz, "members 'a.npy' (bytes 0 to 115) and 'w.npy' (bytes 0 to");

  // A name flagged UTF-8 that is not; without the flag it is CP437 and loads.
  io_test::ZipMember flagged{"w\xff\xfe.npy", w_npy()};
  flagged.flags = 0x800;
  expect_rejected(io_test::make_zip({flagged}), Format::npz,
                  R"(member name 'w\xff\xfe.npy' is marked as UTF-8 but is not valid UTF-8)");
  TempDir dir;
  flagged.flags = 0;
  io_test::write_bytes(dir / "cp437.npz", io_test::make_zip({flagged}));
  CHECK(io::load_npz(dir / "cp437.npz").size() == 1);

  // Local headers that disagree with the central directory, field by field.
  const auto good = io_test::make_zip({{"w.npy", w_npy()}});
  const auto mismatch = [&](std::size_t at, std::uint8_t value, const std::string& problem) {
    Bytes zip = good;
    zip[at] = value;
    expect_rejected(
        zip, Format::npz,
        "member 'w.npy': its local header and the central directory disagree on the " + problem);
  };
  mismatch(30, 'v', "name ('v.npy' in the local header, 'w.npy' in the central directory)");
  mismatch(8, 8, "compression method (8 in the local header, 0 in the central directory)");
  mismatch(10, 1, "modification time (0x0021 0x0001 in the local header, 0x0021 0x0000 in");
  mismatch(4, 45, "zip version needed (45 in the local header, 20 in the central directory)");
  mismatch(14, static_cast<std::uint8_t>(good[14] ^ 1), "CRC");
  mismatch(18, 0, "compressed size (0 in the local header, 80 in the central directory)");
  mismatch(22, 0, "size (0 in the local header, 80 in the central directory)");
  Bytes no_local = io_test::make_zip({{"a.npy", w_npy()}, {"w.npy", w_npy()}});
  no_local[115] = 'X';
  expect_rejected(no_local, Format::npz, "member 'w.npy' has no local header at byte 115");
  Bytes trailing = good;
  trailing.insert(trailing.end(), {'j', 'u', 'n', 'k'});
  expect_rejected(trailing, Format::npz,
                  "the end record's comment is 0 bytes, but 4 bytes follow the record");
  Bytes long_comment = good;
  long_comment[long_comment.size() - 2] = 9;
  expect_rejected(long_comment, Format::npz, "the end record's comment is 9 bytes, but 0 bytes");
  Bytes short_directory = good;
  set32(short_directory, short_directory.size() - 22 + 12, 40);
  expect_rejected(short_directory, Format::npz, "the central directory ends at byte");

  // Streaming writers' data descriptors (zeros in the local header) are fine.
  for (bool deflate : {false, true}) {
    io_test::ZipMember streamed{"m/w.npy", w_npy(), deflate};
    streamed.descriptor = true;
    io_test::write_bytes(dir / "streamed.npz", io_test::make_zip({streamed, {"b.npy", w_npy()}}));
    CHECK(io::load_npz(dir / "streamed.npz").at("m/w").to_vector<float>() ==
          std::vector<float>{1, 2, 3});
    OneWeight module;
    CHECK(kiln::load_weights(module, dir / "streamed.npz", {.strict = false}).loaded ==
          std::vector<std::string>{"w"});
  }
}

// ----------------------------------------------------------- FIFOs and other file kinds

namespace {

struct Outcome {
  bool threw_kiln_error = false;
  std::string message;
};

/// Runs `read` with a 5 s limit. If it blocks (opening a FIFO waits for a writer), writers
/// opened without blocking release it until it returns, so that the test fails instead of
/// hanging and no thread is left behind.
Outcome run_guarded(const std::function<void()>& read, const Path& fifo, bool& blocked) {
  auto future = std::async(std::launch::async, [&] {
    Outcome outcome;
    try {
      read();
      outcome.message = "no error";
    } catch (const kiln::Error& e) {
      outcome.threw_kiln_error = true;
      outcome.message = e.what();
    } catch (const std::exception& e) {
      outcome.message = std::string("not a kiln::Error: ") + e.what();
    }
    return outcome;
  });
  blocked = future.wait_for(std::chrono::seconds(5)) != std::future_status::ready;
  while (future.wait_for(std::chrono::milliseconds(10)) != std::future_status::ready) {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) ::close(fd);
  }
  return future.get();
}

}  // namespace

TEST_CASE("FIFOs, directories, devices and sockets are refused without blocking", "[io][hostile]") {
  TempDir dir;
  // Every kind sits where a checkpoint file would be, so Checkpoint::restore(prefix) finds it.
  const Path path = dir / "ck-1.safetensors";
  const auto make = [&](const std::string& kind) {
    std::filesystem::remove_all(path);
    if (kind == "a FIFO") REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    if (kind == "a directory") std::filesystem::create_directory(path);
    if (kind == "a character device") std::filesystem::create_symlink("/dev/null", path);
    if (kind == "a socket") {
      const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
      REQUIRE(fd >= 0);
      sockaddr_un address{};
      address.sun_family = AF_UNIX;
      REQUIRE(path.string().size() < sizeof(address.sun_path));
      std::strcpy(address.sun_path, path.c_str());
      REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
      ::close(fd);
    }
  };
  std::vector<Reader> all = readers();
  all.push_back(
      {"detect_format", "detect_format", {}, [](const Path& p) { (void)io::detect_format(p); }});
  for (const std::string kind : {"a FIFO", "a directory", "a character device", "a socket"}) {
    for (const Reader& r : all) {
      make(kind);
      INFO(r.name << " on " << kind);
      const bool checkpoint = std::string(r.op) == "Checkpoint.restore";
      const auto read = [&] {
        if (!checkpoint) return r.read(path);
        OneWeight module;
        kiln::Checkpoint ck({{"m", &module}});
        (void)ck.restore(dir / "ck");
      };
      bool blocked = false;
      const Outcome outcome = run_guarded(read, path, blocked);
      INFO(outcome.message);
      CHECK_FALSE(blocked);
      CHECK(outcome.threw_kiln_error);
      CHECK(outcome.message ==
            fmt::format("[{}] {}: not a regular file ({})", r.op, path.string(), kind));
    }
  }
  // Restoring the FIFO itself (not a prefix): no checkpoint there, and no wait.
  make("a FIFO");
  bool blocked = false;
  const Outcome direct = run_guarded(
      [&] {
        OneWeight module;
        kiln::Checkpoint ck({{"m", &module}});
        (void)ck.restore(path);
      },
      path, blocked);
  CHECK_FALSE(blocked);
  CHECK(direct.threw_kiln_error);
  // A regular file still loads after all of this.
  std::filesystem::remove(path);
  io::save_safetensors(path, {{"m/w", kiln::tensor(std::vector<float>{1, 2, 3}, {3})}});
  OneWeight module;
  kiln::Checkpoint ck({{"m", &module}});
  CHECK(ck.restore(dir / "ck") == path);
}
