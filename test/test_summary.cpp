// kiln::summary: the wire format, CRC-32C framing, TensorFlow's histogram buckets, the writer's
// files, timers and threads, its errors; and TensorBoard's own reader on kiln's files.
#include <fmt/format.h>
#include <sys/wait.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <kiln/kiln.hpp>

#include "io_test_support.hpp"
#include "jit/concrete_function.hpp"
#include "summary/events.hpp"
#include "summary/record.hpp"
#include "summary/wire.hpp"

namespace {

using kiln::Tensor;
namespace fs = std::filesystem;

std::string hex(const std::string& bytes) {
  std::string out;
  for (const unsigned char c : bytes) out += fmt::format("{:02x}", c);
  return out;
}

std::uint64_t read_le(const std::uint8_t* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}

/// The records of a TFRecord file; every length and data CRC checked.
std::vector<std::string> read_records(const fs::path& path) {
  const std::vector<std::uint8_t> bytes = io_test::read_bytes(path);
  std::vector<std::string> records;
  std::size_t at = 0;
  while (at < bytes.size()) {
    REQUIRE(at + 12 <= bytes.size());
    const std::string length_bytes(reinterpret_cast<const char*>(&bytes[at]), 8);
    const std::uint64_t length = read_le(&bytes[at], 8);
    REQUIRE(read_le(&bytes[at + 8], 4) ==
            kiln::detail::mask_crc(kiln::detail::crc32c(length_bytes)));
    REQUIRE(at + 12 + length + 4 <= bytes.size());
    std::string data(reinterpret_cast<const char*>(&bytes[at + 12]), length);
    REQUIRE(read_le(&bytes[at + 12 + length], 4) ==
            kiln::detail::mask_crc(kiln::detail::crc32c(data)));
    records.push_back(std::move(data));
    at += 12 + length + 4;
  }
  return records;
}

/// The length-delimited fields of a protobuf message (field number -> values), skipping others.
std::multimap<int, std::string> length_fields(const std::string& message) {
  std::multimap<int, std::string> out;
  std::size_t at = 0;
  const auto varint = [&] {
    std::uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      const auto b = static_cast<std::uint8_t>(message.at(at++));
      v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return v;
    }
  };
  while (at < message.size()) {
    const std::uint64_t key = varint();
    const int field = static_cast<int>(key >> 3);
    switch (key & 7) {
      case 0:
        varint();
        break;
      case 1:
        at += 8;
        break;
      case 5:
        at += 4;
        break;
      case 2: {
        const auto n = static_cast<std::size_t>(varint());
        out.emplace(field, message.substr(at, n));
        at += n;
        break;
      }
      default:
        FAIL("unexpected wire type");
    }
  }
  return out;
}

std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) out.push_back(e.path());
  return out;
}

}  // namespace

TEST_CASE("CRC-32C matches its check values and TFRecord masks it", "[summary]") {
  CHECK(kiln::detail::crc32c("123456789") == 0xE3069283u);
  CHECK(kiln::detail::crc32c("") == 0u);
  CHECK(kiln::detail::crc32c(std::string(32, '\0')) == 0x8A9136AAu);  // RFC 3720 B.4
  CHECK(kiln::detail::crc32c(std::string(32, '\xff')) == 0x62A8AB43u);
  CHECK(kiln::detail::mask_crc(0) == 0xa282ead8u);
  CHECK(kiln::detail::mask_crc(0x00008000u) == 0xa282ead9u);  // bit 15 rotates to bit 0
  const std::string record = kiln::detail::tf_record("abc");
  REQUIRE(record.size() == 8 + 4 + 3 + 4);
  CHECK(hex(record.substr(0, 8)) == "0300000000000000");
  CHECK(record.substr(12, 3) == "abc");
}

TEST_CASE("protobuf fields are encoded as the wire format defines", "[summary]") {
  using kiln::detail::proto::Message;
  CHECK(hex(Message().varint(1, 150).data()) == "089601");
  CHECK(hex(Message().varint(2, -1).data()) == "10ffffffffffffffffff01");
  CHECK(hex(Message().bytes(2, "testing").data()) == "120774657374696e67");
  CHECK(hex(Message().float64(1, 1.0).data()) == "09000000000000f03f");
  CHECK(hex(Message().float32(2, 1.0f).data()) == "150000803f");
  const double values[] = {1.0, 2.0};
  CHECK(hex(Message().packed_float64(6, values).data()) == "3210000000000000f03f0000000000000040");
  CHECK(Message().packed_float64(6, {}).data().empty());
  Message inner;
  inner.varint(1, 150);
  CHECK(hex(Message().message(3, inner).data()) == "1a03089601");
}

