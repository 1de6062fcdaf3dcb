// rtrain's communication layer: the worker environment, and a communicator that runs Gloo
// collectives on one worker thread, met through rank 0's TcpStore (tcp_store.hpp; Debian's
// Gloo has no TCP store). Gloo's device, rendezvous, calls and errors are rkit/gloo.hpp's,
// shared with rbench's comm.gloo.
#include "comm.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gloo/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <thread>

#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/gloo.hpp"
#include "trace.hpp"

namespace rkit::rtrain {

namespace {

using Clock = std::chrono::steady_clock;

// --- environment ----------------------------------------------------------------------

// NAME's value as an integer in [lo, hi]; Error(Usage) naming the variable otherwise.
int env_int(const char* name, const char* text, int lo, int hi, const char* expected) {
  const std::string s = text;
  int value = 0;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, value);
  if (s.empty() || ec != std::errc() || p != end || value < lo || value > hi)
    throw Error(Exit::Usage, fmt::format("{}='{}' is not {}", name, s, expected));
  return value;
}

// Gloo writes to its sockets with writev(2), which raises SIGPIPE when the peer is gone
// and so would kill the process before Gloo can report the error. Blocks SIGPIPE on this
// thread, and so in the threads it starts meanwhile (Gloo's device loop, the worker, the
// store's server), where it stays blocked; on exit, discards a SIGPIPE raised here and
// restores this thread's mask. The process's disposition is left alone.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeBlocked() {
    if (sigismember(&old_, SIGPIPE)) return;
    sigset_t pending;
    sigemptyset(&pending);
    if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE)) {
      const timespec zero{};
      sigtimedwait(&pipe_, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t pipe_, old_;
};

// p[0, n) *= scale, after a sum: the same on every rank, so identical results.
void scale_floats(float* p, std::size_t n, float scale) {
  if (scale != 1.0f)
    for (std::size_t i = 0; i < n; ++i) p[i] *= scale;
}

}  // namespace

// --- DistEnv --------------------------------------------------------------------------

DistEnv DistEnv::from_env() {
  DistEnv env;
  const char* rank = std::getenv("RANK");
  const char* world = std::getenv("WORLD_SIZE");
  if (!rank && !world) return env;
  if (!rank || !world)
    throw Error(Exit::Usage,
                fmt::format("{} is set but {} is not", rank ? "RANK" : "WORLD_SIZE", rank ? "WORLD_SIZE" : "RANK"),
                "set both, as rtrain launch and torchrun do, or neither for one rank");
  constexpr int kMax = std::numeric_limits<int>::max();
  env.world = env_int("WORLD_SIZE", world, 1, kMax, "a positive integer");
  env.rank = env_int("RANK", rank, 0, kMax, "a non-negative integer");
  if (env.rank >= env.world)
    throw Error(Exit::Usage, fmt::format("RANK={} is not below WORLD_SIZE={}", env.rank, env.world));
  if (const char* v = std::getenv("LOCAL_RANK")) {
    env.local_rank = env_int("LOCAL_RANK", v, 0, kMax, "a non-negative integer");
    if (env.local_rank >= env.world)
      throw Error(Exit::Usage, fmt::format("LOCAL_RANK={} is not below WORLD_SIZE={}", env.local_rank, env.world));
  }
  if (const char* v = std::getenv("MASTER_ADDR")) {
    if (!*v) throw Error(Exit::Usage, "MASTER_ADDR is empty");
    env.master_addr = v;
  }
  if (const char* v = std::getenv("MASTER_PORT"))
    env.master_port = env_int("MASTER_PORT", v, 1, 65535, "a port number (1 to 65535)");
  if (env.world > 1) {
    env.secret = RunSecret::from_env();
    if (!env.secret && !is_loopback(env.master_addr))
      throw Error(Exit::Usage,
                  fmt::format("MASTER_ADDR={} is not a loopback address, and there is no run secret", env.master_addr),
                  "set RKIT_RUN_SECRET or RKIT_RUN_SECRET_FILE, the same on every rank (rtrain launch does), "
                  "so that only the run's ranks reach rank 0's store");
  }
  return env;
}

// --- CommTimes ------------------------------------------------------------------------

double CommTimes::hidden_fraction() const {
  if (comm_s <= 0) return 1;
  return std::clamp(1 - exposed_s / comm_s, 0.0, 1.0);
}

