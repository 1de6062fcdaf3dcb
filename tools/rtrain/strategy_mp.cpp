// Tensor, pipeline and data parallelism on a grid of ranks (strategy.hpp), over the
// device's collectives (Gloo on the CPU, NCCL on a GPU: device_comm.hpp): Megatron-LM's
// scheme (Shoeybi et al. 2019; Narayanan et al. 2021) for rtrain's MLP.
//
// The grid: tp × pp × dp = world ranks, rank = (d * pp + s) * tp + t (tensor-parallel
// ranks next to each other, then stages, then replicas), each axis its own subgroup of
// the communicator (tensor group: the tp ranks of one stage of one replica; pipeline
// group: one rank a stage; data group: one rank a replica).
//
//   tensor   within a stage, layers in pairs: the first column-parallel (rank t holds
//            rows [t out/tp, (t+1) out/tp) of W and of b: its share of the outputs, the
//            activation applied there), the second row-parallel (rank t holds the same
//            columns of W, b whole); the pair's output is the all-reduced sum of the
//            ranks' partial products (Megatron's g), and in backward the gradient of the
//            pair's input is all-reduced (f; skipped for the model's first layer, whose
//            input needs none). Two all-reduces a pair a micro-batch; a transformer block
//            has two pairs (attention, MLP): Megatron's four. A layer left without a pair
//            is whole on every rank of the group.
//   pipeline layers cut in pp contiguous stages of about equal work (cut_stages);
//            the replica's rows in m micro-batches; stage s sends each micro-batch's
//            output to s+1 and the gradient of its input to s-1. GPipe: every forward,
//            then every backward; 1F1B: s's first pp-1-s forwards, then one forward one
//            backward, then the last backwards (at most pp-s micro-batches' activations
//            held instead of m). A flush (a barrier of the pipeline group) ends the step.
//   data     the replicas' gradients all-reduced (mean) layer by layer as the last
//            micro-batch's backward finishes each, overlapped with the rest of it.
//
// Bubble: the time a stage waits for a neighbour's activations or gradients, and for the
// flush: with equal stages, (pp-1)/(m+pp-1) of the pipeline's span, which starts when the
// stages have met at a barrier (its wait, the skew of their data, is exposed time). The gradient norm:
// each rank's squared norm of the parameters it alone holds (a replicated one counted on
// tensor rank 0, replica 0 only), all-reduced over every rank.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "device.hpp"
#include "device_comm.hpp"
#include "rkit/error.hpp"
#include "strategy.hpp"

