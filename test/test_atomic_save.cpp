// Stale temporary files of atomic saves: a save removes those that no live writer holds (a
// process killed while saving), and never one that a writer in another thread or process holds.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <kiln/checkpoint.hpp>
#include <kiln/kiln.hpp>

#include <atomic>
#include <functional>
#include <future>
#include <thread>

#include "io/atomic_file.hpp"
#include "io_test_support.hpp"
#include "save_child.hpp"

using io_test::start_save_and_stop;
using io_test::TempDir;
using kiln::Tensor;
using kiln::io::detail::AtomicFile;
namespace io = kiln::io;

namespace {

/// The temporary files (kiln's name form) in `dir`.
std::vector<std::string> temporaries(const TempDir& dir) {
  std::vector<std::string> out;
  for (const auto& name : dir.entries())
    if (kiln::io::detail::is_temporary_name(name)) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

/// A layer with one large variable: its save writes several chunks.
struct Big : kiln::Module {
  Big() : Module("big") { add_variable("w", {1 << 10, 1 << 10}, kiln::init::ones()); }
};

void kill_and_reap(pid_t child) {
  REQUIRE(::kill(child, SIGKILL) == 0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
}

}  // namespace

TEST_CASE("only kiln's temporary file names count as temporary files", "[io][atomic]") {
  using kiln::io::detail::is_temporary_name;
  CHECK(is_temporary_name(".w.safetensors.tmp-0123abcd"));
  CHECK(is_temporary_name(".ck-37.safetensors.tmp-deadbeef"));
  CHECK(is_temporary_name(".x.tmp-00000000"));
  CHECK(is_temporary_name("..tmp-00000000.tmp-ffffffff"));
  CHECK_FALSE(is_temporary_name(".tmp-0123abcd"));                 // no target name
  CHECK_FALSE(is_temporary_name("w.safetensors.tmp-0123abcd"));    // no leading dot
  CHECK_FALSE(is_temporary_name(".w.safetensors.tmp-0123ABCD"));   // upper case
  CHECK_FALSE(is_temporary_name(".w.safetensors.tmp-0123abc"));    // 7 digits
  CHECK_FALSE(is_temporary_name(".w.safetensors.tmp-0123abcde"));  // 9 digits
  CHECK_FALSE(is_temporary_name(".w.safetensors.tmp-0123abcg"));
  CHECK_FALSE(is_temporary_name(".w.safetensors.tmp_0123abcd"));
  CHECK_FALSE(is_temporary_name(".w.safetensors-0123abcd"));
  CHECK_FALSE(is_temporary_name(".w.safetensors.tmp-0123abcd.bak"));
}

TEST_CASE("every atomic save removes the stale temporary files of its folder", "[io][atomic]") {
  TempDir dir;
  Big big;
  kiln::Checkpoint ckpt({{"model", &big}});
  const Tensor x = kiln::ones({4});
  const std::vector<std::pair<std::string, std::function<void()>>> savers = {
      {"save_safetensors",
       [&] {
         io::save_safetensors(dir / "a.safetensors", {{"x", x}});
       }},
      {"save_npy", [&] { io::save_npy(dir / "a.npy", x); }},
      {"save_npz",
       [&] {
         io::save_npz(dir / "a.npz", {{"x", x}});
       }},
      {"save_npz (empty)", [&] { io::save_npz(dir / "e.npz", {}); }},
      {"save_weights", [&] { kiln::save_weights(big, dir / "w.safetensors"); }},
      {"save_weights (npz)", [&] { kiln::save_weights(big, dir / "w.npz"); }},
      {"Checkpoint::save", [&] { ckpt.save(dir / "ck"); }},
      {"write_file_atomically",
       [&] { kiln::io::detail::write_file_atomically(dir / "raw", "test", {}); }}};
  // Names that are not kiln's temporary files, and things that are not regular files.
  const std::vector<std::string> others = {
      ".w.safetensors.tmp-0123ABCD", ".w.safetensors.tmp-0123abc", "w.safetensors.tmp-0123abcd",
      ".w.safetensors.tmp0123abcd", "target.bin"};
  for (const auto& name : others) write_text(dir / name, name);
  std::filesystem::create_symlink("target.bin", dir / ".link.tmp-00000000");
  std::filesystem::create_directory(dir / ".dir.tmp-11111111");
  for (const auto& [what, save] : savers) {
    INFO(what);
    // What a killed save leaves: for this target and for others in the folder.
    write_text(dir / ".a.safetensors.tmp-0123abcd", std::string(1 << 16, 'x'));
    write_text(dir / ".ck-37.safetensors.tmp-deadbeef", "partial");
    CHECK(temporaries(dir).size() == 4);
    save();
    CHECK(temporaries(dir) == std::vector<std::string>{".dir.tmp-11111111", ".link.tmp-00000000"});
    for (const auto& name : others) CHECK(std::filesystem::exists(dir / name));
    CHECK(std::filesystem::is_symlink(dir / ".link.tmp-00000000"));
  }
}

TEST_CASE("a temporary file that a live writer holds is not removed", "[io][atomic]") {
  TempDir dir;
  const Tensor x = kiln::ones({4});
  SECTION("a lock held through another open file") {
    const auto held = dir / ".held.safetensors.tmp-0badf00d";
    write_text(held, "being written");
    const int fd = ::open(held.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::flock(fd, LOCK_EX) == 0);
    io::save_safetensors(dir / "a.safetensors", {{"x", x}});
    CHECK(std::filesystem::exists(held));
    ::close(fd);  // the writer is gone: the next save removes its file
    io::save_safetensors(dir / "a.safetensors", {{"x", x}});
    CHECK_FALSE(std::filesystem::exists(held));
  }
  SECTION("an AtomicFile being written in another thread") {
    std::promise<std::filesystem::path> written;
    std::promise<void> go;
    std::string error;
    std::thread writer([&] {
      try {
        AtomicFile file(dir / "live.bin", "test");
        file.write("first half ", 11);
        file.write(std::string(2 << 20, 'y').data(), 2 << 20);  // past the buffer: on disk
        written.set_value(file.temp_path());
        go.get_future().wait();
        file.write("second half", 11);
        file.commit();
      } catch (const std::exception& e) {
        error = e.what();
      }
    });
    const auto temp = written.get_future().get();
    io::save_safetensors(dir / "a.safetensors", {{"x", x}});
    kiln::io::detail::remove_stale_temporary_files(dir.path());
    const bool kept = std::filesystem::exists(temp);
    go.set_value();
    writer.join();
    CHECK(error.empty());
    CHECK(kept);
    CHECK(std::filesystem::file_size(dir / "live.bin") == 22 + (2 << 20));
    CHECK(temporaries(dir).empty());
  }
  SECTION("a save in progress in another process") {
    const std::map<std::string, Tensor> values{{"w", kiln::ones({1 << 20})}};
    const pid_t child =
        start_save_and_stop([&] { io::save_safetensors(dir / "big.safetensors", values); });
    const auto temps = temporaries(dir);
    REQUIRE(temps.size() == 1);
    CHECK(temps[0].starts_with(".big.safetensors.tmp-"));
    io::save_safetensors(dir / "a.safetensors", {{"x", x}});
    CHECK(temporaries(dir) == temps);  // the child is alive and holds it
    kill_and_reap(child);
    CHECK(temporaries(dir) == temps);  // killed: left behind...
    io::save_safetensors(dir / "a.safetensors", {{"x", x}});
    CHECK(temporaries(dir).empty());  // ...until the next save
    CHECK_FALSE(std::filesystem::exists(dir / "big.safetensors"));
  }
}

TEST_CASE("checkpoints killed while saving leave no temporary files behind",
          "[checkpoint][atomic]") {
  TempDir dir;
  Big big;
  const auto prefix = dir / "ck";
  kiln::Checkpoint ckpt({{"model", &big}}, {.keep_last = 2});
  ckpt.save(prefix);
  for (int round = 1; round <= 6; ++round) {
    INFO("round " << round);
    const pid_t child = start_save_and_stop([&] { ckpt.save(prefix); });
    kill_and_reap(child);
    const auto left = temporaries(dir);
    CHECK(left.size() == 1);  // only the one just killed: the earlier ones were removed
    big.variable("w").assign(kiln::full({1 << 10, 1 << 10}, static_cast<double>(round)));
    const auto saved = ckpt.save(prefix);
    CHECK(temporaries(dir).empty());
    CHECK(std::filesystem::exists(saved));
  }
  big.variable("w").assign(kiln::zeros({1 << 10, 1 << 10}));
  ckpt.restore(prefix);
  CHECK(kiln::min(big.variable("w").value()).item<float>() == 6.f);
}

TEST_CASE("concurrent saves into one folder never remove each other's files", "[io][atomic]") {
  TempDir dir;
  const std::map<std::string, Tensor> values{{"w", kiln::ones({1 << 16})}};
  constexpr int threads = 4, saves = 25;
  std::atomic<int> failures{0};
  std::vector<std::string> errors(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      for (int i = 0; i < saves; ++i) {
        try {
          io::save_safetensors(dir / fmt::format("t{}-{}.safetensors", t, i % 3), values);
        } catch (const std::exception& e) {
          ++failures;
          errors[static_cast<std::size_t>(t)] = e.what();
        }
      }
    });
  for (auto& w : workers) w.join();
  for (const auto& e : errors) CHECK(e.empty());
  CHECK(failures == 0);
  CHECK(temporaries(dir).empty());
  for (int t = 0; t < threads; ++t)
    for (int i = 0; i < 3; ++i)
      CHECK(io::load_safetensors(dir / fmt::format("t{}-{}.safetensors", t, i)).size() == 1);
}
