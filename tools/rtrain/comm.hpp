// File: rtrain/comm.hpp
//
// The communication layer of `rtrain run`: data-parallel collectives between the worker
// processes that `rtrain launch` (or torchrun) starts, on Gloo's TCP transport, CPU only.
// As with torch's env:// rendezvous, rank 0 hosts a key-value store (TcpStore) on
// MASTER_ADDR:MASTER_PORT; every rank publishes its Gloo addresses there and connects a
// full mesh. Without RANK/WORLD_SIZE there is one rank and no communication at all.
//
//   auto comm = Communicator::connect(DistEnv::from_env(), std::chrono::seconds(60));
//   comm->set_buckets(grads.data(), {{0, 1 << 20}, {1 << 20, n - (1 << 20)}}, 1.0f / comm->world());
//   for (...) {
//     comm->begin_step();
//     ...backward of the last layers...; comm->ready(1);   // all-reduced while backward goes on
//     ...backward of the first layers...; comm->ready(0);
//     CommTimes t = comm->wait();                          // grads now hold the mean over ranks
//   }
//
// Results are bit-identical on every rank and the same run to run for a given world size
// (Gloo's ring all-reduce fixes the order of the additions; the scale is applied after
// the sum, the same way everywhere). A peer that dies or stalls past the timeout surfaces
// as an rkit::Error (Unavailable) from the next blocking call on the caller's thread.
//
// Rank 0's store (tcp_store.hpp) listens on MASTER_ADDR only and serves only the ranks that
// prove the run's secret (the key "workers" of RKIT_RUN_SECRET, which rtrain launch
// hands its workers); without a secret (torchrun), only ranks of this user on loopback.
//
// Addresses: Gloo's TCP device binds 127.0.0.1 when MASTER_ADDR is a loopback address
// (all ranks on this machine), else the address of this host's name (gethostname(2)),
// unless GLOO_SOCKET_IFNAME names an interface to use (as in PyTorch).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rkit/collectives.hpp"
#include "run_secret.hpp"
#include "tcp_store.hpp"

namespace rkit::rtrain {

class Tracer;

// Where this worker sits in the job, from the environment torchrun-style launchers set.
struct DistEnv {
  int rank = 0, world = 1, local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // The run's secret (RKIT_RUN_SECRET, else RKIT_RUN_SECRET_FILE); none: the same-user
  // mode of tcp_store.hpp, on a loopback MASTER_ADDR only.
  std::optional<RunSecret> secret;

  // Reads RANK, WORLD_SIZE, LOCAL_RANK (default 0), MASTER_ADDR (default 127.0.0.1),
  // MASTER_PORT (default 29500, 1 to 65535) and, for more than one rank, the secret.
  // Neither RANK nor WORLD_SIZE set: one rank.
  // Error(Usage) on a malformed value ("RANK='x' is not a non-negative integer"), only one
  // of RANK and WORLD_SIZE set, WORLD_SIZE < 1, RANK >= WORLD_SIZE or LOCAL_RANK >= WORLD_SIZE,
  // or, for more than one rank, no secret while MASTER_ADDR is not a loopback address;
  // the errors of RunSecret::from_env for a bad secret.
  static DistEnv from_env();
};

// Time one step's gradient all-reduce took.
struct CommTimes {
  double comm_s = 0;             // how long the step's bucket all-reduces ran (on the worker thread)
  double exposed_s = 0;          // how long wait() blocked the caller
  std::uint64_t bytes_sent = 0;  // what this rank sent for them (ring_bytes_sent of each bucket)
  // The share of the communication hidden behind computation: 1 - exposed/comm clamped
  // to [0, 1]; 1 when comm_s == 0.
  double hidden_fraction() const;
};

// What a rank's collectives sent and how long they ran, since it connected; the step
// counters of rtrain run are differences of two of these.
struct CommCounters {
  double busy_s = 0;                                              // time the worker thread spent in collectives
  std::array<std::uint64_t, std::size(kAllCollectives)> bytes{};  // sent, by Collective (ring_bytes_sent)
  std::uint64_t send_recv = 0;                                    // sent point to point (Communicator::send)
  std::uint64_t& operator[](Collective c) { return bytes[static_cast<std::size_t>(c)]; }
  std::uint64_t operator[](Collective c) const { return bytes[static_cast<std::size_t>(c)]; }
  CommCounters operator-(const CommCounters& earlier) const;
  CommCounters& operator+=(const CommCounters& more);
};

// A point-to-point send or receive in flight (Communicator::send and recv). Movable, not
// copyable; the buffer must stay untouched until wait() returns.
class Transfer {
 public:
  Transfer();  // nothing in flight
  Transfer(Transfer&&) noexcept;
  Transfer& operator=(Transfer&&) noexcept;
  // One still in flight (an error left it so) is abandoned: its Gloo buffer is leaked
  // rather than freed under a transfer the device loop may still be doing.
  ~Transfer();
  bool pending() const { return buf_ != nullptr; }
  // Blocks until the data has left (send) or arrived (recv); returns the seconds it
  // blocked (0 when nothing is in flight). Error(Unavailable) when the peer is gone or
  // silent past the communicator's timeout.
  double wait();

