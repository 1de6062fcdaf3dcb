// rtrain run: the training loop (see run.hpp).
#include "run.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numbers>

#include "checkpoint.hpp"
#include "comm.hpp"
#include "data.hpp"
#include "device.hpp"
#include "model.hpp"
#include "rkit/cpus.hpp"
#include "rkit/digest.hpp"
#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/safetensors.hpp"
#include "rkit/time.hpp"
#include "strategy.hpp"
#include "trace.hpp"
#include "tracking.hpp"

namespace rkit::rtrain {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

std::unique_ptr<Dataset> open_data(const TrainConfig& c) {
  const Task task = c.loss == Loss::CrossEntropy ? Task::Classification : Task::Regression;
  std::unique_ptr<Dataset> d;
  if (c.data == "synthetic") {
    SyntheticSpec s;
    s.rows = c.rows;
    s.features = c.layers.front();
    s.factors = c.factors;
    s.outputs = c.outputs();
    s.task = task;
    s.noise = c.noise;
    s.seed = c.seed;
    d = make_synthetic(s);
  } else {
    FileSpec f;
    f.path = c.data;
    f.task = task;
    f.outputs = c.outputs();
    d = load_dataset(f);
  }
  if (d->features() != c.layers.front())
    throw Error(Exit::Usage, fmt::format("{} has {} features but the model's first layer takes {}", c.data,
                                         d->features(), c.layers.front()));
  if (d->outputs() != c.outputs())
    throw Error(Exit::Usage, fmt::format("{} has {} {} but the model has {} outputs", c.data, d->outputs(),
                                         task == Task::Classification ? "classes" : "targets", c.outputs()));
  return d;
}

// Touches $RKIT_HEARTBEAT_FILE (rtrain launch --heartbeat-timeout) at most once a second.
class Heartbeat {
 public:
  Heartbeat() : path_(env_or("RKIT_HEARTBEAT_FILE", "")) {}
  void beat() {
    if (path_.empty() || since(last_) < 1.0) return;
    last_ = Clock::now();
    ::utimensat(AT_FDCWD, path_.c_str(), nullptr, 0);
  }