// --- Communicator ---------------------------------------------------------------------

// The Gloo context and the thread that runs the collectives, one at a time in order.
struct Communicator::Worker {
  struct Task {
    std::string op, detail;                         // "allreduce", "bucket 2, 1024 floats": for errors
    std::function<void(std::uint32_t)> run;         // the argument: the collective's Gloo tag
    bool timed = false;                             // a bucket all-reduce: counts in step_comm_s
    std::optional<Collective> kind = std::nullopt;  // what it counts as in the counters (none: a barrier)
    std::uint64_t bytes = 0;                        // what this rank sends (ring_bytes_sent)
  };

  int rank = 0, world = 1;
  std::string group;         // a subgroup's name ("" for the whole job), for errors
  std::vector<int> members;  // a subgroup's ranks in its parent (for errors)
  std::chrono::milliseconds timeout{0};
  int trace_tid = 1;
  std::shared_ptr<TcpStore> store;  // shared with the subgroups, which meet through it
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::Context> context;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<Task> queue;
  std::uint64_t submitted = 0, completed = 0;  // tasks; a skipped one (after an error) counts as completed
  std::exception_ptr error;                    // the first failure: the communicator is broken
  bool stopping = false;
  double step_comm_s = 0;
  CommCounters counters;
  Tracer* tracer = nullptr;
  std::vector<float> scratch;  // the ring reduce-scatter's, reused (the worker thread's alone)
  std::thread thread;

  ~Worker() {
    if (thread.joinable()) {
      {
        std::lock_guard lock(mu);
        stopping = true;
      }
      cv.notify_all();
      thread.join();
    }
    context.reset();  // closes the pairs: the peers see this rank go
    device.reset();
    store.reset();  // rank 0: stops the store's server
  }

  std::uint64_t submit(Task t) {
    std::lock_guard lock(mu);
    if (error) std::rethrow_exception(error);
    if (t.kind) counters[*t.kind] += t.bytes;  // at submission: a step's bytes are the step's calls
    queue.push_back(std::move(t));
    const std::uint64_t seq = ++submitted;
    cv.notify_all();
    return seq;
  }

  // Blocks until task `seq` (and so every earlier one) has run; rethrows the first failure.
  void wait_for(std::uint64_t seq) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return completed >= seq; });
    if (error) std::rethrow_exception(error);
  }

  void run_blocking(Task t) { wait_for(submit(std::move(t))); }

  // "rank 0 of 2: allreduce #7 (bucket 1, 4096 floats) with rank 1: Connection closed by peer [10.0.0.2]:4711"
  // (the peer's rank is known for two ranks; else Gloo's message names its address).
  // Gloo's failures (a peer gone, a timeout) are Unavailable; anything else is a bug.
  Error failure(const Task& t, std::uint32_t tag, const std::exception* e) const {
    const std::string peer =
        world == 2 ? fmt::format(" with rank {}", members.empty() ? 1 - rank : members[1 - rank]) : "";
    const std::string what = fmt::format("{}: {} #{} ({}){}", who(), t.op, tag, t.detail, peer);
    if (!e) return Error(Exit::Software, what + ": unknown exception");
    const Error err = gloo_error(*e, {Exit::Unavailable, Exit::Unavailable, Exit::Software}, what);
    return Error(err.code(), err.what(),
                 err.code() == Exit::Unavailable
                     ? "a peer rank exited, was killed, or stalled past the timeout; see its log"
                     : "");
  }

  // "rank 0 of 2", or for a subgroup "rank 3 (1 of 2 in tensor group 1)".
  std::string who() const {
    if (members.empty()) return fmt::format("rank {} of {}", rank, world);
    return fmt::format("rank {} ({} of {} in {})", members[static_cast<std::size_t>(rank)], rank, world, group);
  }

  void loop() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, nullptr);  // see SigpipeBlocked
    std::uint32_t tag = 0;                       // the next collective's; the same sequence on every rank
    for (;;) {
      Task t;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return stopping || !queue.empty(); });
        if (stopping) return;
        t = std::move(queue.front());
        queue.pop_front();
        if (error) {  // out of step with the other ranks: run nothing more
          ++completed;
          cv.notify_all();
          continue;
        }
      }
      const std::uint32_t my_tag = tag++;
      std::exception_ptr failed;
      const auto start = Clock::now();
      try {
        t.run(my_tag);
      } catch (const Error&) {
        failed = std::current_exception();
      } catch (const std::exception& e) {
        failed = std::make_exception_ptr(failure(t, my_tag, &e));
      } catch (...) {
        failed = std::make_exception_ptr(failure(t, my_tag, nullptr));
      }
      const auto end = Clock::now();
      const double seconds = std::chrono::duration<double>(end - start).count();
      if (tracer && t.kind)
        tracer->complete(trace_tid, t.op, "comm", start, end, Json{{"bytes", t.bytes}, {"what", t.detail}});
      {
        std::lock_guard lock(mu);
        if (failed && !error) error = failed;
        if (t.timed) step_comm_s += seconds;
        if (t.kind) counters.busy_s += seconds;
        ++completed;
      }
      cv.notify_all();
    }
  }
};

