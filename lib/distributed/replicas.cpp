// Sync replicas' rounds (replicas.hpp) on MPI point-to-point messages.
#include "distributed/replicas.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>

#include "core/fail.hpp"

namespace kiln::distributed::replicas {

namespace {

using kiln::detail::fail;

// Tags of the two messages of a round (point-to-point messages never match collectives).
constexpr int gradient_tag = 0x6b31;  // a process's bucket, to process 0
constexpr int sum_tag = 0x6b32;       // process 0's sum, to each other process

// Every message starts with the number of the round it belongs to.
constexpr std::size_t header_bytes = sizeof(std::int64_t);

std::atomic<std::int64_t> dropped_buckets{0};

std::int64_t round_of(const std::byte* message) {
  std::int64_t round = 0;
  std::memcpy(&round, message, header_bytes);
  return round;
}

/// sum[i] += part[i] over `bytes` bytes of T.
template <class T>
void add_into(std::byte* sum, const std::byte* part, std::int64_t bytes) {
  const auto n = static_cast<std::size_t>(bytes) / sizeof(T);
  T* __restrict s = reinterpret_cast<T*>(sum);
  const T* __restrict p = reinterpret_cast<const T*>(part);
  for (std::size_t i = 0; i < n; ++i) s[i] += p[i];
}

/// Adds one more part to `sum` (the first is copied); counts it in `added`.
void add_part(std::byte* sum, const std::byte* part, std::int64_t bytes, DType dtype,
              std::int64_t& added) {
  if (added == 0 && bytes > 0)
    std::memcpy(sum, part, static_cast<std::size_t>(bytes));
  else if (added > 0 && dtype == DType::f64)
    add_into<double>(sum, part, bytes);
  else if (added > 0)
    add_into<float>(sum, part, bytes);
  ++added;
}

}  // namespace

std::int64_t dropped() { return dropped_buckets.load(std::memory_order_relaxed); }

void check_mpi(int code, const char* op, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  fail(op, "{} failed: {}", call, std::string(text, static_cast<std::size_t>(length)));
}

void Rounds::set_world(int rank, int size) {
  rank_ = rank;
  size_ = size;
  received_.assign(static_cast<std::size_t>(size), 0);
}

void Rounds::run(const std::byte* bucket, std::byte* result, std::int64_t bytes, DType dtype,
                 const detail::CollectiveParams& params, const char* op) {
  if (static_cast<std::int64_t>(header_bytes) + bytes > INT_MAX)
    fail(op, "a bucket of {} bytes is larger than one MPI message", bytes);
  if (params.replicas < 1 || params.replicas > size_)
    fail(op, "replicas_to_aggregate must be in [1, {}] (the number of processes), got {}", size_,
         params.replicas);
  reap(op);
  if (rank_ == 0)
    lead(bucket, result, bytes, dtype, params, op);
  else
    follow(bucket, result, bytes, op);
  ++rounds_;
}

void Rounds::lead(const std::byte* bucket, std::byte* result, std::int64_t bytes, DType dtype,
                  const detail::CollectiveParams& params, const char* op) {
  // The sum is made in the message that carries it.
  auto message =
      std::make_shared<std::vector<std::byte>>(header_bytes + static_cast<std::size_t>(bytes));
  std::memcpy(message->data(), &rounds_, header_bytes);
  std::byte* sum = message->data() + header_bytes;
  std::int64_t added = 0;

  // Buckets that came before this process's own come first.
  for (;;) {
    int waiting = 0;
    MPI_Status status;
    check_mpi(MPI_Iprobe(MPI_ANY_SOURCE, gradient_tag, MPI_COMM_WORLD, &waiting, &status), op,
              "MPI_Iprobe");
    if (!waiting) break;
    receive(status, sum, bytes, dtype, params.replicas, added, op);
  }
  if (added < params.replicas)
    add_part(sum, bucket, bytes, dtype, added);
  else
    dropped_buckets.fetch_add(1, std::memory_order_relaxed);
  ++received_[0];

  // Then whatever comes first, until there are enough, and until nobody lags too far behind.
  for (;;) {
    // (MPI_ANY_SOURCE is a negative number too: "nobody" needs a flag of its own.)
    bool wait = added < params.replicas;
    int source = MPI_ANY_SOURCE;
    for (int r = 1; r < size_ && !wait; ++r)
      if (received_[static_cast<std::size_t>(r)] < rounds_ + 1 - params.max_lag_rounds) {
        wait = true;
        source = r;
      }
    if (!wait) break;
    MPI_Status status;
    check_mpi(MPI_Probe(source, gradient_tag, MPI_COMM_WORLD, &status), op, "MPI_Probe");
    receive(status, sum, bytes, dtype, params.replicas, added, op);
  }

  if (bytes > 0) std::memcpy(result, sum, static_cast<std::size_t>(bytes));
  Pending sends{message, {}};
  for (int r = 1; r < size_; ++r) {
    MPI_Request request;
    check_mpi(MPI_Isend(message->data(), static_cast<int>(message->size()), MPI_BYTE, r, sum_tag,
                        MPI_COMM_WORLD, &request),
              op, "MPI_Isend");
    sends.requests.push_back(request);
  }
  if (!sends.requests.empty()) pending_.push_back(std::move(sends));
}

void Rounds::receive(const MPI_Status& status, std::byte* sum, std::int64_t bytes, DType dtype,
                     std::int64_t wanted, std::int64_t& added, const char* op) {
  int count = 0;
  check_mpi(MPI_Get_count(&status, MPI_BYTE, &count), op, "MPI_Get_count");
  const int source = status.MPI_SOURCE;
  if (count < static_cast<int>(header_bytes))
    fail(op, "process {} sent a bucket of {} bytes, too short for a round's header", source, count);
  scratch_.resize(static_cast<std::size_t>(count));
  check_mpi(MPI_Recv(scratch_.data(), count, MPI_BYTE, source, gradient_tag, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE),
            op, "MPI_Recv");
  ++received_[static_cast<std::size_t>(source)];
  const std::int64_t round = round_of(scratch_.data());
  if (round > rounds_)
    fail(op,
         "process {} sent a bucket for round {} while process 0 is at round {}: every process "
         "must run the same train steps",
         source, round, rounds_);
  if (round < rounds_ || added >= wanted) {  // stale, or late for this round
    dropped_buckets.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const auto part_bytes =
      static_cast<std::int64_t>(count) - static_cast<std::int64_t>(header_bytes);
  if (part_bytes != bytes)
    fail(op,
         "process {} sent {} bytes for a bucket of {}: every process must train the same "
         "variables with gradients of the same shapes",
         source, part_bytes, bytes);
  add_part(sum, scratch_.data() + header_bytes, bytes, dtype, added);
}

void Rounds::follow(const std::byte* bucket, std::byte* result, std::int64_t bytes,
                    const char* op) {
  auto message =
      std::make_shared<std::vector<std::byte>>(header_bytes + static_cast<std::size_t>(bytes));
  std::memcpy(message->data(), &rounds_, header_bytes);
  if (bytes > 0)
    std::memcpy(message->data() + header_bytes, bucket, static_cast<std::size_t>(bytes));
  MPI_Request request;
  check_mpi(MPI_Isend(message->data(), static_cast<int>(message->size()), MPI_BYTE, 0, gradient_tag,
                      MPI_COMM_WORLD, &request),
            op, "MPI_Isend");
  pending_.push_back(Pending{message, {request}});

  // Process 0 sends every round's sum to every process, in order: the next one is this round's.
  std::vector<std::byte>& answer = scratch_;  // kept between rounds: no allocation per step
  answer.resize(header_bytes + static_cast<std::size_t>(bytes));
  MPI_Status status;
  check_mpi(MPI_Recv(answer.data(), static_cast<int>(answer.size()), MPI_BYTE, 0, sum_tag,
                     MPI_COMM_WORLD, &status),
            op, "MPI_Recv");
  int count = 0;
  check_mpi(MPI_Get_count(&status, MPI_BYTE, &count), op, "MPI_Get_count");
  if (static_cast<std::size_t>(count) != answer.size() || round_of(answer.data()) != rounds_)
    fail(op,
         "process 0 answered round {} with {} bytes for round {}: every process must run the "
         "same train steps",
         rounds_, count, count >= static_cast<int>(header_bytes) ? round_of(answer.data()) : -1);
  if (bytes > 0) std::memcpy(result, answer.data() + header_bytes, static_cast<std::size_t>(bytes));
}

void Rounds::reap(const char* op) {
  std::erase_if(pending_, [&](Pending& p) {
    int done = 0;
    check_mpi(MPI_Testall(static_cast<int>(p.requests.size()), p.requests.data(), &done,
                          MPI_STATUSES_IGNORE),
              op, "MPI_Testall");
    return done != 0;
  });
}

void Rounds::finish(const char* op) {
  if (rank_ == 0)
    for (int r = 1; r < size_; ++r)
      while (received_[static_cast<std::size_t>(r)] < rounds_) {
        MPI_Status status;
        check_mpi(MPI_Probe(r, gradient_tag, MPI_COMM_WORLD, &status), op, "MPI_Probe");
        std::int64_t added = 0;
        receive(status, nullptr, 0, DType::f32, 0, added, op);  // all stale now
      }
  for (Pending& p : pending_)
    check_mpi(
        MPI_Waitall(static_cast<int>(p.requests.size()), p.requests.data(), MPI_STATUSES_IGNORE),
        op, "MPI_Waitall");
  pending_.clear();
}

}  // namespace kiln::distributed::replicas