 private:
  friend class Communicator;
  struct Buffer;
  std::unique_ptr<Buffer> buf_;
};

// Collectives among the ranks of a job. Not copyable; one per process (or, in tests, per
// thread standing for a rank). The public calls are meant for one caller thread; the
// collectives themselves run on the communicator's worker thread, one at a time in
// submission order, each with its own Gloo tag, so that all ranks stay in step as long
// as they make the same calls in the same order.
//
// Errors: a Gloo failure (peer closed its connection, I/O error, timeout) becomes
// Error(Unavailable, "rank 0 of 2: allreduce #7 (bucket 1, 4096 floats) with rank 1:
// Connection closed by peer [...]"), thrown on the caller's thread by the failing call or,
// for bucket all-reduces, by wait(); never a hang past the timeout. After a failure the
// communicator is broken: every later collective throws the same error at once.
// A SIGPIPE from writing to a dead peer's socket is blocked in the threads that write
// (the process's signal dispositions are left alone).
class Communicator {
 public:
  // world == 1: no store, no sockets, every collective is a no-op that costs nothing
  // (all-reduce and broadcast leave the data as it is; the bucket scale still applies).
  // Else rank 0 hosts the TcpStore on env.master_addr:env.master_port, every rank connects
  // to it (waiting up to `timeout` for rank 0) and to every other rank. `timeout` also bounds every
  // collective: a peer silent for that long is an error, never a hang.
  // Error(Usage) for a rank outside [0, world) or, world > 1, a master_port outside 1 to 65535;
  // Error(Unavailable) when the store or a peer cannot be reached in time; Error(NoPerm)
  // when the store and this rank do not share the secret.
  static std::unique_ptr<Communicator> connect(const DistEnv& env, std::chrono::milliseconds timeout);

  // Joins the worker thread (a collective in flight finishes or times out; queued ones
  // are dropped), closes the connections and, on rank 0, stops the store.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }

  // Blocking collectives: they return when this rank's part is done.
  // In place: data[i] becomes the sum over ranks of data[i].
  void allreduce_sum(float* data, std::size_t n);
  void allreduce_sum(double* data, std::size_t n);
  // `bytes` bytes of root's `data` copied into every rank's `data`. Error(Usage) for a bad root.
  void broadcast(void* data, std::size_t bytes, int root);
  // Returns once every rank has entered the barrier.
  void barrier();
  // In place: `data` holds world * block doubles, this rank's at rank * block; afterwards
  // every rank's block is at its place on every rank.
  void allgather(double* data, std::size_t block);

