#pragma once
// A job split over persistent threads, for the benchmarks' reference loops (copies, reads)
// that must not pay thread start-ups per call.

#include <barrier>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

namespace kiln::bench {

/// A job split over `threads` persistent threads (the caller included): a call costs two
/// barrier waits rather than thread start-ups. part(id, threads) does thread id's share.
class ThreadTeam {
 public:
  ThreadTeam(int threads, std::function<void(int, int)> part)
      : threads_(threads), part_(std::move(part)), start_(threads), done_(threads) {
    for (int id = 1; id < threads_; ++id) workers_.emplace_back([this, id] { work(id); });
  }
  ~ThreadTeam() {
    stop_ = true;
    if (threads_ > 1) start_.arrive_and_wait();
    for (auto& w : workers_) w.join();
  }
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  void run() {
    if (threads_ > 1) start_.arrive_and_wait();
    part_(0, threads_);
    if (threads_ > 1) done_.arrive_and_wait();
  }

 private:
  void work(int id) {
    for (;;) {
      start_.arrive_and_wait();
      if (stop_) return;
      part_(id, threads_);
      done_.arrive_and_wait();
    }
  }
  int threads_;
  std::function<void(int, int)> part_;
  std::barrier<> start_, done_;
  std::vector<std::thread> workers_;
  bool stop_ = false;  // written before start_ is passed, read after it
};

}  // namespace kiln::bench