namespace rkit::rtrain {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// One layer as this rank holds it: W [out, in] then b [bias], at `offset` of the rank's
// flat buffers. Column: out is the model's out / tp; Row: in is the model's in / tp.
struct Local {
  std::size_t layer = 0;  // the model's
  Split split = Split::Whole;
  std::size_t in = 0, out = 0, offset = 0;
  std::size_t count() const { return in * out + out; }
};

struct Grid {
  int tp = 1, pp = 1, dp = 1;
  int t = 0, s = 0, d = 0;
};

Grid grid_of(const std::string& strategy, const TrainConfig& c, int rank, int world) {
  Grid g;
  const auto given = [](unsigned v, int fallback) { return v > 0 ? static_cast<int>(v) : fallback; };
  g.tp = given(c.tensor_parallel, strategy == "tp" ? world : 1);
  g.pp = given(c.pipeline_parallel, strategy == "pp" ? world : 1);
  if (world % (g.tp * g.pp) != 0)
    throw Error(Exit::Usage,
                fmt::format("--strategy {}: {} tensor-parallel x {} pipeline ranks do not divide {} ranks", strategy,
                            g.tp, g.pp, world),
                "give --tensor-parallel and --pipeline-parallel whose product divides the rank count");
  g.dp = world / (g.tp * g.pp);
  g.t = rank % g.tp;
  g.s = rank / g.tp % g.pp;
  g.d = rank / (g.tp * g.pp);
  return g;
}

// The members of the group through this rank along one axis of the grid.
std::vector<int> members(const Grid& g, char axis) {
  std::vector<int> m;
  const int n = axis == 't' ? g.tp : axis == 's' ? g.pp : g.dp;
  for (int i = 0; i < n; ++i) {
    const int t = axis == 't' ? i : g.t, s = axis == 's' ? i : g.s, d = axis == 'd' ? i : g.d;
    m.push_back((d * g.pp + s) * g.tp + t);
  }
  return m;
}

class ModelParallel : public Strategy {
 public:
  ModelParallel(const StrategySetup& setup, const std::string& name)
      : comm_(setup.comm),
        dev_(setup.dev),
        config_(setup.config),
        grid_(grid_of(name, setup.config, setup.comm.rank(), setup.comm.world())),
        slots_(layer_slots(setup.config.layers)),
        tracer_(setup.tracer) {
    const std::vector<std::size_t> cut = pipeline_cut(slots_, grid_.pp);
    first_ = cut[static_cast<std::size_t>(grid_.s)];
    last_ = cut[static_cast<std::size_t>(grid_.s) + 1];
    place_layers();
    rows_ = config_.batch_size * static_cast<std::size_t>(grid_.tp * grid_.pp);
    micro_ = config_.micro_batches > 0 ? config_.micro_batches
             : grid_.pp > 1            ? 4u * static_cast<unsigned>(grid_.pp)
                                       : 1u;
    if (micro_ > rows_)
      throw Error(Exit::Usage,
                  fmt::format("{} micro-batches of a replica's {} rows: some would be empty", micro_, rows_),
                  "fewer --micro-batches, or a larger --batch-size");
    gpipe_ = config_.schedule == "gpipe";
    slots_held_ = gpipe_ ? micro_ : std::min<std::size_t>(micro_, static_cast<std::size_t>(grid_.pp - grid_.s));
    allocate();

    world_ = dev_.collectives(comm_);
    tp_ = world_->subgroup(members(grid_, 't'), fmt::format("tp-d{}-s{}", grid_.d, grid_.s));
    pp_ = world_->subgroup(members(grid_, 's'), fmt::format("pp-d{}-t{}", grid_.d, grid_.t));
    dp_ = world_->subgroup(members(grid_, 'd'), fmt::format("dp-s{}-t{}", grid_.s, grid_.t));
    if (tracer_) {
      tracer_->name_thread(2, "tensor-parallel collectives");
      tracer_->name_thread(3, "data-parallel collectives");
      tracer_->name_thread(4, "pipeline flush");
      tp_->set_tracer(tracer_, 2);
      dp_->set_tracer(tracer_, 3);
      pp_->set_tracer(tracer_, 4);
    }
  }

  ~ModelParallel() override {
    dp_->drain();  // an error between a layer's all-reduce and its wait
    tp_->drain();
    pp_->drain();  // the transfers still in flight
  }

  DataShard data_shard() const override { return {grid_.d, grid_.dp}; }
  bool reports_loss() const override { return grid_.s == grid_.pp - 1 && grid_.t == 0; }

  void upload_batch(const float* x, const float* y, const std::int32_t* labels, std::size_t rows) override {
    if (rows > rows_) throw Error(Exit::Software, "rtrain: a batch larger than the replica's buffers");
    dev_.copy_in(input_, x, rows * slots_.front().in * sizeof(float));
    if (config_.loss == Loss::Mse)
      dev_.copy_in(target_, y, rows * config_.outputs() * sizeof(float));
    else
      dev_.copy_in(labels_, labels, rows * sizeof(std::int32_t));
  }

  void load_state(const float* params, const float* exp_avg, const float* exp_avg_sq) override {
    std::vector<float> local(count_);
    for (auto [whole, dst] : {std::pair{params, params_}, {exp_avg, exp_avg_}, {exp_avg_sq, exp_avg_sq_}}) {
      for (const Local& L : local_) take(L, whole, local.data());
      dev_.copy_in(dst, local.data(), count_ * sizeof(float));
    }
  }

