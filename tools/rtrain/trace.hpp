// File: rtrain/trace.hpp
//
// `rtrain run --trace DIR`: each rank's timeline in the Chrome Trace Event Format
// (the JSON that Perfetto and chrome://tracing read), gzip-compressed, as
// DIR/rank-R.trace.json.gz; `rtrain trace merge` makes one timeline of them, a track
// (process) per rank. Each rank's clock starts at 0 when every rank has left one
// barrier, so the merged tracks line up within the barrier's skew.
//
//   Tracer t(dir, rank, world);                  // dir "": disabled, every call costs a branch
//   t.align([&] { comm.barrier(); });            // the common zero
//   { auto s = t.slice("step", "step", {{"step", 7}}); ... }   // a complete event ("ph": "X")
//   t.complete(Tracer::kCommThread, "allreduce", "comm", begin, end, {{"bytes", n}});
//   t.write();                                   // at the end
//
// Threads: the main thread's slices (tid 0, "compute") nest, as scopes do; the
// communicator's worker (tid 1, "collectives") runs one collective at a time, as does
// each subgroup's (tid 2 and up, named by name_thread). Perfetto
// rejects slices of one thread that overlap without nesting: neither thread makes any.
// Events are kept in memory (some tens of bytes each, tens a step) and written at the
// end. Thread-safe. Errors: atomic_write_file's, and Error(IoErr) when the folder cannot
// be made.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "rkit/jsonl.hpp"

namespace rkit::rtrain {

class Tracer {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kComputeThread = 0, kCommThread = 1;

  Tracer() = default;  // disabled
  Tracer(std::string dir, int rank, int world);
  bool enabled() const { return !dir_.empty(); }

  // Runs `barrier` and takes the moment it returns as this rank's zero (every rank does).
  void align(const std::function<void()>& barrier);

  // A slice of the main thread from now until the returned object is destroyed.
  class Slice {
   public:
    Slice() = default;
    Slice(Slice&& o) noexcept
        : t_(o.t_), name_(std::move(o.name_)), cat_(o.cat_), args_(std::move(o.args_)), begin_(o.begin_) {
      o.t_ = nullptr;
    }
    Slice& operator=(Slice&&) = delete;
    ~Slice() {
      if (t_) t_->complete(kComputeThread, std::move(name_), cat_, begin_, Clock::now(), std::move(args_));
    }

   private:
    friend class Tracer;
    Tracer* t_ = nullptr;
    std::string name_;
    const char* cat_ = "";
    Json args_;
    Clock::time_point begin_{};
  };
  Slice slice(std::string name, const char* cat, Json args = nullptr) {
    Slice s;
    if (!enabled()) return s;
    s.t_ = this;
    s.name_ = std::move(name);
    s.cat_ = cat;
    s.args_ = std::move(args);
    s.begin_ = Clock::now();
    return s;
  }
  // A slice of thread `tid` that ran from `begin` to `end`.
  void complete(int tid, std::string name, const char* cat, Clock::time_point begin, Clock::time_point end,
                Json args = nullptr);

  // Names thread `tid` (past the two above: a subgroup's collectives).
  void name_thread(int tid, std::string name);

  // DIR/rank-R.trace.json.gz, written whole (a temporary file renamed); returns its path.
  std::string write();

 private:
  struct Event {
    int tid;
    std::string name;
    const char* cat;
    std::int64_t begin_ns, dur_ns;  // from the zero
    Json args;
  };
  std::string dir_;
  int rank_ = 0, world_ = 1;
  Clock::time_point zero_ = Clock::now();
  double zero_unix_s_ = 0;
  std::mutex mu_;
  std::vector<Event> events_;
  std::vector<std::pair<int, std::string>> thread_names_;
};

// A slice "forward 3" (cat "forward", args {"layer": 3}) of `tracer`'s main thread, for a
// layer's pass; nothing, not even the name's formatting, without a tracer.
Tracer::Slice layer_slice(Tracer* tracer, const char* pass, std::size_t layer);

// The file of one rank's trace in `dir`.
std::string trace_file(const std::string& dir, int rank);

// Reads gzip-compressed (or plain) JSON; Error(NoInput) when missing, Error(DataErr) when
// it is not a trace (no traceEvents array).
Json read_trace(const std::string& path);

// One timeline of every rank-R.trace.json.gz in `dir` (rank order; a process per rank),
// written gzip-compressed to `out`; returns how many ranks and events it holds.
// Error(NoInput) when `dir` has no rank's trace.
std::pair<int, std::size_t> merge_traces(const std::string& dir, const std::string& out);

}  // namespace rkit::rtrain