 private:
  std::string path_;
  Clock::time_point last_{};
};

// Host buffers for one batch.
struct Batch {
  std::vector<float> x, y;
  std::vector<std::int32_t> labels;
  void fill(const Dataset& d, std::span<const std::uint64_t> rows, bool classify) {
    x.resize(rows.size() * d.features());
    if (classify)
      labels.resize(rows.size());
    else
      y.resize(rows.size() * d.outputs());
    d.gather(rows, x.data(), classify ? nullptr : y.data(), classify ? labels.data() : nullptr);
  }
};

// The checkpoint to resume from, as rank 0 sees it, the same for every rank.
std::string resume_path(const TrainConfig& c, Communicator& comm) {
  std::string path;
  if (comm.rank() == 0) {
    if (!c.resume_from.empty())
      path = c.resume_from;
    else if (!c.ckpt_dir.empty())
      path = newest_checkpoint_in(c.ckpt_dir);
    if (path.empty()) path = env_or("RKIT_RESUME_FROM", "");
  }
  std::vector<char> buf(4096, 0);
  if (path.size() >= buf.size()) throw Error(Exit::Usage, "checkpoint path longer than 4095 bytes");
  std::memcpy(buf.data(), path.data(), path.size());
  comm.broadcast(buf.data(), buf.size(), 0);
  return std::string(buf.data());
}

// The model's four buffers (weights, gradients, two moments) and the batch's activations
// must fit in this machine's memory: a one-line refusal instead of the OOM killer.
void check_fits_in_memory(const TrainConfig& c) {
  double params = 0, widths = 0;
  for (std::size_t l = 0; l + 1 < c.layers.size(); ++l) {
    params += static_cast<double>(c.layers[l]) * static_cast<double>(c.layers[l + 1] + 1);
    widths += static_cast<double>(c.layers[l + 1]);
  }
  const double rows = static_cast<double>(c.batch_size);
  const double bytes = 4.0 * (4 * params + rows * (3 * widths + static_cast<double>(c.layers.front()) + c.outputs()));
  const double ram = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  if (ram > 0 && bytes > 0.8 * ram)
    throw Error(Exit::Usage,
                fmt::format("the model and batch need {:.1f} GiB, more than this machine's {:.1f} GiB allows: "
                            "fewer or smaller layers, or a smaller --batch-size",
                            bytes / (1u << 30), ram / (1u << 30)));
}

// --output is checked before hours of training, not after: its folder must be writable.
void check_output(const std::string& path) {
  if (path.empty()) return;
  const std::string dir = parent_dir(path);
  if (::access(dir.c_str(), F_OK) != 0) throw Error(Exit::NoInput, fmt::format("--output {}: no folder {}", path, dir));
  if (::access(dir.c_str(), W_OK) != 0)
    throw Error(Exit::NoPerm, fmt::format("--output {}: cannot write in {}", path, dir));
}

// One step's counters on a rank, or their sums over steps.
struct StepCounters {
  double compute_s = 0, comm_s = 0, exposed_s = 0, bubble_s = 0, pipeline_s = 0;
  CommCounters sent;
  void add(const StepCounters& o) {
    compute_s += o.compute_s;
    comm_s += o.comm_s;
    exposed_s += o.exposed_s;
    bubble_s += o.bubble_s;
    pipeline_s += o.pipeline_s;
    sent += o.sent;
  }
};

// The values a rank reports of itself (per step: sums divided by `steps`), in the order
// counters_json reads them: five times, the bytes by collective and point to point, the
// memory held.
constexpr std::size_t kTimes = 5, kBytes = std::size(kAllCollectives) + 1;
std::vector<double> rank_values(const StepCounters& k, double steps, const MemoryHeld& m) {
  std::vector<double> v{k.compute_s / steps, k.comm_s / steps, k.exposed_s / steps, k.bubble_s / steps,
                        k.pipeline_s / steps};
  for (std::uint64_t b : k.sent.bytes) v.push_back(std::floor(static_cast<double>(b) / steps));
  v.push_back(std::floor(static_cast<double>(k.sent.send_recv) / steps));
  for (std::uint64_t b : {m.params, m.grads, m.optimizer, m.buffers}) v.push_back(static_cast<double>(b));
  return v;
}

// The counters of a step (or the run's mean step), each rank's: compute, communication,
// exposed and hidden, pipeline bubble; bytes sent by collective; memory held.
Json counters_json(const std::vector<double>& v) {
  Json bytes = Json::object();
  for (Collective c : kAllCollectives)
    bytes[collective_name(c)] = static_cast<std::uint64_t>(v[kTimes + static_cast<std::size_t>(c)]);
  bytes["send_recv"] = static_cast<std::uint64_t>(v[kTimes + kBytes - 1]);
  const std::size_t m = kTimes + kBytes;
  return Json{{"compute_s", v[0]},
              {"comm_s", v[1]},
              {"exposed_s", v[2]},
              {"hidden_s", std::max(0.0, v[1] - v[2])},
              {"comm_hidden", CommTimes{v[1], v[2]}.hidden_fraction()},
              {"bubble_s", v[3]},
              {"bubble_fraction", v[4] > 0 ? v[3] / v[4] : 0.0},
              {"bytes_sent", std::move(bytes)},
              {"memory_bytes", Json{{"params", static_cast<std::uint64_t>(v[m])},
                                    {"grads", static_cast<std::uint64_t>(v[m + 1])},
                                    {"optimizer", static_cast<std::uint64_t>(v[m + 2])},
                                    {"buffers", static_cast<std::uint64_t>(v[m + 3])}}}};
}

}  // namespace

double learning_rate(const TrainConfig& c, std::uint64_t step, std::uint64_t total) {
  if (step < c.warmup_steps) return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps);
  const std::uint64_t span = total > c.warmup_steps ? total - c.warmup_steps : 1;
  const double progress = std::min(1.0, static_cast<double>(step - c.warmup_steps) / static_cast<double>(span));
  return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1 + std::cos(std::numbers::pi * progress));
}

