// File: rkit/parallel.hpp
//
// An ordered pipeline: `threads` workers run work(i, worker) for i = 0..count-1, at
// most `window` items ahead of the consumer, and the calling thread receives each
// result in index order through consume(i, result). Memory stays bounded by the
// window, output stays in order (rckpt writes archives sequentially; rcost sums an
// input's chunks in input order, so that its figures do not depend on the threads)
// and the workers keep every core busy. rkit's one worker pool: a tool that splits
// work over threads uses this rather than its own.
//
//   ordered_parallel<Frame>(frames.size(), threads, 2 * threads,
//       [&](std::size_t i, unsigned worker) { return encode(i, encoders[worker]); },
//       [&](std::size_t i, Frame&& f) { write(f); });
//
// An exception from work(i) is rethrown by the consumer when it reaches i; one from
// consume stops the workers. Either way every thread is joined before it propagates.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace rkit {

// Byte buffers handed from workers to the consumer and back, so that frame-sized
// buffers are reused instead of faulted in afresh for every frame. Thread-safe.
class BufferPool {
 public:
  std::vector<std::byte> take() {
    std::lock_guard lock(mu_);
    if (free_.empty()) return {};
    auto b = std::move(free_.back());
    free_.pop_back();
    return b;
  }
  void give(std::vector<std::byte>&& b) {
    std::lock_guard lock(mu_);
    free_.push_back(std::move(b));
  }

 private:
  std::mutex mu_;
  std::vector<std::vector<std::byte>> free_;
};

template <class Result, class Work, class Consume>
void ordered_parallel(std::size_t count, unsigned threads, std::size_t window, Work&& work, Consume&& consume) {
  if (count == 0) return;
  if (threads == 0) threads = 1;
  if (window < threads) window = threads;
  struct Slot {
    std::optional<Result> result;
    std::exception_ptr error;
    bool ready = false;
  };
  std::vector<Slot> slots(window);
  std::mutex mu;
  std::condition_variable claimable, ready;
  std::size_t next = 0, consumed = 0;
  bool stop = false;

  auto worker = [&](unsigned self) {
    for (;;) {
      std::size_t i;
      {
        std::unique_lock lock(mu);
        claimable.wait(lock, [&] { return stop || next >= count || next < consumed + window; });
        if (stop || next >= count) return;
        i = next++;
      }
      Slot done;
      try {
        done.result.emplace(work(i, self));
      } catch (...) {
        done.error = std::current_exception();
      }
      done.ready = true;
      std::lock_guard lock(mu);
      slots[i % window] = std::move(done);
      ready.notify_all();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads);
  auto stop_all = [&] {
    {
      std::lock_guard lock(mu);
      stop = true;
    }
    claimable.notify_all();
    for (auto& t : pool) t.join();
  };
  try {
    for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker, t);
    for (std::size_t i = 0; i < count; ++i) {
      Slot slot;
      {
        std::unique_lock lock(mu);
        ready.wait(lock, [&] { return slots[i % window].ready; });
        slot = std::move(slots[i % window]);
        slots[i % window] = Slot{};
        consumed = i + 1;
      }
      claimable.notify_all();
      if (slot.error) std::rethrow_exception(slot.error);
      consume(i, std::move(*slot.result));
    }
  } catch (...) {
    stop_all();
    throw;
  }
  stop_all();
}

}  // namespace rkit