  // Each piece placed by the one rank that owns it, into zeros, and summed over every
  // rank: x + 0 is x, so the whole arrives exact.
  void gather_state(bool moments, float* params, float* exp_avg, float* exp_avg_sq) override {
    const std::size_t n = parameter_count(slots_);
    std::vector<float> whole(n), local(count_);
    const auto one = [&](const float* mine, float* out) {
      dev_.copy_out(local.data(), mine, count_ * sizeof(float));
      std::fill(whole.begin(), whole.end(), 0.0f);
      for (const Local& L : local_) put(L, local.data(), whole.data());
      comm_.allreduce_sum(whole.data(), n);
      if (out) std::memcpy(out, whole.data(), n * sizeof(float));
    };
    one(params_, params);
    if (moments) {
      one(exp_avg_, exp_avg);
      one(exp_avg_sq_, exp_avg_sq);
    }
  }

  void begin_step() override {
    start_ = counters();
    exposed_ = bubble_ = 0;
    std::fill(reduced_.begin(), reduced_.end(), 0);
  }

  double forward_backward(std::size_t rows, float loss_scale) override {
    if (grid_.pp > 1) {  // the stages start together: one's late data is no bubble of the other's
      const auto slice = trace("wait stages", "wait");
      const auto t = Clock::now();
      pp_->host().barrier();
      exposed_ += since(t);
    }
    const auto t0 = Clock::now();
    rows_now_ = rows;
    loss_scale_ = loss_scale;
    loss_sum_ = 0;
    for (std::size_t i = 0; i < slots_held_; ++i) expect_activations(i);
    for (const auto& [forward, i] : schedule()) {
      if (forward)
        forward_micro(i);
      else
        backward_micro(i);
    }
    for (DeviceComm::Ticket& t : sends_) wait_transfer(t);  // the last ones: delivered before the flush
    if (grid_.pp > 1) {
      const auto slice = trace("pipeline flush", "bubble");
      const auto t1 = Clock::now();
      pp_->host().barrier();
      bubble_ += since(t1);
    }
    pipeline_s_ = grid_.pp > 1 ? since(t0) : 0.0;
    {
      const auto slice = trace("wait gradients", "wait");
      for (DeviceComm::Ticket t : reduced_) exposed_ += dp_->wait_for(t);
    }
    return loss_sum_;
  }

  double grad_norm_squared() override {
    double sum = 0;
    if (grid_.d == 0)
      for (const Local& L : local_) {
        const bool shared = L.split == Split::Whole;  // every tensor rank holds it: counted once
        if (!shared || grid_.t == 0) sum += dev_.sum_squares(L.in * L.out, grads_ + L.offset);
        if (L.split == Split::Column || grid_.t == 0) sum += dev_.sum_squares(L.out, grads_ + L.offset + L.in * L.out);
      }
    const auto slice = trace("gradient norm", "wait");
    const auto t0 = Clock::now();
    comm_.allreduce_sum(&sum, 1);
    exposed_ += since(t0);
    return sum;
  }

  void optimizer_step(const kernels::AdamwStep& s) override {
    dev_.adamw(count_, params_, grads_, exp_avg_, exp_avg_sq_, s);
  }

  StepComm end_step() override {
    StepComm c;
    c.sent = counters() - start_;
    c.comm_s = c.sent.busy_s;
    c.exposed_s = exposed_;
    c.bubble_s = bubble_;
    c.pipeline_s = pipeline_s_;
    return c;
  }

  // Micro-batches of the pipeline's size, one after another through the stages.
  std::pair<double, std::size_t> evaluate(std::size_t rows) override {
    double loss = 0;
    std::size_t correct = 0;
    const std::size_t step = widest_micro();
    for (std::size_t off = 0; off < rows; off += step) {
      const std::size_t n = std::min(step, rows - off);
      const float* x = input_ + off * slots_.front().in;
      if (grid_.s > 0) pp_->wait_for(pp_->recv(grid_.s - 1, in_[0], n * slots_[first_].in));
      const float* out = run_forward(0, n, grid_.s > 0 ? in_[0] : x);
      if (grid_.s < grid_.pp - 1) {
        pp_->wait_for(pp_->send(grid_.s + 1, out, n * slots_[last_ - 1].out));
        continue;
      }
      const std::size_t k = config_.outputs();
      if (config_.loss == Loss::Mse) {
        loss += dev_.mse_loss(n, k, out, target_ + off * k, 0.0f, dout_[0]);
      } else {
        loss += dev_.cross_entropy_loss(n, k, out, labels_ + off, 0.0f, dout_[0]);
        correct += dev_.count_correct(n, k, out, labels_ + off);
      }
    }
    return {loss, correct};
  }

