// comm.gloo's plan as worker arguments (comm_gloo.hpp): `rbench _worker comm.gloo
// parent=PID rank=1 ranks=2 store=DIR warmup=1 reps=5 timeout_ms=60000
// collectives=allreduce,... sizes=16,64,...`, and back.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>

#include "comm_gloo.hpp"
#include "rkit/error.hpp"

namespace rkit::rbench::comm {

Collective gloo_collective_named(const std::string& name) {
  if (const auto c = collective_named(name))
    for (Collective g : kGlooCollectives)
      if (g == *c) return g;
  throw Error(Exit::Usage, "comm.gloo: unknown collective '" + name + "'");
}

std::vector<std::string> split_list(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(sep, start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::uint64_t worker_number(const std::string& key, const std::string& text) {
  try {
    std::size_t used = 0;
    unsigned long long v = std::stoull(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw Error(Exit::Usage, "comm.gloo worker: " + key + "=" + text + ": not a number");
}

std::vector<std::string> plan_to_args(const RankPlan& plan) {
  std::vector<const char*> names;
  for (Collective c : plan.collectives) names.push_back(collective_name(c));
  const std::string collectives = fmt::format("{}", fmt::join(names, ","));
  const std::string sizes = fmt::format("{}", fmt::join(plan.sizes, ","));
  return {"rank=" + std::to_string(plan.rank), "ranks=" + std::to_string(plan.ranks),
          "store=" + plan.store_dir,           "warmup=" + std::to_string(plan.warmup),
          "reps=" + std::to_string(plan.reps), "timeout_ms=" + std::to_string(plan.timeout.count()),
          "collectives=" + collectives,        "sizes=" + sizes};
}

RankPlan plan_from_args(const std::vector<std::string>& args) {
  RankPlan plan;
  bool have_store = false;
  auto number = worker_number;
  for (const std::string& arg : args) {
    const auto eq = arg.find('=');
    if (eq == std::string::npos) throw Error(Exit::Usage, "comm.gloo worker: expected KEY=VALUE, got '" + arg + "'");
    const std::string key = arg.substr(0, eq), value = arg.substr(eq + 1);
    if (key == "rank")
      plan.rank = static_cast<unsigned>(number(key, value));
    else if (key == "ranks")
      plan.ranks = static_cast<unsigned>(number(key, value));
    else if (key == "store") {
      plan.store_dir = value;
      have_store = true;
    } else if (key == "warmup")
      plan.warmup = static_cast<int>(number(key, value));
    else if (key == "reps")
      plan.reps = static_cast<int>(number(key, value));
    else if (key == "timeout_ms")
      plan.timeout = std::chrono::milliseconds(number(key, value));
    else if (key == "collectives")
      for (const auto& name : split_list(value, ',')) plan.collectives.push_back(gloo_collective_named(name));
    else if (key == "sizes")
      for (const auto& s : split_list(value, ',')) plan.sizes.push_back(number(key, s));
    else
      throw Error(Exit::Usage, "comm.gloo worker: unknown argument '" + key + "'");
  }
  if (!have_store || plan.ranks == 0 || plan.rank >= plan.ranks || plan.reps < 1)
    throw Error(Exit::Usage, "comm.gloo worker: incomplete plan");
  return plan;
}

}  // namespace rkit::rbench::comm