TEST_CASE("histograms use TensorFlow's exponential bucket limits", "[summary]") {
  const std::vector<double>& limits = kiln::detail::summary::histogram_limits();
  REQUIRE(limits.size() % 2 == 1);
  const std::size_t middle = limits.size() / 2;
  CHECK(limits.front() == -DBL_MAX);
  CHECK(limits.back() == DBL_MAX);
  CHECK(limits[middle] == 0.0);
  CHECK(limits[middle + 1] == 1e-12);
  CHECK(limits[middle - 1] == -1e-12);
  CHECK(limits[middle + 2] == Approx(1.1e-12));
  CHECK(limits[limits.size() - 2] < 1e20);
  CHECK(limits[limits.size() - 2] * 1.1 >= 1e20);
  for (std::size_t i = 1; i < limits.size(); ++i) REQUIRE(limits[i - 1] < limits[i]);

  const std::vector<double> values = {-3.0, -3.0, 0.0, 0.5, 2.0, 2.0, 2.0, 1e30};
  const auto h = kiln::detail::summary::histogram_of(values);
  CHECK(h.min == -3.0);
  CHECK(h.max == 1e30);
  CHECK(h.num == 8);
  CHECK(h.sum == Approx(1e30));
  CHECK(h.sum_squares == Approx(1e60));
  REQUIRE(h.bucket.size() == h.bucket_limit.size());
  double total = 0;
  std::size_t nonempty = 0;
  for (std::size_t i = 0; i < h.bucket.size(); ++i) {
    total += h.bucket[i];
    if (h.bucket[i] > 0) ++nonempty;
    if (i > 0) CHECK(h.bucket_limit[i - 1] < h.bucket_limit[i]);
    if (i > 0 && h.bucket[i] == 0) CHECK(h.bucket[i - 1] > 0);  // empty runs are merged
  }
  CHECK(total == 8);
  CHECK(nonempty == 5);
  // Each value lies in [previous limit, its bucket's limit).
  const auto bucket_of = [&](double v) {
    for (std::size_t i = 0; i < h.bucket.size(); ++i)
      if (v < h.bucket_limit[i]) return i;
    return h.bucket.size() - 1;
  };
  CHECK(h.bucket[bucket_of(2.0)] == 3);
  CHECK(h.bucket[bucket_of(-3.0)] == 2);
  CHECK(h.bucket[bucket_of(0.0)] == 1);
  CHECK(h.bucket_limit[bucket_of(0.0)] == 1e-12);  // 0 counts into [0, 1e-12)
  CHECK(h.bucket_limit.back() == DBL_MAX);

  // Every value counts where a binary search over the limits puts it: the limits themselves, their
  // neighbours, values spread over every magnitude, both signs, 0 and the extremes.
  std::vector<double> many = {0.0, -0.0, DBL_MAX, -DBL_MAX, 1e-300, -1e-300, 1e300, -1e300};
  for (std::size_t i = 0; i < limits.size(); ++i) {
    many.push_back(limits[i]);
    many.push_back(std::nextafter(limits[i], -DBL_MAX));
    many.push_back(std::nextafter(limits[i], DBL_MAX));
  }
  for (int i = -400; i <= 400; ++i) {
    many.push_back(std::pow(10.0, i * 0.1) * 1.2345);
    many.push_back(-std::pow(10.0, i * 0.1) * 0.987);
  }
  std::vector<double> reference(limits.size(), 0.0);
  for (const double v : many) {
    const auto at = static_cast<std::size_t>(std::upper_bound(limits.begin(), limits.end(), v) -
                                             limits.begin());
    reference[std::min(at, limits.size() - 1)] += 1.0;
  }
  const auto counted = kiln::detail::summary::histogram_of(many);
  std::vector<double> merged_limits, merged_counts;
  for (std::size_t i = 0; i < limits.size();) {  // the reference's empty runs merged
    double end = limits[i];
    const double count = reference[i++];
    if (count == 0.0)
      for (; i < limits.size() && reference[i] == 0.0; ++i) end = limits[i];
    merged_limits.push_back(end);
    merged_counts.push_back(count);
  }
  CHECK(counted.bucket_limit == merged_limits);
  CHECK(counted.bucket == merged_counts);

  const auto empty = kiln::detail::summary::histogram_of({});
  CHECK(empty.num == 0);
  REQUIRE(empty.bucket.size() == 1);
  CHECK(empty.bucket_limit[0] == DBL_MAX);
  CHECK(empty.bucket[0] == 0);
}