  MemoryHeld memory() const override {
    const std::uint64_t bytes = count_ * sizeof(float);
    return {bytes, bytes, 2 * bytes, buffer_floats_ * sizeof(float)};
  }

 private:
  // --- layout ----------------------------------------------------------------------------
  void place_layers() {
    const std::size_t tp = static_cast<std::size_t>(grid_.tp);
    const std::vector<Split> splits = tensor_splits(slots_, first_, last_, grid_.tp);
    std::size_t offset = 0;
    for (std::size_t l = first_; l < last_; ++l) {
      const LayerSlot& S = slots_[l];
      Local L{l, splits[l - first_], S.in, S.out, offset};
      if (L.split == Split::Column) L.out = S.out / tp;
      if (L.split == Split::Row) L.in = S.in / tp;
      offset += L.count();
      local_.push_back(L);
    }
    count_ = offset;
  }

  void allocate() {
    params_ = dev_.alloc(count_);
    grads_ = dev_.alloc(count_);
    exp_avg_ = dev_.alloc(count_);
    exp_avg_sq_ = dev_.alloc(count_);
    const std::size_t mb = widest_micro(), k = config_.outputs();
    std::size_t widest = 0;  // of any layer's input or output, whole
    for (std::size_t l = first_; l < last_; ++l) widest = std::max({widest, slots_[l].in, slots_[l].out});
    const auto take_floats = [&](std::size_t n) {
      buffer_floats_ += n;
      return dev_.alloc(n);
    };
    input_ = take_floats(rows_ * slots_.front().in);
    if (config_.loss == Loss::Mse)
      target_ = take_floats(rows_ * k);
    else
      labels_ = static_cast<std::int32_t*>(dev_.alloc_bytes(rows_ * sizeof(std::int32_t)));
    z_.resize(slots_held_);
    a_.resize(slots_held_);
    for (std::size_t h = 0; h < slots_held_; ++h) {
      for (const Local& L : local_) {
        z_[h].push_back(take_floats(mb * L.out));
        a_[h].push_back(L.layer + 1 == slots_.size() ? z_[h].back() : take_floats(mb * L.out));
      }
      in_.push_back(grid_.s > 0 ? take_floats(mb * slots_[first_].in) : nullptr);
      dx_.push_back(grid_.s > 0 ? take_floats(mb * slots_[first_].in) : nullptr);
      dout_.push_back(take_floats(mb * slots_[last_ - 1].out));
    }
    back_[0] = take_floats(mb * widest);
    back_[1] = take_floats(mb * widest);
    dbias_ = take_floats(widest);
    sends_.resize(slots_held_ * 2);
    activations_.resize(slots_held_);
    gradients_.resize(slots_held_);
    reduced_.assign(local_.size(), 0);
  }

  std::size_t widest_micro() const { return (rows_ + micro_ - 1) / micro_; }
  std::size_t micro_offset(std::size_t i) const { return i * rows_now_ / micro_; }
  std::size_t micro_rows(std::size_t i) const { return micro_offset(i + 1) - micro_offset(i); }

  // The stage's order of work: {forward?, micro-batch}.
  std::vector<std::pair<bool, std::size_t>> schedule() const {
    std::vector<std::pair<bool, std::size_t>> ops;
    const std::size_t m = micro_;
    if (gpipe_) {
      for (std::size_t i = 0; i < m; ++i) ops.emplace_back(true, i);
      for (std::size_t i = 0; i < m; ++i) ops.emplace_back(false, i);
      return ops;
    }
    const std::size_t warm = std::min(m, static_cast<std::size_t>(grid_.pp - 1 - grid_.s));
    for (std::size_t i = 0; i < warm; ++i) ops.emplace_back(true, i);
    for (std::size_t i = 0; i + warm < m; ++i) {
      ops.emplace_back(true, i + warm);
      ops.emplace_back(false, i);
    }
    for (std::size_t i = m - warm; i < m; ++i) ops.emplace_back(false, i);
    return ops;
  }

