// rtrain plan: predicted steps of the strategies (see plan.hpp).
#include "plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "rkit/config.hpp"
#include "rkit/error.hpp"
#include "run.hpp"

namespace rkit::rtrain {
namespace {

constexpr double kFloat = sizeof(float);

// y at x on a curve of (x, y) points, log-log between them, clamped outside.
double interpolate(const std::vector<std::pair<double, double>>& curve, double x) {
  if (x <= curve.front().first) return curve.front().second;
  if (x >= curve.back().first) return curve.back().second;
  const auto hi = std::lower_bound(curve.begin(), curve.end(), std::make_pair(x, 0.0));
  const auto lo = hi - 1;
  const double f = std::log(x / lo->first) / std::log(hi->first / lo->first);
  return std::exp(std::log(lo->second) + f * (std::log(hi->second) - std::log(lo->second)));
}

// latency + bytes / bandwidth fitted to (bytes, seconds) points, minimising the squared
// relative error (weighted least squares, linear in latency and 1/bandwidth).
Machine::Link fit_link(const std::vector<std::pair<double, double>>& points) {
  double s00 = 0, s01 = 0, s11 = 0, r0 = 0, r1 = 0;
  for (const auto& [b, t] : points) {
    const double w = 1 / (t * t);
    s00 += w;
    s01 += w * b;
    s11 += w * b * b;
    r0 += w * t;
    r1 += w * t * b;
  }
  const double det = s00 * s11 - s01 * s01;
  if (points.size() < 2 || !(std::fabs(det) > 0)) return {};
  const double latency = (r0 * s11 - r1 * s01) / det, inverse = (s00 * r1 - s01 * r0) / det;
  return {std::max(0.0, latency), inverse > 0 ? 1 / inverse : 0};
}

// One rank's passes over a model's layers, as a strategy holds them.
struct Layer {
  double in = 0, out = 0;  // as the rank computes them (a tensor-parallel share)
  Split split = Split::Whole;
  bool first = false, last = false;  // of the model
};

struct Timing {
  const Machine& m;
  // A product of rows x in by in x out: 2 rows in out flops.
  double gemm(double rows, double in, double out) const {
    return 2 * rows * in * out / m.gemm_rate(std::cbrt(rows * in * out));
  }
  double stream(double bytes) const { return bytes / m.memory_bandwidth; }
  // A layer's forward over `rows`: the product, the bias and activation.
  double forward(const Layer& L, double rows) const { return gemm(rows, L.in, L.out) + stream(8 * rows * L.out); }
  // Its backward: the activation's and bias's gradient, dW, and dX but for the first layer.
  double backward(const Layer& L, double rows) const {
    return (L.first ? 1 : 2) * gemm(rows, L.in, L.out) + stream(12 * rows * L.out);
  }
  double adamw(double params) const { return stream(28 * params); }
};

// A rank's step as its computation and its FIFO queue of collectives.
struct Clock2 {
  double t = 0, queue = 0, exposed = 0, comm = 0;
  // A collective of `seconds` queued now; when it ends.
  double submit(double seconds) {
    queue = std::max(queue, t) + seconds;
    comm += seconds;
    return queue;
  }
  void wait(double until) {
    if (until > t) {
      exposed += until - t;
      t = until;
    }
  }
  void blocking(double seconds) {  // a collective the caller waits for at once
    comm += seconds;
    exposed += seconds;
    t += seconds;
  }
};

std::vector<Layer> whole_layers(const std::vector<LayerSlot>& slots) {
  std::vector<Layer> out;
  for (std::size_t l = 0; l < slots.size(); ++l)
    out.push_back({static_cast<double>(slots[l].in), static_cast<double>(slots[l].out), Split::Whole, l == 0,
                   l + 1 == slots.size()});
  return out;
}

Plan data_parallel(const TrainConfig& c, int world, const Machine& m) {
  const Timing T{m};
  const std::vector<LayerSlot> slots = layer_slots(c.layers);
  const std::vector<Layer> layers = whole_layers(slots);
  const double rows = static_cast<double>(c.batch_size), psi = static_cast<double>(parameter_count(slots));
  std::vector<std::size_t> layer_bytes;
  for (const LayerSlot& s : slots) layer_bytes.push_back((s.in * s.out + s.out) * sizeof(float));
  const auto buckets = make_buckets(layer_bytes, c.bucket_mb * 1024 * 1024);
  Clock2 k;
  for (const Layer& L : layers) k.t += T.forward(L, rows);
  double last = 0;
  std::size_t b = 0, left = buckets.empty() ? 0 : buckets[0].size();
  for (std::size_t l = layers.size(); l-- > 0;) {
    k.t += T.backward(layers[l], rows);
    if (--left == 0) {
      double bytes = 0;
      for (std::size_t j : buckets[b]) bytes += static_cast<double>(layer_bytes[j]);
      last = k.submit(m.collective_s(Collective::Allreduce, bytes, world, true));
      if (++b < buckets.size()) left = buckets[b].size();
    }
  }
  k.wait(last);
  k.t += T.adamw(psi);
  Plan p;
  p.strategy = "dp";
  p.dp = world;
  p.step_s = k.t;
  p.exposed_s = k.exposed;
  p.compute_s = k.t - k.exposed;
  p.sent[Collective::Allreduce] =
      ring_bytes_sent(Collective::Allreduce, static_cast<std::uint64_t>(psi * kFloat), world);
  p.memory = {static_cast<std::uint64_t>(psi * kFloat), static_cast<std::uint64_t>(psi * kFloat),
              static_cast<std::uint64_t>(2 * psi * kFloat), 0};
  return p;
}

Plan zero(const TrainConfig& c, int world, const Machine& m, int stage) {
  const Timing T{m};
  const std::vector<LayerSlot> slots = layer_slots(c.layers);
  const std::vector<Layer> layers = whole_layers(slots);
  const ShardLayout layout(slots, static_cast<unsigned>(world));
  const double rows = static_cast<double>(c.batch_size);
  const auto padded = [&](std::size_t l) { return static_cast<double>(layout.layers[l].shard) * world * kFloat; };
  const auto gather = [&](std::size_t l) { return m.collective_s(Collective::Allgather, padded(l), world, true); };
  const auto scatter = [&](std::size_t l) {
    return m.collective_s(Collective::ReduceScatter, padded(l), world, true) +
           (stage > 1 ? T.stream(2 * padded(l) / world) : 0);  // the shard's copy out of staging
  };
  Clock2 k;
  std::vector<double> scattered(layers.size(), 0);
  if (stage < 3) {  // the last step's all-gathers, in flight as the forward pass starts
    std::vector<double> ready;
    for (std::size_t l = 0; l < layers.size(); ++l) ready.push_back(k.submit(gather(l)));
    for (std::size_t l = 0; l < layers.size(); ++l) {
      k.wait(ready[l]);
      k.t += T.forward(layers[l], rows);
    }
    std::size_t order = 0;
    for (std::size_t l = layers.size(); l-- > 0; ++order) {
      if (stage == 2 && order >= 2) k.wait(scattered[l + 2]);  // its staging buffer
      k.t += T.backward(layers[l], rows);
      scattered[l] = k.submit(scatter(l));
    }
  } else {  // every layer gathered for forward, then again for backward, one ahead
    std::vector<std::size_t> plan;
    for (std::size_t l = 0; l < layers.size(); ++l) plan.push_back(l);
    for (std::size_t l = layers.size(); l-- > 0;) plan.push_back(l);
    double next = k.submit(gather(plan[0]));
    for (std::size_t i = 0; i < plan.size(); ++i) {
      const std::size_t l = plan[i];
      const bool backward = i >= layers.size();
      const std::size_t order = i - layers.size();
      if (backward && order >= 2) k.wait(scattered[l + 2]);
      k.wait(next);
      if (i + 1 < plan.size()) next = k.submit(gather(plan[i + 1]));
      if (!backward) {
        k.t += T.forward(layers[l], rows);
      } else {
        k.t += T.backward(layers[l], rows);
        scattered[l] = k.submit(scatter(l));
      }
    }
  }
  k.wait(scattered[0]);
  k.blocking(m.collective_s(Collective::Allreduce, 8, world));  // the gradient norm
  k.t += T.adamw(static_cast<double>(layout.shard_total));
  Plan p;
  p.strategy = fmt::format("zero{}", stage);
  p.dp = world;
  p.step_s = k.t;
  p.exposed_s = k.exposed;
  p.compute_s = k.t - k.exposed;
  double rs = 0, ag = 0;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const auto bytes = static_cast<std::uint64_t>(padded(l));
    rs += static_cast<double>(ring_bytes_sent(Collective::ReduceScatter, bytes, static_cast<unsigned>(world)));
    ag += static_cast<double>(ring_bytes_sent(Collective::Allgather, bytes, static_cast<unsigned>(world))) *
          (stage == 3 ? 2 : 1);
  }
  p.sent[Collective::ReduceScatter] = static_cast<std::uint64_t>(rs);
  p.sent[Collective::Allgather] = static_cast<std::uint64_t>(ag);
  p.sent[Collective::Allreduce] = ring_bytes_sent(Collective::Allreduce, 8, static_cast<unsigned>(world));
  const double whole = static_cast<double>(layout.padded_total) * kFloat;
  const double shard = static_cast<double>(layout.shard_total) * kFloat;
  const double staging = 2 * static_cast<double>(layout.widest_padded) * kFloat;
  p.memory = {static_cast<std::uint64_t>(stage < 3 ? whole : shard),
              static_cast<std::uint64_t>(stage == 1 ? whole : shard), static_cast<std::uint64_t>(2 * shard),
              static_cast<std::uint64_t>((stage >= 2 ? staging : 0) + (stage == 3 ? staging : 0))};
  return p;
}

// Tensor x pipeline x data parallel (strategy_mp.cpp's ModelParallel), stage by stage.
Plan model_parallel(const TrainConfig& c, int world, const Machine& m, const std::string& name, int tp, int pp) {
  const Timing T{m};
  const std::vector<LayerSlot> slots = layer_slots(c.layers);
  const int dp = world / (tp * pp);
  const std::vector<std::size_t> cut = pipeline_cut(slots, pp);
  const double rows = static_cast<double>(c.batch_size) * tp * pp;
  const unsigned micro = c.micro_batches > 0 ? c.micro_batches : pp > 1 ? 4u * static_cast<unsigned>(pp) : 1u;
  if (micro > rows)
    throw Error(Exit::Usage, fmt::format("{} micro-batches of a replica's {} rows: some would be empty", micro, rows));
  const double mb = rows / micro, widest_mb = std::ceil(rows / micro);
  const bool gpipe = c.schedule == "gpipe";
  struct Stage {
    std::vector<Layer> layers;
    double f = 0, b = 0, f_comm = 0, b_comm = 0, params = 0, in_width = 0, out_width = 0;
    std::uint64_t tp_bytes = 0;  // a micro-batch's
  };
  std::vector<Stage> stages(static_cast<std::size_t>(pp));
  for (int s = 0; s < pp; ++s) {
    Stage& S = stages[static_cast<std::size_t>(s)];
    const std::size_t first = cut[static_cast<std::size_t>(s)], last = cut[static_cast<std::size_t>(s) + 1];
    const std::vector<Split> splits = tensor_splits(slots, first, last, tp);
    S.in_width = static_cast<double>(slots[first].in);
    S.out_width = static_cast<double>(slots[last - 1].out);
    for (std::size_t l = first; l < last; ++l) {
      Layer L{static_cast<double>(slots[l].in), static_cast<double>(slots[l].out), splits[l - first], l == 0,
              l + 1 == slots.size()};
      if (L.split == Split::Column) L.out /= tp;
      if (L.split == Split::Row) L.in /= tp;
      S.f += T.forward(L, mb);
      S.b += T.backward(L, mb);
      const auto reduce = [&](double floats, double& into) {
        into += m.collective_s(Collective::Allreduce, floats * kFloat, tp);
        S.tp_bytes += ring_bytes_sent(Collective::Allreduce, static_cast<std::uint64_t>(floats * kFloat),
                                      static_cast<unsigned>(tp));
      };
      if (tp > 1 && L.split == Split::Row) reduce(mb * L.out, S.f_comm);
      if (tp > 1 && L.split == Split::Column && !L.first) reduce(mb * L.in, S.b_comm);
      S.params += L.in * L.out + L.out;
      S.layers.push_back(L);
    }
  }
  // The schedule, simulated: each stage's operations in order, each waiting for its input.
  const std::size_t P = static_cast<std::size_t>(pp), M = micro;
  std::vector<double> t(P, 0), busy(P, 0), blocked(P, 0);
  std::vector<std::vector<double>> fdone(P, std::vector<double>(M, -1)), bdone = fdone;
  std::vector<std::vector<std::pair<bool, std::size_t>>> ops(P);
  for (std::size_t s = 0; s < P; ++s) {
    if (gpipe) {
      for (std::size_t i = 0; i < M; ++i) ops[s].emplace_back(true, i);
      for (std::size_t i = 0; i < M; ++i) ops[s].emplace_back(false, i);
    } else {
      const std::size_t warm = std::min(M, P - 1 - s);
      for (std::size_t i = 0; i < warm; ++i) ops[s].emplace_back(true, i);
      for (std::size_t i = 0; i + warm < M; ++i) {
        ops[s].emplace_back(true, i + warm);
        ops[s].emplace_back(false, i);
      }
      for (std::size_t i = M - warm; i < M; ++i) ops[s].emplace_back(false, i);
    }
  }
  std::vector<std::size_t> next(P, 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (std::size_t s = 0; s < P; ++s)
      while (next[s] < ops[s].size()) {
        const auto [forward, i] = ops[s][next[s]];
        double ready = 0;
        if (forward && s > 0) {
          if (fdone[s - 1][i] < 0) break;
          ready = fdone[s - 1][i] + m.transfer_s(mb * stages[s].in_width * kFloat);
        }
        if (!forward && s + 1 < P) {
          if (bdone[s + 1][i] < 0) break;
          ready = bdone[s + 1][i] + m.transfer_s(mb * stages[s].out_width * kFloat);
        }
        if (ready > t[s]) {
          blocked[s] += ready - t[s];
          t[s] = ready;
        }
        const Stage& S = stages[s];
        const double work = forward ? S.f + S.f_comm : S.b + S.b_comm;
        t[s] += work;
        busy[s] += work;
        (forward ? fdone : bdone)[s][i] = t[s];
        ++next[s];
        moved = true;
      }
  }
  const double span = *std::max_element(t.begin(), t.end());
  // Rank 0 (stage 0): its bubble; then the replicas' all-reduce (the last micro-batch's
  // backward hides part of it), the norm, AdamW.
  const Stage& S0 = stages[0];
  Clock2 k;
  k.t = span;
  const double bubble = pp > 1 ? span - busy[0] : 0;
  k.exposed = M * (S0.f_comm + S0.b_comm);
  if (dp > 1) {
    const double reduce = m.collective_s(Collective::Allreduce, S0.params * kFloat, dp, true);
    k.wait(span + std::max(0.0, reduce - S0.b));
  }
  k.blocking(m.collective_s(Collective::Allreduce, 8, world));
  k.t += T.adamw(S0.params);
  Plan p;
  p.strategy = name;
  p.tp = tp;
  p.pp = pp;
  p.dp = dp;
  p.micro_batches = micro;
  p.schedule = pp > 1 ? c.schedule : "";
  p.step_s = k.t;
  p.bubble_s = bubble;
  p.exposed_s = k.exposed;
  p.compute_s = k.t - k.exposed - bubble;
  p.sent[Collective::Allreduce] =
      S0.tp_bytes * M + ring_bytes_sent(Collective::Allreduce, 8, static_cast<unsigned>(world)) +
      ring_bytes_sent(Collective::Allreduce, static_cast<std::uint64_t>(S0.params * kFloat), static_cast<unsigned>(dp));
  p.sent.send_recv = pp > 1 ? static_cast<std::uint64_t>(rows * S0.out_width * kFloat) : 0;
  // What rank 0 holds: its layers and moments; the batch, each held micro-batch's
  // activations and the backward pass's buffers (strategy_mp.cpp's allocate()).
  const double held = gpipe ? M : std::min<double>(M, P);
  double acts = 0, widest = 0;
  for (std::size_t j = 0; j < S0.layers.size(); ++j) {
    const Layer& L = S0.layers[j];
    acts += widest_mb * L.out * (L.last ? 1 : 2);
    widest = std::max({widest, L.in * (L.split == Split::Row ? tp : 1), L.out * (L.split == Split::Column ? tp : 1)});
  }
  const double outputs = static_cast<double>(c.outputs());
  const double buffers = rows * static_cast<double>(c.layers.front()) + (c.loss == Loss::Mse ? rows * outputs : 0) +
                         held * (acts + widest_mb * S0.out_width) + 2 * widest_mb * widest + widest;
  const auto bytes = [](double floats) { return static_cast<std::uint64_t>(floats * kFloat); };
  p.memory = {bytes(S0.params), bytes(S0.params), bytes(2 * S0.params), bytes(buffers)};
  return p;
}

double number(const Json& r, const char* key) {
  const Json& v = r.contains(key) ? r.at(key) : Json();
  return v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace

double Machine::gemm_rate(double size) const {
  return gemm_by_size.empty() ? gemm_flops : interpolate(gemm_by_size, size);
}

double Machine::collective_s(Collective c, double bytes, int ranks, bool beside) const {
  if (ranks <= 1 || bytes <= 0) return 0;
  const Link& l = links[static_cast<std::size_t>(c)];
  return (l.latency_s + (l.busbw > 0 ? bytes * busbw_factor(c, static_cast<unsigned>(ranks)) / l.busbw : 0)) /
         (beside ? overlap_speed : comm_speed);
}

double Machine::transfer_s(double bytes) const {
  return (p2p.latency_s + (p2p.busbw > 0 ? bytes / p2p.busbw : 0)) / comm_speed;
}

Machine machine_from_bench(const std::vector<Json>& records, int threads, const std::string& host) {
  Machine m;
  m.name = host;
  m.device = fmt::format("cpu ({} BLAS thread{})", threads, threads == 1 ? "" : "s");
  std::map<double, double> gemm;
  std::map<std::string, std::vector<std::pair<double, double>>> times;  // (bytes, bus seconds) by collective
  for (const Json& r : records) {
    if (!r.is_object() || r.value("schema", "") != "rkit.bench.v1") continue;
    const std::string suite = r.value("suite", ""), metric = r.value("metric", "");
    const Json params = r.value("params", Json::object());
    const double median = number(r, "median");
    if (!std::isfinite(median) || median <= 0) continue;
    if (suite == "cpu.gemm" && metric == "sgemm") {
      const double size = number(params, "m"), used = std::max(1.0, number(params, "threads"));
      if (size > 0) gemm[size] = median * 1e9 / used * threads;
    } else if (suite == "cpu.stream" && metric == "triad") {
      m.memory_bandwidth = median * 1e9 / std::max(1.0, number(params, "threads")) * threads;
    } else if (suite == "comm.gloo") {
      const double bytes = number(params, "bytes"), factor = number(params, "busbw_factor");
      if (bytes > 0 && factor > 0) times[metric].emplace_back(bytes, bytes * factor / (median * 1e9));
    }
  }
  for (const auto& [size, rate] : gemm) m.gemm_by_size.emplace_back(size, rate);
  m.gemm_flops = gemm.empty() ? 0 : gemm.rbegin()->second;
  std::string missing;
  if (!(m.gemm_flops > 0)) missing = "cpu.gemm sgemm";
  if (!(m.memory_bandwidth > 0)) missing += std::string(missing.empty() ? "" : ", ") + "cpu.stream triad";
  if (times.empty()) missing += std::string(missing.empty() ? "" : ", ") + "comm.gloo";
  if (!missing.empty())
    throw Error(Exit::DataErr, fmt::format("the rbench records lack {}", missing),
                "rbench run cpu.gemm cpu.stream comm.gloo --json > machine.jsonl");
  for (Collective c : kAllCollectives) m.links[static_cast<std::size_t>(c)] = fit_link(times[collective_name(c)]);
  m.p2p = m.links[static_cast<std::size_t>(Collective::Broadcast)];  // on 2 ranks, one to one
  // Gloo's collectives run on the cores the step computes on, in threads that wake and
  // sleep: rtrain run's comm_s, 2 ranks on 2 cores, is a third of comm.gloo's
  // back-to-back speed for a collective alone (tp), a fifth beside the backward and
  // forward passes (dp, ZeRO): the host's calibration, rtrain(1) PLANS.
  m.comm_speed = 1.0 / 3;
  m.overlap_speed = 1.0 / 5;
  return m;
}

Machine load_machine(const std::string& path) {
  const Config cfg = load_config(path);
  const auto num = [&](const char* key, double fallback, bool required) {
    const auto node = cfg.table.at_path(key);
    if (!node) {
      if (required) throw Error(Exit::Config, fmt::format("{}: no {}", path, key));
      return fallback;
    }
    const std::optional<double> v = node.value<double>();
    if (!v || !(*v > 0)) throw Error(Exit::Config, fmt::format("{}: {} must be a number above 0", path, key));
    return *v;
  };
  Machine m;
  m.name = cfg.table.at_path("machine.name").value_or(std::string(path));
  m.device = cfg.table.at_path("machine.device").value_or(std::string("cuda"));
  m.gemm_flops = num("machine.gemm_tflops", 0, true) * 1e12;
  m.memory_bandwidth = num("machine.memory_gbps", 0, true) * 1e9;
  m.memory_bytes = num("machine.memory_gib", 0, false) * 1073741824.0;
  const double busbw = num("network.busbw_gbps", 0, true) * 1e9, latency = num("network.latency_us", 0, false) * 1e-6;
  for (Machine::Link& l : m.links) l = {latency, busbw};
  m.p2p = {latency, num("network.p2p_gbps", busbw / 1e9, false) * 1e9};
  m.comm_speed = std::min(1.0, num("network.comm_speed", 1, false));
  m.overlap_speed = std::min(1.0, num("network.overlap_speed", 1, false));
  return m;
}

Json Plan::to_json(const TrainConfig& c, int world, const Machine& m) const {
  Json bytes = Json::object();
  for (Collective k : kAllCollectives) bytes[collective_name(k)] = sent[k];
  bytes["send_recv"] = sent.send_recv;
  const double global = static_cast<double>(c.batch_size) * world;
  return Json{{"schema", "rkit.train.plan.v1"},
              {"strategy", strategy},
              {"tensor_parallel", tp},
              {"pipeline_parallel", pp},
              {"data_parallel", dp},
              {"micro_batches", micro_batches},
              {"schedule", schedule.empty() ? Json() : Json(schedule)},
              {"world_size", world},
              {"machine", m.name},
              {"device", m.device},
              {"global_batch", global},
              {"step_time_s", step_s},
              {"compute_s", compute_s},
              {"exposed_s", exposed_s},
              {"bubble_s", bubble_s},
              {"samples_per_s", step_s > 0 ? global / step_s : 0.0},
              {"steps", c.steps},
              {"bytes_sent", bytes},
              {"memory_bytes", Json{{"params", memory.params},
                                    {"grads", memory.grads},
                                    {"optimizer", memory.optimizer},
                                    {"buffers", memory.buffers}}},
              {"fits", fits}};
}

std::vector<Plan> plan_strategies(const TrainConfig& c, int world, const Machine& m, const std::string& only) {
  if (world < 1) throw Error(Exit::Usage, "--ranks must be 1 or more");
  std::vector<Plan> plans;
  const auto want = [&](const std::string& n) { return only.empty() || only == n; };
  const auto attempt = [&](auto&& make) {
    try {
      plans.push_back(make());
    } catch (const Error& e) {
      if (e.code() != Exit::Usage || !only.empty()) throw;  // a grid the model does not allow: not a plan
    }
  };
  if (want("dp")) attempt([&] { return data_parallel(c, world, m); });
  for (int z = 1; z <= 3; ++z)
    if (want(fmt::format("zero{}", z))) attempt([&] { return zero(c, world, m, z); });
  if (world > 1 && want("tp")) attempt([&] { return model_parallel(c, world, m, "tp", world, 1); });
  if (world > 1 && want("pp")) attempt([&] { return model_parallel(c, world, m, "pp", 1, world); });
  if (want("3d"))
    for (int tp = 2; tp <= world; ++tp)
      for (int pp = 2; tp * pp <= world; ++pp)
        if (world % (tp * pp) == 0) attempt([&] { return model_parallel(c, world, m, "3d", tp, pp); });
  for (Plan& p : plans) {
    const double held = static_cast<double>(p.memory.params + p.memory.grads + p.memory.optimizer + p.memory.buffers);
    p.fits = m.memory_bytes <= 0 || held <= m.memory_bytes;
  }
  std::stable_sort(plans.begin(), plans.end(), [](const Plan& a, const Plan& b) {
    if (a.fits != b.fits) return a.fits;
    return a.step_s < b.step_s;
  });
  return plans;
}

}  // namespace rkit::rtrain