std::vector<std::vector<std::size_t>> make_buckets(const std::vector<std::size_t>& layer_bytes, double bucket_bytes) {
  std::vector<std::vector<std::size_t>> buckets;
  double filled = bucket_bytes;  // forces a new bucket for the first layer
  for (std::size_t l = layer_bytes.size(); l-- > 0;) {
    if (filled >= bucket_bytes) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(l);
    filled += static_cast<double>(layer_bytes[l]);
  }
  return buckets;
}

Json run_training(const TrainConfig& c, const Json& provenance, const std::function<void(const Json&)>& emit_record) {
  c.validate();
  const auto t_start = Clock::now();
  const DistEnv env = DistEnv::from_env();
  Tracer tracer(c.trace, env.rank, env.world);  // outlives the communicator, whose worker records in it
  std::unique_ptr<Communicator> comm = Communicator::connect(env, std::chrono::seconds(300));
  comm->set_tracer(&tracer);
  if (tracer.enabled()) tracer.align([&] { comm->barrier(); });  // every rank's clock from the same moment
  const int rank = comm->rank(), world = comm->world();
  const bool lead = rank == 0;
  auto emit = [&](Json fields) {
    if (!lead) return;
    Json rec{{"event", fields.at("event")}, {"time_unix_s", unix_now_s()}};
    rec.update(fields);
    emit_record(rec);
  };
  if (c.ckpt_every > 0 && c.ckpt_dir.empty())
    throw Error(Exit::Usage, "checkpoints need a folder: --ckpt-dir, [checkpoint] dir or $RKIT_CKPT_DIR");

  // Threads: as asked, else this node's cores shared among its ranks (LOCAL_WORLD_SIZE).
  int threads = c.threads;
  if (threads == 0) {
    const int local_ranks = std::max(1, std::atoi(env_or("LOCAL_WORLD_SIZE", "1").c_str()));
    threads = std::max(1, static_cast<int>(usable_cpus()) / local_ranks);
  }
  check_fits_in_memory(c);
  check_output(c.output);
  std::unique_ptr<Device> dev = make_device(c.device, threads, env.local_rank);
  std::unique_ptr<Dataset> data = open_data(c);
  const bool classify = c.loss == Loss::CrossEntropy;
  const std::uint64_t eval_count =
      static_cast<std::uint64_t>(std::floor(static_cast<double>(data->rows()) * c.eval_fraction));
  const std::uint64_t train_rows = data->rows() - eval_count;
  const std::vector<LayerSlot> slots = layer_slots(c.layers);
  const std::vector<ModelTensor> tensors = model_tensors(slots);
  const std::size_t parameters = parameter_count(slots);

  std::unique_ptr<Strategy> strategy =
      make_strategy(c.strategy, {*dev, *comm, c, tracer.enabled() ? &tracer : nullptr});
  // The ranks of one replica read the same rows: its share of the global batch.
  const DataShard shard = strategy->data_shard();
  const std::size_t rows = c.batch_size * static_cast<std::size_t>(world / shard.world);
  const bool reports = strategy->reports_loss();
  Sampler sampler(train_rows, c.seed, shard.rank, shard.world, rows);
  const std::uint64_t total = c.steps > 0 ? c.steps : c.epochs * sampler.steps_per_epoch();
  const std::vector<std::uint64_t> my_eval = eval_rows(train_rows, data->rows(), shard.rank, shard.world);
  strategy->load_state(initial_params(slots, c.seed).data(), nullptr, nullptr);
  std::uint64_t start = 0;
  Json parent;  // the checkpoint this run starts from, when it does
  const std::string resume = resume_path(c, *comm);
  if (!resume.empty()) {
    TrainState s = load_checkpoint(resume, tensors, c.fingerprint(), parameters);
    if (s.seed != c.seed)
      throw Error(Exit::DataErr,
                  fmt::format("checkpoint {} was made with seed {}, this run has seed {}", resume, s.seed, c.seed));
    strategy->load_state(s.params.data(), s.exp_avg.data(), s.exp_avg_sq.data());  // whatever strategy saved it
    start = static_cast<std::uint64_t>(s.step);
    if (start > total)
      throw Error(Exit::Usage,
                  fmt::format("checkpoint {} is of step {}, past this run's last step {}", resume, start, total));
    if (lead) parent = parent_record("resume", resume);
    emit({{"event", "resume"}, {"step", start}, {"path", resume}, {"parent", parent}});
  } else if (!c.init_from.empty()) {
    // A fine-tune: the weights of another run's checkpoint, a fresh optimizer, step 0.
    TrainState s = load_checkpoint(c.init_from, tensors, c.fingerprint(), parameters);
    strategy->load_state(s.params.data(), nullptr, nullptr);
    if (lead) parent = parent_record("finetune", c.init_from);
    emit({{"event", "init"}, {"step", 0}, {"path", c.init_from}, {"parent", parent}});
  }

  std::optional<Checkpointer> ckpt;
  double stall_s = 0, sync_pack_s = 0;  // checkpoint stalls, and what writing and packing took in the background
  std::uint64_t checkpoints = 0;
  if (lead && c.ckpt_every > 0) {
    Json p = provenance;
    if (p.is_object()) p["parent"] = parent;
    ckpt.emplace(c.ckpt_dir, tensors, c.pack, parameters, std::move(p));
  }
  auto report_checkpoints = [&] {
    for (const CheckpointDone& d : ckpt->take_done()) {
      sync_pack_s += d.write_s + d.pack_s;
      emit({{"event", "checkpoint"},
            {"step", d.step},
            {"path", d.path},
            {"bytes", d.bytes},
            {"write_s", d.write_s},
            {"pack_s", d.pack_s},
            {"archive_xxh3", d.archive_xxh3.empty() ? Json() : Json(d.archive_xxh3)}});
    }
  };
  // Every rank: the state is gathered whole (sharded strategies), then rank 0 saves it.
  auto save = [&](std::uint64_t step) {
    const auto slice = tracer.slice("checkpoint copy", "checkpoint", Json{{"step", step}});
    const auto t0 = Clock::now();
    TrainState s;
    if (ckpt) {
      s = ckpt->take_buffer();
      s.params.resize(parameters);
      s.exp_avg.resize(parameters);
      s.exp_avg_sq.resize(parameters);
    }
    strategy->gather_state(true, ckpt ? s.params.data() : nullptr, ckpt ? s.exp_avg.data() : nullptr,
                           ckpt ? s.exp_avg_sq.data() : nullptr);
    if (ckpt) {
      s.step = static_cast<std::int64_t>(step);
      s.seed = c.seed;
      s.fingerprint = c.fingerprint();
      ckpt->save(std::move(s));
    }
    stall_s += since(t0);
    ++checkpoints;
  };

  Batch batch;
  Heartbeat heartbeat;
  const float loss_scale = 1.0f / static_cast<float>(rows * (classify ? 1 : c.outputs()));
  const double global_rows = static_cast<double>(c.batch_size) * world;
  const double global_elements = global_rows * (classify ? 1.0 : static_cast<double>(c.outputs()));
  double last_eval = std::numeric_limits<double>::quiet_NaN(), last_loss = last_eval;
  std::optional<double> time_to_target;
  double train_s = 0, data_s = 0;
  StepCounters totals;
  std::uint64_t timed_steps = 0;
  const MemoryHeld memory = strategy->memory();
  // Collective: every rank's counters (a step's, or the run's mean step), rank 0's first.
  auto every_rank = [&](const StepCounters& k, double steps) {
    const std::vector<double> mine = rank_values(k, steps > 0 ? steps : 1, memory);
    std::vector<double> all(mine.size() * static_cast<std::size_t>(world));
    std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(mine.size()) * rank);
    comm->allgather(all.data(), mine.size());
    Json ranks = Json::array();
    for (int r = 0; r < world; ++r) {
      const auto first = all.begin() + static_cast<std::ptrdiff_t>(mine.size()) * r;
      Json one{{"rank", r}};
      one.update(counters_json(std::vector<double>(first, first + static_cast<std::ptrdiff_t>(mine.size()))));
      ranks.push_back(std::move(one));
    }
    return ranks;
  };
  const auto t_train = Clock::now();

  // Every rank evaluates as many batches as the replica with the most (a sharded strategy's
  // evaluation is collective); the ones past its own rows are empty.
  std::size_t eval_batches = 0;
  for (int r = 0; r < shard.world; ++r) {
    const std::size_t n = r == shard.rank ? my_eval.size() : eval_rows(train_rows, data->rows(), r, shard.world).size();
    eval_batches = std::max(eval_batches, (n + rows - 1) / rows);
  }
  auto evaluate = [&](std::uint64_t step) {
    const auto slice = tracer.slice("evaluate", "eval", Json{{"step", step}});
    double sums[3] = {0, 0, 0};  // loss sum, correct, rows
    Batch eb;
    for (std::size_t b = 0, i = 0; b < eval_batches; ++b, i += rows) {
      const std::size_t n = i < my_eval.size() ? std::min<std::size_t>(rows, my_eval.size() - i) : 0;
      if (n > 0) {
        eb.fill(*data, std::span(my_eval).subspan(i, n), classify);
        strategy->upload_batch(eb.x.data(), eb.y.data(), eb.labels.data(), n);
      }
      auto [loss_sum, correct] = strategy->evaluate(n);
      if (!reports) continue;  // another rank of the replica counts these rows
      sums[0] += loss_sum;
      sums[1] += static_cast<double>(correct);
      sums[2] += static_cast<double>(n);
    }
    comm->allreduce_sum(sums, 3);
    if (sums[2] == 0) return;
    last_eval = sums[0] / (sums[2] * (classify ? 1.0 : static_cast<double>(c.outputs())));
    Json rec{{"event", "eval"}, {"step", step}, {"eval_loss", last_eval}};
    if (classify) rec["accuracy"] = sums[1] / sums[2];
    if (c.target_loss && !time_to_target && last_eval <= *c.target_loss) {
      time_to_target = since(t_train);
      rec["time_to_target_s"] = *time_to_target;
    }
    emit(rec);
  };

  for (std::uint64_t step = start; step < total; ++step) {
    std::optional<Tracer::Slice> step_slice;
    if (tracer.enabled())
      step_slice.emplace(tracer.slice(fmt::format("step {}", step + 1), "step", Json{{"step", step + 1}}));
    const auto t0 = Clock::now();
    {
      const auto slice = tracer.slice("data", "data");
      batch.fill(*data, sampler.batch(step), classify);
      strategy->upload_batch(batch.x.data(), batch.y.data(), batch.labels.data(), rows);
    }
    const double t_data = since(t0);

    strategy->begin_step();
    double loss_sum = 0;
    {
      const auto slice = tracer.slice("forward and backward", "compute");
      loss_sum = strategy->forward_backward(rows, loss_scale);
    }
    std::optional<Tracer::Slice> optimizer_slice;
    if (tracer.enabled()) optimizer_slice.emplace(tracer.slice("optimizer", "optimizer"));
    const double norm = std::sqrt(strategy->grad_norm_squared());
    if (!std::isfinite(norm))
      throw Error(Exit::DataErr, fmt::format("step {}: the gradient is not finite (loss {}): lower the learning rate",
                                             step + 1, loss_sum));
    const float clip =
        c.clip_grad_norm > 0 && norm > c.clip_grad_norm ? static_cast<float>(c.clip_grad_norm / (norm + 1e-6)) : 1.0f;
    const double lr = learning_rate(c, step, total);
    strategy->optimizer_step(kernels::AdamwStep::make(
        static_cast<float>(lr), static_cast<float>(c.beta1), static_cast<float>(c.beta2), static_cast<float>(c.eps),
        static_cast<float>(c.weight_decay), clip, static_cast<std::int64_t>(step + 1)));
    dev->synchronize();
    optimizer_slice.reset();
    const StepComm sc = strategy->end_step();
    const double step_s = since(t0);
    const StepCounters counters{
        step_s - t_data - sc.exposed_s - sc.bubble_s, sc.comm_s, sc.exposed_s, sc.bubble_s, sc.pipeline_s, sc.sent};
    train_s += step_s;
    data_s += t_data;
    totals.add(counters);
    ++timed_steps;
    heartbeat.beat();

    const std::uint64_t done = step + 1;
    if (done % c.log_every == 0 || done == total) {
      const auto slice = tracer.slice("log", "log");
      double l = reports ? loss_sum : 0.0;
      comm->allreduce_sum(&l, 1);
      last_loss = l / global_elements;
      Json ranks = every_rank(counters, 1);
      Json rec{{"event", "step"},
               {"step", done},
               {"loss", last_loss},
               {"lr", lr},
               {"samples_per_s", global_rows / step_s},
               {"step_time_s", step_s},
               {"data_s", t_data},
               {"grad_norm", norm}};
      rec.update(ranks.at(0));  // rank 0's counters, and every rank's beside them
      rec.erase("rank");
      rec["ranks"] = std::move(ranks);
      emit(rec);
    }
    if ((c.eval_every > 0 && done % c.eval_every == 0) || done == total) evaluate(done);
    if (c.ckpt_every > 0 && (done % c.ckpt_every == 0 || done == total)) save(done);
    if (ckpt) report_checkpoints();
    step_slice.reset();
  }
  // The last collectives, before rank 0 alone waits for its checkpoints and writes the
  // output (the other ranks would otherwise wait on it, up to the timeout): the final
  // weights, and every rank's counters of the mean step.
  std::vector<float> w(lead ? parameters : 0);
  strategy->gather_state(false, lead ? w.data() : nullptr, nullptr, nullptr);
  const double steps_run = static_cast<double>(timed_steps);
  Json ranks = every_rank(totals, steps_run);
  if (ckpt) {
    ckpt->finish();
    report_checkpoints();
  }

  // The final weights' digest: what a reproduction must match bit for bit.
  std::string weights_xxh3;
  if (lead) {
    weights_xxh3 =
        digest_hex(digest_bytes(std::string_view(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(float))));
  }
  if (lead && !c.output.empty()) {
    safetensors::Writer out;
    out.set_metadata("format", "pt");
    out.set_metadata("rkit.model", c.fingerprint());
    for (const ModelTensor& t : tensors)
      out.add(t.name, safetensors::Dtype::F32, t.shape, std::as_bytes(std::span(w.data() + t.offset, t.count)));
    out.write(c.output);
  }
  Json summary{{"event", "summary"},
               {"strategy", c.strategy},
               {"device", dev->name()},
               {"device_libraries", dev->libraries().empty() ? Json() : Json(dev->libraries())},
               {"world_size", world},
               {"parameters", parameters},
               {"steps", total},
               {"start_step", start},
               {"loss", last_loss},
               {"eval_loss", last_eval},
               {"samples_per_s", train_s > 0 ? global_rows * steps_run / train_s : 0.0},
               {"step_time_s", steps_run > 0 ? train_s / steps_run : 0.0},
               {"data_s", steps_run > 0 ? data_s / steps_run : 0.0},
               {"checkpoints", checkpoints},
               {"checkpoint_stall_s", stall_s},
               {"checkpoint_background_s", sync_pack_s},
               {"threads", threads},
               {"weights_xxh3", weights_xxh3},
               {"wall_s", since(t_start)}};
  comm->set_tracer(nullptr);
  if (tracer.enabled()) summary["trace"] = tracer.write();  // every rank writes its own; rank 0's path here
  summary.update(ranks.at(0));                              // rank 0's mean step, and every rank's beside it
  summary.erase("rank");
  summary["ranks"] = std::move(ranks);
  if (c.target_loss) summary["time_to_target_s"] = time_to_target ? Json(*time_to_target) : Json(nullptr);
  if (lead && !c.output.empty()) {  // rank 0 wrote it
    summary["output"] = c.output;
    summary["output_xxh3"] = digest_hex(digest_file(c.output).xxh3);
  }
  emit(summary);
  return lead ? summary : Json();
}

}  // namespace rkit::rtrain
