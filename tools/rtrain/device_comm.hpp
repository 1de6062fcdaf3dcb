// File: rtrain/device_comm.hpp
//
// Collectives on a device's memory, ordered with the device's operators: what the sharded
// and model-parallel strategies communicate with (strategy_zero.cpp, strategy_mp.cpp).
// Device::collectives makes one over the run's communicator: on the CPU the
// communicator's own queued Gloo collectives and point-to-point transfers (host memory
// is the device's); on a GPU (cuda_device.cpp) NCCL on streams of the group's own,
// ordered after the compute stream's work by events, the compute stream ordered after a
// collective by wait_for.
//
//   std::unique_ptr<DeviceComm> world = dev.collectives(comm);
//   auto t = world->start_reduce_scatter(grads, shard, 1.0f / world->world(), keep, "layer 3");
//   ...more work on the device...
//   world->wait_for(t);       // operators enqueued from now on see `keep`
//   std::unique_ptr<DeviceComm> tp = world->subgroup({0, 1}, "tp-d0-s0");
//
// As for Communicator: every call is collective over the group (the same calls in the
// same order on every member), buffers stay untouched by the caller until their ticket is
// waited for, errors are Error(Unavailable) naming the collective. wait_for on the CPU
// blocks until the data is there and returns the seconds it blocked; on a GPU it orders
// the compute stream after the collective and returns at once (0 s: the host does not
// wait), so a GPU run's exposed and bubble times count only what the host waited for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm.hpp"

namespace rkit::rtrain {

class DeviceComm {
 public:
  using Ticket = std::uint64_t;  // 0: nothing to wait for
  virtual ~DeviceComm() = default;
  int rank() const { return host().rank(); }
  int world() const { return host().world(); }
  // The group's host communicator: blocking collectives on host memory (the gradient
  // norm's sum, barriers), and what a subgroup meets through.
  virtual Communicator& host() const = 0;

  // In place: data[0, n) becomes the sum over ranks, times `scale`.
  virtual Ticket start_allreduce(float* data, std::size_t n, float scale, std::string what) = 0;
  // Block r of the sum over ranks of data[0, world * block), times `scale`, into rank r's
  // `keep` (block floats; data + rank * block is in place); data's other blocks are
  // scratch afterwards.
  virtual Ticket start_reduce_scatter(float* data, std::size_t block, float scale, float* keep, std::string what) = 0;
  // In place: every rank's block of data[0, world * block) at its place.
  virtual Ticket start_allgather(float* data, std::size_t block, std::string what) = 0;
  // `n` floats to or from rank `peer` of the group; messages between two ranks match in
  // the order each side posts them.
  virtual Ticket send(int peer, const float* data, std::size_t n) = 0;
  virtual Ticket recv(int peer, float* data, std::size_t n) = 0;
  // The ticket's transfer or collective (with every collective queued before it) is done
  // for what the device does next; the seconds the host blocked for it. 0 is done at once.
  virtual double wait_for(Ticket t) = 0;
  // Waits for everything in flight and swallows its errors: for a destructor of buffers
  // they use, when an error has left some in flight.
  virtual void drain() noexcept = 0;
  // What this group sent since it was made, on the device and through host().
  virtual CommCounters counters() const = 0;
  // The group of `members` (ranks of this group, ascending, this rank among them), as
  // Communicator::subgroup, with its own collectives; must not outlive this one.
  virtual std::unique_ptr<DeviceComm> subgroup(const std::vector<int>& members, const std::string& name) = 0;
  // The group's collectives as slices of the tracer's thread `tid` (Communicator::set_tracer).
  virtual void set_tracer(Tracer* tracer, int tid) = 0;
};

// The CPU's: the communicator's Gloo collectives on host memory (owning it when `owned`).
std::unique_ptr<DeviceComm> gloo_device_comm(Communicator& comm, std::unique_ptr<Communicator> owned = nullptr);

}  // namespace rkit::rtrain
