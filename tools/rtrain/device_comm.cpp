// The CPU's DeviceComm (device_comm.hpp): the communicator's queued Gloo collectives and
// point-to-point transfers, whose tickets are told apart by their top bit.
#include "device_comm.hpp"

#include <cstring>
#include <map>
#include <utility>

#include "rkit/error.hpp"

namespace rkit::rtrain {
namespace {

constexpr DeviceComm::Ticket kTransfer = DeviceComm::Ticket{1} << 63;

class GlooDeviceComm final : public DeviceComm {
 public:
  GlooDeviceComm(Communicator& comm, std::unique_ptr<Communicator> owned) : comm_(comm), owned_(std::move(owned)) {}
  ~GlooDeviceComm() override { comm_.drain(); }  // transfers still pending are abandoned (Transfer)

  Communicator& host() const override { return comm_; }

  Ticket start_allreduce(float* data, std::size_t n, float scale, std::string what) override {
    return comm_.start_allreduce(data, n, scale, std::move(what));
  }
  Ticket start_reduce_scatter(float* data, std::size_t block, float scale, float* keep, std::string what) override {
    const float* mine = data + static_cast<std::size_t>(rank()) * block;
    std::function<void()> then;
    if (keep != mine) then = [keep, mine, block] { std::memcpy(keep, mine, block * sizeof(float)); };
    return comm_.start_reduce_scatter(data, block, scale, std::move(then), std::move(what));
  }
  Ticket start_allgather(float* data, std::size_t block, std::string what) override {
    return comm_.start_allgather(data, block, std::move(what));
  }
  Ticket send(int peer, const float* data, std::size_t n) override { return keep(comm_.send(peer, data, n)); }
  Ticket recv(int peer, float* data, std::size_t n) override { return keep(comm_.recv(peer, data, n)); }

  double wait_for(Ticket t) override {
    if (t == 0) return 0;
    if (!(t & kTransfer)) return comm_.wait_for(t);
    const auto it = transfers_.find(t);
    if (it == transfers_.end()) throw Error(Exit::Software, "rtrain: a transfer waited for twice");
    Transfer done = std::move(it->second);
    transfers_.erase(it);
    return done.wait();
  }
  void drain() noexcept override { comm_.drain(); }
  CommCounters counters() const override { return comm_.counters(); }
  std::unique_ptr<DeviceComm> subgroup(const std::vector<int>& members, const std::string& name) override {
    std::unique_ptr<Communicator> sub = comm_.subgroup(members, name);
    Communicator& ref = *sub;
    return gloo_device_comm(ref, std::move(sub));
  }
  void set_tracer(Tracer* tracer, int tid) override { comm_.set_tracer(tracer, tid); }

 private:
  Ticket keep(Transfer t) {
    const Ticket id = kTransfer | ++transfer_count_;
    transfers_.emplace(id, std::move(t));
    return id;
  }

  Communicator& comm_;
  std::unique_ptr<Communicator> owned_;  // a subgroup's; closed after the transfers below are abandoned
  std::map<Ticket, Transfer> transfers_;
  std::uint64_t transfer_count_ = 0;
};

}  // namespace

std::unique_ptr<DeviceComm> gloo_device_comm(Communicator& comm, std::unique_ptr<Communicator> owned) {
  return std::make_unique<GlooDeviceComm>(comm, std::move(owned));
}

}  // namespace rkit::rtrain