std::unique_ptr<Communicator> Communicator::connect(const DistEnv& env, std::chrono::milliseconds timeout) {
  if (env.world < 1 || env.rank < 0 || env.rank >= env.world)
    throw Error(Exit::Usage, fmt::format("rank {} of world size {} is out of range", env.rank, env.world));
  if (env.world > 1 && (env.master_port < 1 || env.master_port > 65535))
    throw Error(Exit::Usage, fmt::format("master port {} is not a port number (1 to 65535)", env.master_port));
  std::unique_ptr<Communicator> c(new Communicator());
  c->rank_ = env.rank;
  c->world_ = env.world;
  if (env.world == 1) return c;

  const SigpipeBlocked no_sigpipe;  // here and in every thread started below
  auto w = std::make_unique<Worker>();
  w->rank = env.rank;
  w->world = env.world;
  w->timeout = timeout;
  const std::string where = fmt::format("rank {} of {}: rendezvous", env.rank, env.world);
  const std::string hint =
      "every rank must start and reach rank 0's store (MASTER_ADDR:MASTER_PORT) within the "
      "timeout; see the other ranks' logs";
  try {
    w->store = std::make_shared<TcpStore>(env.master_addr, env.master_port, env.rank == 0, timeout,
                                          env.secret ? env.secret->key("workers") : kNoSecret);
    w->device = gloo_tcp_device({.honour_ifname = true, .local = is_loopback(env.master_addr)});
    w->context = gloo_connect(*w->store, w->device, env.rank, env.world, timeout);
  } catch (const std::exception& e) {  // rkit::Error (the store's), gloo::Exception, gloo::EnforceNotMet
    throw gloo_error(e, {Exit::Unavailable, Exit::Unavailable, Exit::Unavailable}, where, hint);
  }
  w->thread = std::thread([wp = w.get()] { wp->loop(); });
  c->worker_ = std::move(w);
  return c;
}

Communicator::~Communicator() = default;

void Communicator::allreduce_sum(float* data, std::size_t n) {
  if (!worker_ || n == 0) return;
  auto ctx = worker_->context;
  worker_->run_blocking({"allreduce", fmt::format("{} floats", n),
                         [ctx, data, n](std::uint32_t tag) { gloo_allreduce_sum(ctx, data, n, tag); }, false,
                         Collective::Allreduce, ring_bytes_sent(Collective::Allreduce, n * sizeof(float), world())});
}

void Communicator::allreduce_sum(double* data, std::size_t n) {
  if (!worker_ || n == 0) return;
  auto ctx = worker_->context;
  worker_->run_blocking({"allreduce", fmt::format("{} doubles", n),
                         [ctx, data, n](std::uint32_t tag) { gloo_allreduce_sum(ctx, data, n, tag); }, false,
                         Collective::Allreduce, ring_bytes_sent(Collective::Allreduce, n * sizeof(double), world())});
}

void Communicator::broadcast(void* data, std::size_t bytes, int root) {
  if (root < 0 || root >= world_)
    throw Error(Exit::Usage, fmt::format("broadcast: root {} is not a rank of {}", root, world_));
  if (!worker_ || bytes == 0) return;
  std::shared_ptr<gloo::Context> ctx = worker_->context;
  worker_->run_blocking({"broadcast", fmt::format("{} bytes from rank {}", bytes, root),
                         [ctx, data, bytes, root](std::uint32_t tag) { gloo_broadcast(ctx, data, bytes, root, tag); },
                         // Gloo's broadcast is one-to-all: the root sends the whole to each other rank
                         false, Collective::Broadcast, rank_ == root ? bytes * (world_ - 1u) : 0});
}

