// rtrain run's strategies: the registry and the shard layout (see strategy.hpp).
#include "strategy.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "rkit/error.hpp"

namespace rkit::rtrain {
namespace {

std::vector<StrategyInfo>& registry() {
  static std::vector<StrategyInfo> all;
  return all;
}

}  // namespace

StrategyRegistrar::StrategyRegistrar(std::string name, std::string summary, StrategyFactory make) {
  auto& all = registry();
  all.push_back({std::move(name), std::move(summary), std::move(make)});
  std::sort(all.begin(), all.end(), [](const StrategyInfo& a, const StrategyInfo& b) { return a.name < b.name; });
}

const std::vector<StrategyInfo>& strategies() { return registry(); }

void check_strategy(const std::string& name) {
  std::vector<std::string> names;
  for (const StrategyInfo& s : registry()) {
    if (s.name == name) return;
    names.push_back(s.name);
  }
  throw Error(Exit::Usage, fmt::format("unknown strategy '{}' (expected {})", name, fmt::join(names, ", ")));
}

std::unique_ptr<Strategy> make_strategy(const std::string& name, const StrategySetup& setup) {
  check_strategy(name);
  for (const StrategyInfo& s : registry())
    if (s.name == name) return s.make(setup);
  return nullptr;  // not reached: check_strategy threw
}

ShardLayout::ShardLayout(const std::vector<LayerSlot>& slots, unsigned ranks) {
  if (ranks == 0) ranks = 1;
  for (const LayerSlot& s : slots) {
    Layer l;
    l.count = s.in * s.out + s.out;
    l.shard = (l.count + ranks - 1) / ranks;
    l.padded = padded_total;
    l.sharded = shard_total;
    l.unpadded = s.weight;
    padded_total += l.shard * ranks;
    shard_total += l.shard;
    widest_padded = std::max(widest_padded, l.shard * ranks);
    layers.push_back(l);
  }
}

}  // namespace rkit::rtrain
