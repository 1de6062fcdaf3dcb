#include "daemon/sched.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <string_view>
#include <unordered_set>

#include "rkit/error.hpp"
#include "rkit/units.hpp"

namespace rkit::rsub {

double fairshare_factor(double usage_fraction, double shares_fraction) {
  return shares_fraction > 0 ? std::exp2(-usage_fraction / shares_fraction) : 0.0;
}

double decay(double usage, double elapsed_s, double half_life_s) {
  return half_life_s > 0 ? usage * std::exp2(-elapsed_s / half_life_s) : usage;
}

namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

// gpu_type "h100" matches "NVIDIA H100 80GB HBM3".
bool gpu_matches(std::string_view name, std::string_view type) {
  auto same = [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
  };
  return std::search(name.begin(), name.end(), type.begin(), type.end(), same) != name.end();
}

std::string count(std::int64_t n, std::string_view noun) { return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s"); }

// Cores, GPUs (of the type at hand) and memory bytes. Signed: a slack may be negative.
struct Amount {
  std::int64_t cores = 0, gpus = 0, memory = 0;
  bool covers(const Amount& need) const { return cores >= need.cores && gpus >= need.gpus && memory >= need.memory; }
  Amount& operator+=(const Amount& o) {
    cores += o.cores, gpus += o.gpus, memory += o.memory;
    return *this;
  }
  Amount operator-(const Amount& o) const { return {cores - o.cores, gpus - o.gpus, memory - o.memory}; }
};

class Pass {
 public:
  explicit Pass(const SchedInput& in);
  SchedPlan run();

 private:
  struct Tenant {
    std::string_view name;
    const TenantPolicy* policy = nullptr;  // null: shares 1, no quota
    std::int64_t cores = 0, gpus = 0;      // held by its running jobs and this pass's starts
    double fairshare = 0;
  };
  // A pending job and what the pass needs about it, looked up once.
  struct Entry {
    const PendingJob* job = nullptr;
    int tenant = 0, user = 0, type = 0;
    Amount need;
    PriorityFactors factors;
  };
  // EASY's one reservation: when the top job is expected to start (kNever: only after a
  // job without a time limit ends) and what is left then beyond its needs, which later
  // jobs that outlast the reservation may take.
  struct Reservation {
    const Entry* top = nullptr;
    double time = kNever;
    Amount slack;
  };
  enum class Outcome { Started, NoRoom, WouldDelay };

  int tenant_id(std::string_view name);
  int user_id(std::string_view name);
  int type_id(std::string_view gpu_type);
  std::int64_t free_gpus(int type) const;
  Amount free(int type) const { return {free_cores_, free_gpus(type), free_memory_}; }
  void hold(const std::vector<TaskAlloc>& tasks, int tenant, int user, std::optional<std::int64_t> array,
            std::int64_t id);
  bool blocked(const Entry& e, Verdict& v) const;
  Outcome try_start(const Entry& e, Reservation* res);
  Reservation reserve(const Entry& top, Verdict& v) const;
  std::string shortage(const Entry& e) const;

  const SchedInput& in_;
  const Topology& topo_;
  const bool count_memory_;  // Machine::memory_bytes 0: memory is not known, so not counted
  SchedPlan plan_;
  std::vector<double> start_ends_;  // expected end of each of plan_.starts
  std::vector<char> core_busy_, gpu_busy_;
  std::int64_t free_cores_ = 0, free_memory_ = 0;
  std::vector<std::vector<char>> type_masks_;  // per GPU type: which GPUs match
  std::vector<std::int64_t> type_totals_;
  std::unordered_map<std::string_view, int> type_ids_, tenant_ids_, user_ids_;
  std::vector<Tenant> tenants_;
  std::vector<int> user_jobs_;                        // running jobs per user
  std::unordered_map<std::int64_t, int> array_jobs_;  // running elements per array
  std::unordered_set<std::int64_t> running_ids_;
};

Pass::Pass(const SchedInput& in)
    : in_(in),
      topo_(in.machine->topology),
      count_memory_(in.machine->memory_bytes > 0),
      core_busy_(topo_.cores.size()),
      gpu_busy_(topo_.gpus.size()),
      free_cores_(static_cast<std::int64_t>(topo_.cores.size())),
      free_memory_(static_cast<std::int64_t>(in.machine->memory_bytes)) {
  type_id("");  // type 0: any GPU
  for (const RunningJob& r : in.running) hold(r.tasks, tenant_id(r.tenant), user_id(r.user), r.array_parent, r.id);
}

// Names are interned once so that the walk over the pending jobs indexes vectors; the
// views point into the input, which outlives the pass.
int Pass::tenant_id(std::string_view name) {
  auto [it, added] = tenant_ids_.try_emplace(name, static_cast<int>(tenants_.size()));
  if (added) {
    auto policy = in_.config.tenants.find(std::string(name));
    tenants_.push_back({name, policy == in_.config.tenants.end() ? nullptr : &policy->second});
  }
  return it->second;
}

int Pass::user_id(std::string_view name) {
  auto [it, added] = user_ids_.try_emplace(name, static_cast<int>(user_jobs_.size()));
  if (added) user_jobs_.push_back(0);
  return it->second;
}

int Pass::type_id(std::string_view gpu_type) {
  auto [it, added] = type_ids_.try_emplace(gpu_type, static_cast<int>(type_masks_.size()));
  if (added) {
    std::vector<char> mask(topo_.gpus.size());
    for (std::size_t g = 0; g < mask.size(); ++g) mask[g] = gpu_matches(topo_.gpus[g].name, gpu_type);
    type_totals_.push_back(std::count(mask.begin(), mask.end(), 1));
    type_masks_.push_back(std::move(mask));
  }
  return it->second;
}

std::int64_t Pass::free_gpus(int type) const {
  const std::vector<char>& mask = type_masks_[static_cast<std::size_t>(type)];
  std::int64_t n = 0;
  for (std::size_t g = 0; g < mask.size(); ++g) n += mask[g] && !gpu_busy_[g];
  return n;
}

// GPU indices are positions in topology.gpus, as rkit::place takes them. Indices outside
// the machine are ignored (an allocation made before the machine changed).
void Pass::hold(const std::vector<TaskAlloc>& tasks, int tenant, int user, std::optional<std::int64_t> array,
                std::int64_t id) {
  Tenant& t = tenants_[static_cast<std::size_t>(tenant)];
  for (const TaskAlloc& task : tasks) {
    for (int c : task.cores) {
      t.cores++;
      if (c >= 0 && c < static_cast<int>(core_busy_.size()) && !core_busy_[static_cast<std::size_t>(c)]) {
        core_busy_[static_cast<std::size_t>(c)] = 1;
        free_cores_--;
      }
    }
    for (int g : task.gpus) {
      t.gpus++;
      if (g >= 0 && g < static_cast<int>(gpu_busy_.size())) gpu_busy_[static_cast<std::size_t>(g)] = 1;
    }
    if (count_memory_) free_memory_ -= static_cast<std::int64_t>(task.memory_bytes);
  }
  user_jobs_[static_cast<std::size_t>(user)]++;
  if (array) array_jobs_[*array]++;
  running_ids_.insert(id);
}

// The checks in the order sched.hpp lists them; fills reason, detail, never and waits_for.
bool Pass::blocked(const Entry& e, Verdict& v) const {
  const PendingJob& j = *e.job;
  const Resources& r = j.resources;
  // The detail is made only when it is wanted: most passes store reasons only.
  auto verdict = [&](const char* reason, auto&& detail, bool never = false) {
    v.reason = reason;
    if (in_.details || never) v.detail = detail();
    v.never = never;
    return true;
  };
  if (r.tasks < 1 || r.cpus_per_task < 1 || r.gpus_per_task < 0)
    return verdict(
        "Impossible",
        [&] {
          return fmt::format("asks for {} tasks of {} cores and {} GPUs", r.tasks, r.cpus_per_task, r.gpus_per_task);
        },
        true);
  if (e.need.cores > static_cast<std::int64_t>(topo_.cores.size()))
    return verdict(
        "Impossible",
        [&] { return fmt::format("needs {}, the machine has {}", count(e.need.cores, "core"), topo_.cores.size()); },
        true);
  if (e.need.gpus > type_totals_[static_cast<std::size_t>(e.type)])
    return verdict(
        "Impossible",
        [&] {
          return fmt::format("needs {}{}, the machine has {}", count(e.need.gpus, "GPU"),
                             r.gpu_type.empty() ? "" : " of type " + r.gpu_type,
                             type_totals_[static_cast<std::size_t>(e.type)]);
        },
        true);
  if (count_memory_ && e.need.memory > static_cast<std::int64_t>(in_.machine->memory_bytes))
    return verdict(
        "Impossible",
        [&] {
          return fmt::format("needs {} of memory, the machine has {}",
                             format_bytes(static_cast<std::uint64_t>(e.need.memory)),
                             format_bytes(in_.machine->memory_bytes));
        },
        true);

  const Dependency* waiting = nullptr;  // the first dependency still waiting, for the detail
  for (const Dependency& d : j.depends) {
    auto it = in_.dependencies.find(d.job);
    std::optional<DepStatus> s;
    if (it != in_.dependencies.end()) s = it->second;
    const bool never = !s || (d.type == DepType::AfterOk && *s == DepStatus::NotOk) ||
                       (d.type == DepType::AfterNotOk && *s == DepStatus::Completed);
    if (never)
      return verdict(
          "DependencyNeverSatisfied",
          [&] {
            return fmt::format("{}:{} can never be satisfied: job {} {}", dep_type_name(d.type), d.job, d.job,
                               !s                           ? "is unknown"
                               : *s == DepStatus::Completed ? "completed"
                                                            : "did not succeed");
          },
          true);
    if (*s == DepStatus::Active) {
      if (!waiting) waiting = &d;
      v.waits_for.push_back(d.job);
    }
  }
  if (j.held) {
    v.waits_for.clear();
    return verdict("JobHeldUser", [&] { return fmt::format("held: rsub release {} lets it run", j.id); });
  }
  if (waiting)
    return verdict("Dependency", [&] {
      std::string line = fmt::format("waits for job {} ({}, {})", waiting->job, dep_type_name(waiting->type),
                                     running_ids_.count(waiting->job) ? "running" : "pending");
      if (v.waits_for.size() > 1) line += fmt::format(" and {} more", v.waits_for.size() - 1);
      return line;
    });
  if (j.eligible_s > in_.now)
    return verdict("BeginTime", [&] {
      return fmt::format("retry backoff: eligible in {}", format_duration(j.eligible_s - in_.now));
    });
  if (j.array_parent && j.array_max_concurrent > 0) {
    auto it = array_jobs_.find(*j.array_parent);
    const int n = it == array_jobs_.end() ? 0 : it->second;
    if (n >= j.array_max_concurrent)
      return verdict("JobArrayTaskLimit", [&] {
        return fmt::format("array {} runs {} of its {} at once", *j.array_parent, n, j.array_max_concurrent);
      });
  }
  const int user_jobs = user_jobs_[static_cast<std::size_t>(e.user)];
  if (in_.config.max_running_jobs_per_user && user_jobs >= *in_.config.max_running_jobs_per_user)
    return verdict("UserJobLimit", [&] {
      return fmt::format("user {} runs {} of at most {}", j.user, count(user_jobs, "job"),
                         *in_.config.max_running_jobs_per_user);
    });
  const Tenant& t = tenants_[static_cast<std::size_t>(e.tenant)];
  if (t.policy && t.policy->max_gpus && e.need.gpus > 0 && t.gpus + e.need.gpus > *t.policy->max_gpus)
    return verdict("TenantGpuLimit", [&] {
      return fmt::format("tenant {} holds {} of its {} GPUs{}", t.name, t.gpus, *t.policy->max_gpus,
                         e.need.gpus > 1 ? fmt::format(", needs {}", e.need.gpus) : "");
    });
  if (t.policy && t.policy->max_cpus && t.cores + e.need.cores > *t.policy->max_cpus)
    return verdict("TenantCpuLimit", [&] {
      return fmt::format("tenant {} holds {} of its {} cores{}", t.name, t.cores, *t.policy->max_cpus,
                         e.need.cores > 1 ? fmt::format(", needs {}", e.need.cores) : "");
    });
  return false;
}

// What the job lacks now, "needs 2 GPUs of type H100, 1 of 2 free"; empty when it fits.
std::string Pass::shortage(const Entry& e) const {
  std::vector<std::string> parts;
  const Amount f = free(e.type);
  if (f.cores < e.need.cores)
    parts.push_back(fmt::format("needs {}, {} of {} free", count(e.need.cores, "core"), f.cores, topo_.cores.size()));
  const std::string& type = e.job->resources.gpu_type;
  if (f.gpus < e.need.gpus)
    parts.push_back(fmt::format("needs {}{}, {} of {} free", count(e.need.gpus, "GPU"),
                                type.empty() ? "" : " of type " + type, f.gpus,
                                type_totals_[static_cast<std::size_t>(e.type)]));
  if (f.memory < e.need.memory)
    parts.push_back(fmt::format("needs {} of memory, {} of {} free",
                                format_bytes(static_cast<std::uint64_t>(e.need.memory)),
                                format_bytes(static_cast<std::uint64_t>(std::max<std::int64_t>(f.memory, 0))),
                                format_bytes(in_.machine->memory_bytes)));
  return fmt::format("{}", fmt::join(parts, "; "));
}

// Starts the job when the counts fit (and, behind a reservation, when it ends first or
// leaves the top job enough); only then does it ask rkit::place for the cores and GPUs.
Pass::Outcome Pass::try_start(const Entry& e, Reservation* res) {
  if (!free(e.type).covers(e.need)) return Outcome::NoRoom;
  const std::optional<double>& limit = e.job->time_limit_s;
  const double end = limit ? in_.now + *limit : kNever;
  const bool bound = res && !(res->time < kNever && end <= res->time);
  if (bound && (e.need.cores > std::max<std::int64_t>(res->slack.cores, 0) ||
                e.need.memory > std::max<std::int64_t>(res->slack.memory, 0)))
    return Outcome::WouldDelay;

  // GPUs it may take: free ones of its type; while bound, as few of the top job's GPUs as
  // it can (others first) and no more than the slack.
  const std::vector<char>& mine = type_masks_[static_cast<std::size_t>(e.type)];
  const std::vector<char>* theirs =
      bound && res->top->need.gpus > 0 ? &type_masks_[static_cast<std::size_t>(res->top->type)] : nullptr;
  std::int64_t others = 0, shared = 0;
  for (std::size_t g = 0; g < mine.size(); ++g)
    if (mine[g] && !gpu_busy_[g]) ++(theirs && (*theirs)[g] ? shared : others);
  const std::int64_t take_shared = theirs ? std::max<std::int64_t>(e.need.gpus - others, 0) : shared;
  if (theirs && take_shared > std::max<std::int64_t>(res->slack.gpus, 0)) return Outcome::WouldDelay;

  PlaceRequest req;
  req.ranks = e.job->resources.tasks;
  req.cpus_per_rank = e.job->resources.cpus_per_task;
  req.gpus_per_rank = e.job->resources.gpus_per_task;
  req.policy = in_.config.policy;
  for (std::size_t c = 0; c < core_busy_.size(); ++c)
    if (core_busy_[c]) req.busy_cores.push_back(static_cast<int>(c));
  std::int64_t allowed_shared = take_shared;
  for (std::size_t g = 0; g < mine.size(); ++g) {
    const bool is_shared = theirs && (*theirs)[g];
    if (!mine[g] || gpu_busy_[g] || (is_shared && allowed_shared-- <= 0)) req.busy_gpus.push_back(static_cast<int>(g));
  }
  std::vector<RankPlacement> placed;
  try {
    placed = place(topo_, req);
  } catch (const Error&) {
    return Outcome::NoRoom;  // cannot happen when the counts fit; never start half a gang
  }
  Start s{e.job->id, {}};
  s.tasks.reserve(placed.size());
  for (RankPlacement& p : placed)
    s.tasks.push_back({std::move(p.cores), std::move(p.pus), std::move(p.gpus), e.job->resources.memory_bytes});
  hold(s.tasks, e.tenant, e.user, e.job->array_parent, e.job->id);
  if (bound) res->slack = res->slack - Amount{e.need.cores, take_shared, e.need.memory};
  plan_.starts.push_back(std::move(s));
  start_ends_.push_back(end);
  return Outcome::Started;
}

// Walks the running jobs (this pass's starts included) by expected end until enough is
// free for the top job. Only jobs with a time limit count towards a reservation time;
// without one (kNever), the slack is what is left once all of them ended, and may be
// negative: later jobs then take nothing of that kind.
Pass::Reservation Pass::reserve(const Entry& top, Verdict& v) const {
  struct Ending {
    double end;
    std::int64_t id;
    Amount frees;
  };
  std::vector<Ending> endings;
  const std::vector<char>& mask = type_masks_[static_cast<std::size_t>(top.type)];
  auto add = [&](std::int64_t id, double end, const std::vector<TaskAlloc>& tasks) {
    Amount a;
    for (const TaskAlloc& t : tasks) {
      a.cores += static_cast<std::int64_t>(t.cores.size());
      for (int g : t.gpus) a.gpus += g >= 0 && g < static_cast<int>(mask.size()) && mask[static_cast<std::size_t>(g)];
      if (count_memory_) a.memory += static_cast<std::int64_t>(t.memory_bytes);
    }
    endings.push_back({std::max(end, in_.now), id, a});  // an overdue job ends any moment
  };
  for (const RunningJob& r : in_.running) add(r.id, r.time_limit_s ? r.start_s + *r.time_limit_s : kNever, r.tasks);
  for (std::size_t k = 0; k < plan_.starts.size(); ++k) add(plan_.starts[k].job, start_ends_[k], plan_.starts[k].tasks);
  std::sort(endings.begin(), endings.end(),
            [](const Ending& a, const Ending& b) { return a.end != b.end ? a.end < b.end : a.id < b.id; });

  Reservation res{&top, kNever, {}};
  Amount free_then = free(top.type);
  auto absorb = [&](const Ending& x) {  // waits_for: the jobs whose end frees something it lacks
    if ((free_then.cores < top.need.cores && x.frees.cores > 0) ||
        (free_then.gpus < top.need.gpus && x.frees.gpus > 0) ||
        (free_then.memory < top.need.memory && x.frees.memory > 0))
      v.waits_for.push_back(x.id);
    free_then += x.frees;
  };
  std::size_t k = 0;
  for (; k < endings.size() && endings[k].end < kNever && !free_then.covers(top.need); ++k) absorb(endings[k]);
  if (free_then.covers(top.need)) {
    res.time = k > 0 ? endings[k - 1].end : in_.now;
    for (; k < endings.size() && endings[k].end == res.time; ++k) free_then += endings[k].frees;
    v.expected_start_s = res.time;
  }
  res.slack = free_then - top.need;
  for (; k < endings.size() && !free_then.covers(top.need); ++k) absorb(endings[k]);
  return res;
}

SchedPlan Pass::run() {
  std::vector<Entry> entries(in_.pending.size());
  for (std::size_t k = 0; k < entries.size(); ++k) {
    const PendingJob& j = in_.pending[k];
    const Resources& r = j.resources;
    const std::int64_t tasks = r.tasks;
    entries[k] = {&j,
                  tenant_id(j.tenant),
                  user_id(j.user),
                  type_id(r.gpu_type),
                  {tasks * r.cpus_per_task, tasks * r.gpus_per_task,
                   count_memory_ ? static_cast<std::int64_t>(tasks * r.memory_bytes) : 0},
                  {}};
  }
  // Fair share: tenants_ now holds exactly the tenants with pending or running jobs.
  double total_shares = 0, total_usage = 0;
  for (const Tenant& t : tenants_) total_shares += t.policy ? t.policy->shares : 1.0;
  for (const auto& [name, usage] : in_.usage) total_usage += std::max(usage, 0.0);
  for (Tenant& t : tenants_) {
    auto it = in_.usage.find(std::string(t.name));
    const double u = total_usage > 0 && it != in_.usage.end() ? std::max(it->second, 0.0) / total_usage : 0.0;
    const double s = total_shares > 0 ? (t.policy ? t.policy->shares : 1.0) / total_shares : 0.0;
    t.fairshare = fairshare_factor(u, s);
  }
  const SchedConfig& cfg = in_.config;
  for (Entry& e : entries) {
    const double age = cfg.max_age_s > 0 ? (in_.now - e.job->submit_s) / cfg.max_age_s : 0.0;  // <= 0: age off
    PriorityFactors& f = e.factors;
    f.fairshare = tenants_[static_cast<std::size_t>(e.tenant)].fairshare;
    f.age = std::clamp(age, 0.0, 1.0);
    f.priority = e.job->priority;
    f.score = cfg.weight_fairshare * f.fairshare + cfg.weight_age * f.age + cfg.weight_priority * f.priority;
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    if (a.factors.score != b.factors.score) return a.factors.score > b.factors.score;
    if (a.job->submit_s != b.job->submit_s) return a.job->submit_s < b.job->submit_s;
    return a.job->id < b.job->id;
  });

  std::optional<Reservation> res;
  int position = 0;
  plan_.verdicts.reserve(entries.size());
  for (const Entry& e : entries) {
    Verdict v;
    v.job = e.job->id;
    v.priority = e.factors;
    if (!blocked(e, v)) {
      const Outcome outcome = try_start(e, res ? &*res : nullptr);
      if (outcome == Outcome::Started) continue;
      v.position = ++position;
      if (!res) {
        res = reserve(e, v);
        v.reason = "Resources";
        if (in_.details) {
          v.detail = shortage(e);
          if (v.detail.empty()) v.detail = "cannot be placed";
          v.detail += res->time < kNever
                          ? fmt::format("; expected to start in {}", format_duration(res->time - in_.now))
                          : std::string("; no expected start: a job without a time limit must end first");
        }
      } else {
        const std::int64_t top = res->top->job->id;
        v.reason = "Priority";
        if (in_.details)
          v.detail = outcome == Outcome::NoRoom ? fmt::format("behind job {}; {}", top, shortage(e))
                     : res->time < kNever ? fmt::format("fits now but would delay job {}, expected to start in {}", top,
                                                        format_duration(res->time - in_.now))
                                          : fmt::format("fits now but would take what job {} needs", top);
      }
    }
    plan_.verdicts.push_back(std::move(v));
  }
  return std::move(plan_);
}

}  // namespace

SchedPlan schedule(const SchedInput& input) {
  if (!input.machine) throw Error(Exit::Software, "schedule: no machine given");
  return Pass(input).run();
}

}  // namespace rkit::rsub