  // --- the passes --------------------------------------------------------------------------
  // Forward of micro-batch rows through the stage's layers, activations in slot h; the
  // stage's output.
  const float* run_forward(std::size_t h, std::size_t rows, const float* x) {
    const int r = static_cast<int>(rows);
    for (std::size_t k = 0; k < local_.size(); ++k) {
      const Local& L = local_[k];
      const auto slice = layer_slice(tracer_, "forward", L.layer);
      const float* w = params_ + L.offset;
      float* z = z_[h][k];
      dev_.gemm(false, true, r, static_cast<int>(L.out), static_cast<int>(L.in), 1.0f, x, static_cast<int>(L.in), w,
                static_cast<int>(L.in), 0.0f, z, static_cast<int>(L.out));
      if (L.split == Split::Row) tensor_allreduce(z, rows * L.out);
      dev_.bias_act_forward(activation(L), rows, L.out, w + L.in * L.out, z, a_[h][k]);
      x = a_[h][k];
    }
    return x;
  }

  void forward_micro(std::size_t i) {
    const std::size_t h = i % slots_held_, rows = micro_rows(i), off = micro_offset(i);
    const float* x = input_ + off * slots_.front().in;
    if (grid_.s > 0) {
      const auto slice = trace("wait activations", "bubble");
      bubble_ += wait_transfer(activations_[h]);
      x = in_[h];
    }
    wait_send(h, 0);  // the slot's output from its last micro-batch has left
    const float* out = run_forward(h, rows, x);
    if (grid_.s < grid_.pp - 1) {
      sends_[2 * h] = pp_->send(grid_.s + 1, out, rows * slots_[last_ - 1].out);
      gradients_[h] = pp_->recv(grid_.s + 1, dout_[h], rows * slots_[last_ - 1].out);  // posted ahead
      return;
    }
    // The last stage: the loss, and its gradient for the backward pass.
    const std::size_t k = config_.outputs();
    if (config_.loss == Loss::Mse)
      loss_sum_ += dev_.mse_loss(rows, k, out, target_ + off * k, loss_scale_, dout_[h]);
    else
      loss_sum_ += dev_.cross_entropy_loss(rows, k, out, labels_ + off, loss_scale_, dout_[h]);
  }

  void backward_micro(std::size_t i) {
    const std::size_t h = i % slots_held_, rows = micro_rows(i), off = micro_offset(i);
    const int r = static_cast<int>(rows);
    const bool last_micro = i + 1 == micro_;
    if (grid_.s < grid_.pp - 1) {
      const auto slice = trace("wait gradients", "bubble");
      bubble_ += wait_transfer(gradients_[h]);
    }
    float* cur = dout_[h];  // dL/d(output), made dL/dz in place, then dL/d(input) in back_ in turn
    int which = 0;
    for (std::size_t k = local_.size(); k-- > 0;) {
      const Local& L = local_[k];
      const auto slice = layer_slice(tracer_, "backward", L.layer);
      float* g = grads_ + L.offset;
      const float beta = i == 0 ? 0.0f : 1.0f;  // the micro-batches' gradients add up
      dev_.bias_act_backward(activation(L), rows, L.out, z_[h][k], cur, cur, dbias_);
      dev_.scale_add(L.out, beta, g + L.in * L.out, dbias_);
      const float* x = k > 0 ? a_[h][k - 1] : grid_.s > 0 ? in_[h] : input_ + off * slots_.front().in;
      dev_.gemm(true, false, static_cast<int>(L.out), static_cast<int>(L.in), r, 1.0f, cur, static_cast<int>(L.out), x,
                static_cast<int>(L.in), beta, g, static_cast<int>(L.in));
      if (last_micro)  // the layer's gradients are final: the replicas' mean, while the rest goes on
        reduced_[k] = dp_->start_allreduce(g, L.count(), 1.0f / static_cast<float>(grid_.dp),
                                           fmt::format("layer {} gradients", L.layer));
      if (L.layer == 0) break;  // nobody needs dL/d(input)
      float* next = k == 0 ? dx_[h] : back_[which];
      if (k == 0) wait_send(h, 1);  // the slot's input gradient from its last micro-batch has left
      dev_.gemm(false, false, r, static_cast<int>(L.in), static_cast<int>(L.out), 1.0f, cur, static_cast<int>(L.out),
                params_ + L.offset, static_cast<int>(L.in), 0.0f, next, static_cast<int>(L.in));
      if (L.split == Split::Column) tensor_allreduce(next, rows * L.in);  // Megatron's f, backward
      which = 1 - which;
      cur = next;
    }
    if (grid_.s > 0) sends_[2 * h + 1] = pp_->send(grid_.s - 1, dx_[h], rows * slots_[first_].in);
    expect_activations(i + slots_held_);  // the slot is free again
  }