void Communicator::barrier() {
  if (!worker_) return;
  std::shared_ptr<gloo::Context> ctx = worker_->context;
  worker_->run_blocking({"barrier", "all ranks", [ctx](std::uint32_t tag) { gloo_barrier(ctx, tag); }});
}

void Communicator::set_buckets(float* grads, std::vector<std::pair<std::size_t, std::size_t>> buckets, float scale) {
  if (step_open_) throw Error(Exit::Software, "set_buckets: a step is open; call wait() first");
  for (const auto& [offset, count] : buckets)
    if (offset + count < offset) throw Error(Exit::Software, "set_buckets: a bucket's range overflows");
  grads_ = grads;
  buckets_ = std::move(buckets);
  scale_ = scale;
  readied_.assign(buckets_.size(), false);
}

void Communicator::begin_step() {
  if (step_open_) throw Error(Exit::Software, "begin_step: the previous step was not waited for");
  std::fill(readied_.begin(), readied_.end(), false);
  step_open_ = true;
  step_last_ = 0;
  step_bytes_ = 0;
  if (worker_) {
    std::lock_guard lock(worker_->mu);
    worker_->step_comm_s = 0;  // no bucket task is in flight between steps
  }
}

void Communicator::ready(std::size_t bucket) {
  if (!step_open_) throw Error(Exit::Software, "ready: no step is open; call begin_step() first");
  if (bucket >= buckets_.size())
    throw Error(Exit::Software, fmt::format("ready: bucket {} of {} does not exist", bucket, buckets_.size()));
  if (readied_[bucket]) throw Error(Exit::Software, fmt::format("ready: bucket {} readied twice in one step", bucket));
  readied_[bucket] = true;
  float* p = grads_ + buckets_[bucket].first;
  const std::size_t n = buckets_[bucket].second;
  const float scale = scale_;
  if (!worker_) {
    scale_floats(p, n, scale);
    return;
  }
  auto ctx = worker_->context;
  const std::uint64_t bytes = ring_bytes_sent(Collective::Allreduce, n * sizeof(float), world_);
  step_bytes_ += bytes;
  Worker::Task t{"allreduce",
                 fmt::format("bucket {}, {} floats", bucket, n),
                 [ctx, p, n, scale](std::uint32_t tag) {
                   if (n > 0) gloo_allreduce_sum(ctx, p, n, tag);
                   scale_floats(p, n, scale);
                 },
                 true,
                 Collective::Allreduce,
                 bytes};
  step_last_ = worker_->submit(std::move(t));
}

CommTimes Communicator::wait() {
  if (!step_open_) throw Error(Exit::Software, "wait: no step is open; call begin_step() first");
  for (std::size_t b = 0; b < readied_.size(); ++b)
    if (!readied_[b]) throw Error(Exit::Software, fmt::format("wait: bucket {} was never readied this step", b));
  step_open_ = false;
  CommTimes t;
  if (!worker_) return t;
  const auto start = Clock::now();
  worker_->wait_for(step_last_);
  t.exposed_s = std::chrono::duration<double>(Clock::now() - start).count();
  std::lock_guard lock(worker_->mu);
  t.comm_s = worker_->step_comm_s;
  t.bytes_sent = step_bytes_;
  return t;
}

// --- queued collectives -----------------------------------------------------------------

CommCounters CommCounters::operator-(const CommCounters& earlier) const {
  CommCounters d;
  d.busy_s = busy_s - earlier.busy_s;
  for (std::size_t i = 0; i < bytes.size(); ++i) d.bytes[i] = bytes[i] - earlier.bytes[i];
  d.send_recv = send_recv - earlier.send_recv;
  return d;
}

CommCounters& CommCounters::operator+=(const CommCounters& more) {
  busy_s += more.busy_s;
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] += more.bytes[i];
  send_recv += more.send_recv;
  return *this;
}

void Communicator::allgather(double* data, std::size_t block) {
  if (!worker_ || block == 0) return;
  auto ctx = worker_->context;
  const std::uint64_t bytes = block * sizeof(double) * static_cast<std::uint64_t>(world_);
  worker_->run_blocking({"allgather", fmt::format("{} doubles a rank", block),
                         [ctx, data, block](std::uint32_t tag) { gloo_allgather(ctx, data, block, tag); }, false,
                         Collective::Allgather, ring_bytes_sent(Collective::Allgather, bytes, world_)});
}