TEST_CASE("a FileWriter writes framed events that start with the file version", "[summary]") {
  io_test::TempDir dir;
  fs::path path;
  {
    kiln::summary::FileWriter writer(dir / "logs/run1");
    path = writer.path();
    CHECK(path.parent_path() == dir / "logs/run1");
    CHECK(path.filename().string().rfind("events.out.tfevents.", 0) == 0);
    writer.scalar("loss", 0.25, 1);
    writer.scalar("loss", kiln::scalar(0.125f), 2);
    writer.histogram("weights", kiln::tensor<float>({1, 2, 3, 4}, {2, 2}), 2);
    writer.text("note", "**bold**", 3);
    writer.image("picture", kiln::ones({4, 5, 3}) * 0.5f, 3);
    writer.image("grey", kiln::tensor<std::int32_t>({0, 128, 255, 7}, {2, 2}), 3);
  }  // the destructor flushes
  const auto records = read_records(path);
  REQUIRE(records.size() == 7);
  const auto first = length_fields(records[0]);
  REQUIRE(first.count(3) == 1);
  CHECK(first.find(3)->second == "brain.Event:2");
  for (std::size_t i = 1; i < records.size(); ++i) CHECK(length_fields(records[i]).count(5) == 1);
  // The image's PNG starts with PNG's signature.
  const auto summary = length_fields(length_fields(records[5]).find(5)->second);
  const auto value = length_fields(summary.find(1)->second);
  const auto image = length_fields(value.find(4)->second);
  CHECK(image.find(4)->second.substr(0, 8) == "\x89PNG\r\n\x1a\n");
}

TEST_CASE("FileWriter flushes on its timer, on flush() and on close()", "[summary]") {
  io_test::TempDir dir;
  kiln::summary::FileWriter writer(dir.path(), {.flush_seconds = 0.05, .max_queue = 1000});
  const auto initial = fs::file_size(writer.path());
  writer.scalar("a", 1.0, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (fs::file_size(writer.path()) == initial && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(fs::file_size(writer.path()) > initial);

  kiln::summary::FileWriter slow(dir.path(), {.flush_seconds = 3600, .max_queue = 1000});
  const auto before = fs::file_size(slow.path());
  slow.scalar("b", 2.0, 0);
  slow.flush();
  CHECK(fs::file_size(slow.path()) > before);
  slow.scalar("b", 3.0, 1);
  slow.close();
  CHECK(read_records(slow.path()).size() == 3);
  slow.close();  // idempotent
  CHECK_THROWS_WITH(slow.scalar("b", 4.0, 2), Catch::Contains("is closed"));
  CHECK(event_files(dir.path()).size() == 2);  // two writers, two files in one folder
}

TEST_CASE("FileWriter takes events from several threads at once", "[summary][threads]") {
  io_test::TempDir dir;
  fs::path path;
  constexpr int threads = 4, per_thread = 200;
  {
    kiln::summary::FileWriter writer(dir.path(), {.flush_seconds = 0.01, .max_queue = 7});
    path = writer.path();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&writer, t] {
        for (int i = 0; i < per_thread; ++i) {
          writer.scalar(fmt::format("thread{}", t), i, i);
          if (i % 50 == 0) writer.flush();
        }
      });
    for (auto& th : pool) th.join();
  }
  CHECK(read_records(path).size() == 1 + threads * per_thread);
}