  // Queued collectives for the sharded strategies, run on the worker thread in call order
  // (every rank must make the same calls in the same order) while the caller goes on;
  // each returns a ticket that wait_for() waits on. The caller must not touch the data
  // until then. One rank: each is done (as for world 1 above) before it returns.
  using Ticket = std::uint64_t;
  // In place: data[0, n) becomes the sum over ranks, times `scale`.
  Ticket start_allreduce(float* data, std::size_t n, float scale, std::string what);
  // In place (gloo_reduce_scatter_sum): block r of the sum over ranks of data[0, world *
  // block), times `scale`, at r * block on rank r; then `then()` runs on the worker thread
  // (a copy of the block to where it is kept, say), before the ticket is done.
  Ticket start_reduce_scatter(float* data, std::size_t block, float scale, std::function<void()> then,
                              std::string what);
  // In place (gloo_allgather): every rank's block of data[0, world * block) at its place.
  Ticket start_allgather(float* data, std::size_t block, std::string what);
  // Blocks until the ticket's collective (and every one queued before it) is done and
  // returns the seconds it blocked; the communicator's error when one failed.
  double wait_for(Ticket ticket);
  // Waits for every collective queued so far and swallows their errors: for a
  // destructor of buffers they use, when an error has left some in flight.
  void drain() noexcept;
  // This rank's collectives so far.
  CommCounters counters() const;
  // Every collective from now on is a slice of the tracer's thread `tid` ("collectives"
  // by default; a subgroup's its own), with its bytes; before the first collective, and
  // the tracer must outlive the communicator.
  void set_tracer(Tracer* tracer, int tid = 1);

  // A communicator of the ranks `members` (ranks of this one, ascending, this rank among
  // them), whose rank r is members[r]: the groups of a grid of ranks (tensor, pipeline,
  // data parallel). Every member calls it with the same members and `name`, which no
  // other group of this communicator uses; ranks outside the group do not call it. It
  // connects through this communicator's store, shares its timeout, and must not outlive
  // it. Collectives of a subgroup run on its own worker thread, in step with the group's
  // other members only. One member: a communicator of one rank. Error(Software) for
  // members that are not ranks in ascending order or leave this rank out; the errors
  // of connect().
  std::unique_ptr<Communicator> subgroup(const std::vector<int>& members, const std::string& name);

  // Point to point, as torch.distributed's isend and irecv: `n` floats to or from rank
  // `peer`, in flight while the caller goes on (posted on the caller's thread, carried by
  // Gloo's device loop, not the worker). Messages between two ranks are matched in the
  // order each side posts them. Error(Software) for this rank or no such rank, or one
  // rank in all. Bytes sent count in counters().send_recv.
  Transfer send(int peer, const float* data, std::size_t n);
  Transfer recv(int peer, float* data, std::size_t n);

  // Bucketed gradient all-reduce, overlapped with the backward pass.
  // set_buckets: once, before the first step (again between steps to change them):
  // `grads` is the flat float buffer, which must outlive its use here; each bucket an
  // {offset, count} range of it. The ranges must lie inside the buffer and not overlap
  // (not checked); every rank must give the same layout and scale. Error(Software) while
  // a step is open.
  void set_buckets(float* grads, std::vector<std::pair<std::size_t, std::size_t>> buckets, float scale);
  // Opens a step. Error(Software) when the previous step was not waited for.
  void begin_step();
  // Bucket `bucket`'s gradients are final: its all-reduce is queued now and runs while the
  // caller goes on; the caller must not touch the bucket until wait() returns. Any order,
  // but every rank must call ready in the same order. Error(Software) for an unknown bucket,
  // a bucket readied twice in a step, or no open step.
  void ready(std::size_t bucket);
  // Blocks until every bucket of the step is summed across ranks and multiplied by the
  // scale, closes the step and returns its times. Error(Software) when a bucket was never
  // readied; the communicator's error when an all-reduce failed.
  CommTimes wait();

 private:
  struct Worker;
  Communicator() = default;

  Transfer post(bool sending, int peer, float* data, std::size_t n);

  int rank_ = 0, world_ = 1;
  std::unique_ptr<Worker> worker_;                  // null when world == 1
  std::vector<std::uint32_t> sent_to_, recv_from_;  // point-to-point messages posted, by peer

  float* grads_ = nullptr;
  std::vector<std::pair<std::size_t, std::size_t>> buckets_;
  float scale_ = 1;
  bool step_open_ = false;
  std::vector<bool> readied_;
  std::uint64_t step_last_ = 0;   // the worker sequence number of the step's last queued bucket
  std::uint64_t step_bytes_ = 0;  // what the step's buckets send
};

}  // namespace rkit::rtrain