Communicator::Ticket Communicator::start_allreduce(float* data, std::size_t n, float scale, std::string what) {
  if (!worker_) {
    scale_floats(data, n, scale);
    return 0;
  }
  auto ctx = worker_->context;
  return worker_->submit({"allreduce", fmt::format("{}, {} floats", what, n),
                          [ctx, data, n, scale](std::uint32_t tag) {
                            if (n > 0) gloo_allreduce_sum(ctx, data, n, tag);
                            scale_floats(data, n, scale);
                          },
                          false, Collective::Allreduce,
                          ring_bytes_sent(Collective::Allreduce, n * sizeof(float), world_)});
}

Communicator::Ticket Communicator::start_reduce_scatter(float* data, std::size_t block, float scale,
                                                        std::function<void()> then, std::string what) {
  float* mine = data + static_cast<std::size_t>(rank_) * block;
  if (!worker_) {
    scale_floats(mine, block, scale);
    if (then) then();
    return 0;
  }
  auto ctx = worker_->context;
  const std::uint64_t bytes = block * sizeof(float) * static_cast<std::uint64_t>(world_);
  return worker_->submit(
      {"reduce_scatter", fmt::format("{}, {} floats a rank", what, block),
       [ctx, data, mine, block, scale, then = std::move(then), w = worker_.get()](std::uint32_t tag) {
         gloo_reduce_scatter_sum(ctx, data, block, tag, w->scratch);
         scale_floats(mine, block, scale);
         if (then) then();
       },
       false, Collective::ReduceScatter, ring_bytes_sent(Collective::ReduceScatter, bytes, world_)});
}

Communicator::Ticket Communicator::start_allgather(float* data, std::size_t block, std::string what) {
  if (!worker_) return 0;
  auto ctx = worker_->context;
  const std::uint64_t bytes = block * sizeof(float) * static_cast<std::uint64_t>(world_);
  return worker_->submit({"allgather", fmt::format("{}, {} floats a rank", what, block),
                          [ctx, data, block](std::uint32_t tag) {
                            if (block > 0) gloo_allgather(ctx, data, block, tag);
                          },
                          false, Collective::Allgather, ring_bytes_sent(Collective::Allgather, bytes, world_)});
}