TEST_CASE("summary errors name the writer, the tag and the problem", "[summary]") {
  io_test::TempDir dir;
  std::ofstream(dir / "plain.txt") << "x";
  CHECK_THROWS_WITH(
      kiln::summary::FileWriter(dir / "plain.txt/logs"),
      Catch::Contains("summary.FileWriter") && Catch::Contains("cannot create the log folder"));
  CHECK_THROWS_WITH(kiln::summary::FileWriter(dir.path(), {.flush_seconds = 0}),
                    Catch::Contains("flush_seconds must be positive"));
  CHECK_THROWS_WITH(kiln::summary::FileWriter(dir.path(), {.max_queue = 0}),
                    Catch::Contains("max_queue"));
  kiln::summary::FileWriter writer(dir.path());
  CHECK_THROWS_WITH(writer.scalar("", 1.0, 0),
                    Catch::Contains("[summary.scalar] the tag is empty"));
  CHECK_THROWS_WITH(writer.scalar("v", kiln::ones({2}), 0), Catch::Contains("needs one element"));
  CHECK_THROWS_WITH(writer.histogram("h", kiln::tensor<float>({1.f, NAN}, {2}), 0),
                    Catch::Contains("[summary.histogram] 'h' has a non-finite value"));
  CHECK_THROWS_WITH(writer.image("i", kiln::ones({2, 2, 5}), 0),
                    Catch::Contains("1 to 4 channels"));
  CHECK_THROWS_WITH(writer.image("i", kiln::ones({2}), 0),
                    Catch::Contains("[height, width, channels]"));
  CHECK_THROWS_WITH(writer.image("i", kiln::tensor<std::int32_t>({0, 300}, {1, 2}), 0),
                    Catch::Contains("must be in 0..255"));
  auto traced = kiln::function([&writer](const Tensor& x) {
    writer.histogram("inside", x, 0);
    return x;
  });
  CHECK_THROWS_WITH(traced(kiln::ones({2})), Catch::Contains("needs a concrete tensor"));
  kiln::summary::FileWriter moved(std::move(writer));
  CHECK_THROWS_WITH(writer.flush(),
                    Catch::Contains("moved from"));  // NOLINT(bugprone-use-after-move)
  moved.close();
  CHECK(read_records(moved.path()).size() == 1);  // the failed calls wrote nothing
}

TEST_CASE("TensorBoard's EventAccumulator reads kiln's event files", "[summary]") {
  const std::string python = io_test::test_python("tensorboard");
  if (python.empty()) {
    WARN("skipped: no Python with tensorboard (run scripts/python-env.sh, or set KILN_PYTHON)");
    return;
  }
  kiln::clear_session();
  io_test::TempDir dir;
  nlohmann::json expected;
  {
    kiln::summary::FileWriter writer(dir / "run");
    for (int step = 0; step < 5; ++step) {
      writer.scalar("train/loss", 1.0 / (step + 1), step);
      expected["scalars"]["train/loss"].push_back({step, static_cast<float>(1.0 / (step + 1))});
    }
    const Tensor w = kiln::random::normal({64, 32}, 0.0, 2.0, 11);
    writer.histogram("dense/kernel", w, 3);
    const auto h = kiln::detail::summary::histogram_of(
        kiln::cast(w, kiln::f64).contiguous().to_vector<double>());
    expected["histogram"] = {{"tag", "dense/kernel"},
                             {"step", 3},
                             {"min", h.min},
                             {"max", h.max},
                             {"num", h.num},
                             {"sum", h.sum},
                             {"limits", h.bucket_limit},
                             {"counts", h.bucket}};
    writer.text("notes", "hello *kiln*", 4);
    expected["text"] = {{"tag", "notes"}, {"step", 4}, {"value", "hello *kiln*"}};
    writer.image("picture", kiln::reshape(kiln::linspace(0.0, 1.0, 6 * 4 * 3), {6, 4, 3}), 2);
    expected["image"] = {{"tag", "picture"}, {"step", 2}, {"height", 6}, {"width", 4}};

    kiln::nn::Dense dense(3, kiln::nn::Activation::tanh);
    auto f = kiln::function([&dense](const Tensor& x) { return kiln::sum(dense(x) * 2.f); },
                            {.input_signature = {kiln::TensorSpec({-1, 4})}});
    const kiln::ConcreteFunction cf = f.get_concrete_function(kiln::ones({2, 4}));
    writer.graph(cf);
    const auto def = kiln::detail::summary::graph_def(*cf.impl()->graph);
    expected["graph_nodes"] = def.nodes;
    expected["graph_module"] = dense.path();  // its matmul and bias add are grouped under it
    expected["graph_node_names"] = nlohmann::json::array();
    for (const std::string& name : cf.impl()->graph->variable_names)
      expected["graph_node_names"].push_back(name);
  }
  std::ofstream(dir / "expected.json") << expected.dump(1);
  const std::string command = fmt::format("'{}' '{}/check_tensorboard.py' '{}'", python,
                                          test_paths::data_dir(), dir.path().string());
  const int status = std::system(command.c_str());
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