  // Receives are posted as soon as their buffer is free, ahead of need: a send then finds
  // its receive waiting and writes at once, from the sender's thread, instead of waiting
  // for a hand-shake that a busy receiver answers late.
  void expect_activations(std::size_t i) {
    if (grid_.s == 0 || i >= micro_) return;
    const std::size_t h = i % slots_held_;
    activations_[h] = pp_->recv(grid_.s - 1, in_[h], micro_rows(i) * slots_[first_].in);
  }

  void tensor_allreduce(float* data, std::size_t n) {
    const auto t0 = Clock::now();
    tp_->wait_for(tp_->start_allreduce(data, n, 1.0f, "partial products"));
    exposed_ += since(t0);
  }

  void wait_send(std::size_t h, int which) {
    bubble_ += wait_transfer(sends_[2 * h + static_cast<std::size_t>(which)]);
  }
  double wait_transfer(DeviceComm::Ticket& t) {
    const double s = pp_->wait_for(t);
    t = 0;
    return s;
  }

  kernels::Activation activation(const Local& L) const {
    return L.layer + 1 == slots_.size() ? kernels::Activation::Identity : config_.activation;
  }

  CommCounters counters() const {
    CommCounters c = world_->counters();
    c += tp_->counters();
    c += pp_->counters();
    c += dp_->counters();
    return c;
  }

  Tracer::Slice trace(std::string name, const char* cat) {
    return tracer_ ? tracer_->slice(std::move(name), cat) : Tracer::Slice();
  }

  // --- whole ↔ local ----------------------------------------------------------------------
  // Layer L's piece of the whole flat array (null: zeros) into this rank's flat buffer
  // (host memory both).
  void take(const Local& L, const float* whole, float* local) const {
    float* dst = local + L.offset;
    if (!whole) {
      std::fill(dst, dst + L.count(), 0.0f);
      return;
    }
    const LayerSlot& S = slots_[L.layer];
    const std::size_t t = static_cast<std::size_t>(grid_.t);
    for (std::size_t o = 0; o < L.out; ++o) {
      const std::size_t row = L.split == Split::Column ? t * L.out + o : o;
      const std::size_t col = L.split == Split::Row ? t * L.in : 0;
      std::memcpy(dst + o * L.in, whole + S.weight + row * S.in + col, L.in * sizeof(float));
      dst[L.in * L.out + o] = whole[S.bias + row];
    }
  }
  // The inverse, for the pieces this rank alone reports (replica 0; a piece every tensor
  // rank holds, on tensor rank 0).
  void put(const Local& L, const float* local, float* whole) const {
    if (grid_.d != 0) return;
    const LayerSlot& S = slots_[L.layer];
    const std::size_t t = static_cast<std::size_t>(grid_.t);
    const float* src = local + L.offset;
    for (std::size_t o = 0; o < L.out; ++o) {
      const std::size_t row = L.split == Split::Column ? t * L.out + o : o;
      const std::size_t col = L.split == Split::Row ? t * L.in : 0;
      if (L.split != Split::Whole || t == 0)
        std::memcpy(whole + S.weight + row * S.in + col, src + o * L.in, L.in * sizeof(float));
      if (L.split == Split::Column || t == 0) whole[S.bias + row] = src[L.in * L.out + o];
    }
  }

