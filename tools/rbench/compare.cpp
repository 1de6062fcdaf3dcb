#include "compare.hpp"

#include <map>

#include "record.hpp"
#include "stats.hpp"

namespace rkit::rbench {
namespace {

constexpr double kSignificance = 0.05;

std::vector<double> samples_of(const Json& r) { return r.at("samples").get<std::vector<double>>(); }

}  // namespace

Json Comparison::to_json() const {
  auto opt = [](const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); };
  return Json{{"schema", "rkit.bench.compare.v1"},
              {"suite", suite},
              {"metric", metric},
              {"unit", unit},
              {"params", params},
              {"base_median", opt(base_median)},
              {"new_median", opt(new_median)},
              {"ratio", opt(ratio)},
              {"p_value", opt(p_value)},
              {"verdict", verdict}};
}

std::vector<Comparison> compare_runs(const std::vector<Json>& base, const std::vector<Json>& fresh, double fail_below) {
  // The last record of a key wins, as when a file holds repeated runs.
  std::map<std::string, const Json*> in_base, in_new;
  std::vector<std::string> order;
  for (const auto& r : base)
    if (in_base.insert_or_assign(measurement_key(r), &r).second) order.push_back(measurement_key(r));
  for (const auto& r : fresh) {
    std::string key = measurement_key(r);
    if (in_new.insert_or_assign(key, &r).second && !in_base.count(key)) order.push_back(key);
  }
  std::vector<Comparison> out;
  for (const auto& key : order) {
    const Json* b = in_base.count(key) ? in_base[key] : nullptr;
    const Json* n = in_new.count(key) ? in_new[key] : nullptr;
    const Json& any = b ? *b : *n;
    Comparison c;
    c.suite = any.at("suite").get<std::string>();
    c.metric = any.at("metric").get<std::string>();
    c.unit = any.at("unit").get<std::string>();
    c.params = any.value("params", Json::object());
    if (b) c.base_median = b->at("median").get<double>();
    if (n) c.new_median = n->at("median").get<double>();
    if (!b || !n) {
      c.verdict = b ? "only in base" : "only in new";
      out.push_back(std::move(c));
      continue;
    }
    if (n->value("correct", true) == false) {  // fast and wrong is not better
      c.verdict = "wrong";
      out.push_back(std::move(c));
      continue;
    }
    if (b->at("unit") != n->at("unit")) {
      c.verdict = "other unit";
      out.push_back(std::move(c));
      continue;
    }
    double bm = *c.base_median, nm = *c.new_median;
    if (bm > 0 && nm > 0) c.ratio = higher_is_better(c.unit) ? nm / bm : bm / nm;
    auto xs = samples_of(*b), ys = samples_of(*n);
    if (xs.size() >= kMinTestSamples && ys.size() >= kMinTestSamples) c.p_value = mann_whitney_p(xs, ys);
    bool real = !c.p_value || *c.p_value < kSignificance;
    if (!c.ratio)
      c.verdict = "same";
    else if (*c.ratio < fail_below && real)
      c.verdict = "regression";
    else if (*c.ratio < 1 && real && c.p_value)
      c.verdict = "worse";
    else if (*c.ratio > 1 / fail_below && real)
      c.verdict = "better";
    else
      c.verdict = "same";
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace rkit::rbench