double Communicator::wait_for(Ticket ticket) {
  if (!worker_ || ticket == 0) return 0;
  const auto start = Clock::now();
  worker_->wait_for(ticket);
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void Communicator::set_tracer(Tracer* tracer, int tid) {
  if (!worker_) return;
  std::lock_guard lock(worker_->mu);
  worker_->tracer = tracer && tracer->enabled() ? tracer : nullptr;
  worker_->trace_tid = tid;
}

// --- subgroups ----------------------------------------------------------------------------

std::unique_ptr<Communicator> Communicator::subgroup(const std::vector<int>& members, const std::string& name) {
  const auto me = std::find(members.begin(), members.end(), rank_);
  bool ascending = !members.empty() && members.front() >= 0 && members.back() < world_;
  for (std::size_t i = 1; i < members.size(); ++i) ascending = ascending && members[i - 1] < members[i];
  if (!ascending || me == members.end())
    throw Error(Exit::Software, fmt::format("subgroup {}: ranks [{}] are not ranks of {} in ascending order with {}",
                                            name, fmt::join(members, ", "), world_, rank_));
  std::unique_ptr<Communicator> c(new Communicator());
  c->rank_ = static_cast<int>(me - members.begin());
  c->world_ = static_cast<int>(members.size());
  if (c->world_ == 1) return c;
  const SigpipeBlocked no_sigpipe;
  auto w = std::make_unique<Worker>();
  w->rank = c->rank_;
  w->world = c->world_;
  w->group = name;
  for (int m : members)
    w->members.push_back(worker_->members.empty() ? m : worker_->members[static_cast<std::size_t>(m)]);
  w->timeout = worker_->timeout;
  w->store = worker_->store;
  w->device = worker_->device;
  try {
    gloo::rendezvous::PrefixStore prefixed("group/" + name, *w->store);
    w->context = gloo_connect(prefixed, w->device, w->rank, w->world, w->timeout);
  } catch (const std::exception& e) {
    throw gloo_error(e, {Exit::Unavailable, Exit::Unavailable, Exit::Unavailable}, w->who() + ": rendezvous",
                     "every rank of the group must reach it within the timeout; see the other ranks' logs");
  }
  w->thread = std::thread([wp = w.get()] { wp->loop(); });
  c->worker_ = std::move(w);
  return c;
}

// --- point to point ---------------------------------------------------------------------

struct Transfer::Buffer {
  std::unique_ptr<gloo::transport::UnboundBuffer> buf;
  bool sending = false;
  std::chrono::milliseconds timeout{0};
  std::string what;  // "rank 0 of 2: send of 4096 floats to rank 1"
};

Transfer::Transfer() = default;
Transfer::Transfer(Transfer&&) noexcept = default;
Transfer& Transfer::operator=(Transfer&& o) noexcept {
  if (this != &o) {
    Transfer old(std::move(*this));
    buf_ = std::move(o.buf_);
  }
  return *this;
}
Transfer::~Transfer() {
  if (buf_) (void)buf_->buf.release();  // see transfer's declaration: never freed while Gloo may use it
}

double Transfer::wait() {
  if (!buf_) return 0;
  const auto start = Clock::now();
  try {
    const bool done = buf_->sending ? buf_->buf->waitSend(buf_->timeout) : buf_->buf->waitRecv(buf_->timeout);
    if (!done) throw Error(Exit::Unavailable, "aborted");
  } catch (const std::exception& e) {
    throw gloo_error(e, {Exit::Unavailable, Exit::Unavailable, Exit::Software}, buf_->what,
                     "a peer rank exited, was killed, or stalled past the timeout; see its log");
  }
  buf_.reset();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

Transfer Communicator::send(int peer, const float* data, std::size_t n) {
  return post(true, peer, const_cast<float*>(data), n);  // Gloo's buffer type is for both ways; a send only reads
}
Transfer Communicator::recv(int peer, float* data, std::size_t n) { return post(false, peer, data, n); }

Transfer Communicator::post(bool sending, int peer, float* data, std::size_t n) {
  if (!worker_ || peer < 0 || peer >= world_ || peer == rank_)
    throw Error(Exit::Software,
                fmt::format("{} with rank {}: not another rank of {}", sending ? "send" : "recv", peer, world_));
  if (sent_to_.empty()) {
    sent_to_.assign(static_cast<std::size_t>(world_), 0);
    recv_from_.assign(static_cast<std::size_t>(world_), 0);
  }
  // The slot: the sender's rank and its count of messages to this receiver, which both
  // sides keep (Gloo's collectives use prefixes 0x01 to 0x08, the reduce-scatter 0x20).
  const int src = sending ? rank_ : peer;
  std::uint32_t& count = (sending ? sent_to_ : recv_from_)[static_cast<std::size_t>(peer)];
  const std::uint64_t slot =
      gloo::Slot::build(0x21, (static_cast<std::uint32_t>(src) & 0xff) << 24 | (count++ & 0xffffff));
  Transfer t;
  t.buf_ = std::make_unique<Transfer::Buffer>();
  t.buf_->sending = sending;
  t.buf_->timeout = worker_->timeout;
  const int peer_rank = worker_->members.empty() ? peer : worker_->members[static_cast<std::size_t>(peer)];
  t.buf_->what = fmt::format("{}: {} of {} floats {} rank {}", worker_->who(), sending ? "send" : "recv", n,
                             sending ? "to" : "from", peer_rank);
  try {
    t.buf_->buf = worker_->context->createUnboundBuffer(data, n * sizeof(float));
    if (sending)
      t.buf_->buf->send(peer, slot);
    else
      t.buf_->buf->recv(peer, slot);
  } catch (const std::exception& e) {
    throw gloo_error(e, {Exit::Unavailable, Exit::Unavailable, Exit::Software}, t.buf_->what);
  }
  if (sending) {
    std::lock_guard lock(worker_->mu);
    worker_->counters.send_recv += n * sizeof(float);
  }
  return t;
}

void Communicator::drain() noexcept {
  if (!worker_) return;
  std::unique_lock lock(worker_->mu);
  const std::uint64_t last = worker_->submitted;
  worker_->cv.wait(lock, [&] { return worker_->completed >= last || worker_->stopping; });
}

CommCounters Communicator::counters() const {
  if (!worker_) return {};
  std::lock_guard lock(worker_->mu);
  return worker_->counters;
}

}  // namespace rkit::rtrain