  Communicator& comm_;  // the gradient norm's sum and the checkpoint's gather, on the host
  Device& dev_;
  const TrainConfig& config_;
  Grid grid_;
  std::vector<LayerSlot> slots_;
  Tracer* tracer_ = nullptr;
  std::unique_ptr<DeviceComm> world_, tp_, pp_, dp_;
  std::size_t first_ = 0, last_ = 0;  // the stage's layers
  std::vector<Local> local_;
  std::size_t count_ = 0, rows_ = 0, rows_now_ = 0, micro_ = 1, slots_held_ = 1, buffer_floats_ = 0;
  bool gpipe_ = false;
  float *params_ = nullptr, *grads_ = nullptr, *exp_avg_ = nullptr, *exp_avg_sq_ = nullptr;
  float *input_ = nullptr, *target_ = nullptr, *dbias_ = nullptr;
  std::int32_t* labels_ = nullptr;
  std::vector<std::vector<float*>> z_, a_;  // by slot, by local layer
  std::vector<float*> in_, dx_, dout_;      // by slot: the stage's input, its gradient, the output's gradient
  float* back_[2] = {nullptr, nullptr};
  std::vector<DeviceComm::Ticket> sends_;                    // by slot: the output's send, the input gradient's
  std::vector<DeviceComm::Ticket> activations_, gradients_;  // by slot: the receives posted ahead
  std::vector<DeviceComm::Ticket> reduced_;  // by local layer: its gradients' all-reduce over the replicas
  float loss_scale_ = 1;
  double loss_sum_ = 0, exposed_ = 0, bubble_ = 0, pipeline_s_ = 0;
  CommCounters start_;
};

}  // namespace

std::vector<std::size_t> pipeline_cut(const std::vector<LayerSlot>& slots, int stages) {
  const std::size_t n = slots.size(), p = static_cast<std::size_t>(stages);
  if (p > n)
    throw Error(Exit::Usage, fmt::format("{} pipeline stages need {} layers or more; the model has {}", p, p, n));
  std::vector<double> cum(n + 1, 0.0);
  for (std::size_t l = 0; l < n; ++l)
    cum[l + 1] = cum[l] + (l == 0 ? 2.0 : 3.0) * static_cast<double>(slots[l].in) * static_cast<double>(slots[l].out);
  std::vector<std::size_t> cut{0};
  for (std::size_t k = 1; k < p; ++k) {
    const double target = cum[n] * static_cast<double>(k) / static_cast<double>(p);
    std::size_t best = cut.back() + 1;
    for (std::size_t b = best; b <= n - (p - k); ++b)
      if (std::abs(cum[b] - target) < std::abs(cum[best] - target)) best = b;
    cut.push_back(best);
  }
  cut.push_back(n);
  return cut;
}

std::vector<Split> tensor_splits(const std::vector<LayerSlot>& slots, std::size_t first, std::size_t last, int tp) {
  std::vector<Split> out;
  for (std::size_t l = first; l < last; ++l) {
    const bool pair_start = (l - first) % 2 == 0;
    if (tp == 1 || (pair_start && l + 1 == last)) {
      out.push_back(Split::Whole);
    } else if (pair_start) {
      if (slots[l].out % static_cast<std::size_t>(tp) != 0)
        throw Error(Exit::Usage,
                    fmt::format("{} tensor-parallel ranks do not divide layer {}'s {} outputs", tp, l, slots[l].out),
                    "choose hidden sizes that are multiples of --tensor-parallel");
      out.push_back(Split::Column);
    } else {
      out.push_back(Split::Row);
    }
  }
  return out;
}

RKIT_TRAIN_STRATEGY(tp, "tp", "tensor parallel: Megatron's column- then row-parallel layer pairs",
                    [](const StrategySetup& s) { return std::make_unique<ModelParallel>(s, "tp"); });
RKIT_TRAIN_STRATEGY(pp, "pp", "pipeline parallel: layers in stages, micro-batches on a 1F1B or GPipe schedule",
                    [](const StrategySetup& s) { return std::make_unique<ModelParallel>(s, "pp"); });
RKIT_TRAIN_STRATEGY(three_d, "3d", "tensor x pipeline x data parallel on a grid of ranks",
                    [](const StrategySetup& s) { return std::make_unique<ModelParallel>(s, "3d"); });

}  // namespace rkit::rtrain
