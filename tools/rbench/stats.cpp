#include "stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <utility>

namespace rkit::rbench {

Summary summarize(std::vector<double> v) {
  if (v.empty()) throw std::invalid_argument("no samples");
  std::sort(v.begin(), v.end());
  Summary s;
  s.n = v.size();
  s.min = v.front();
  s.max = v.back();
  s.median = s.n % 2 ? v[s.n / 2] : (v[s.n / 2 - 1] + v[s.n / 2]) / 2;
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(s.n);
  if (s.n > 1) {
    double sq = 0;
    for (double x : v) sq += (x - s.mean) * (x - s.mean);
    s.stddev = std::sqrt(sq / static_cast<double>(s.n - 1));
  }
  s.cv = s.mean != 0 ? s.stddev / std::fabs(s.mean) : 0;
  return s;
}

double mann_whitney_p(const std::vector<double>& a, const std::vector<double>& b) {
  const double n1 = static_cast<double>(a.size()), n2 = static_cast<double>(b.size());
  if (a.empty() || b.empty()) return 1;
  // Rank all values together; ties get the mean of their ranks.
  std::vector<std::pair<double, int>> all;
  for (double x : a) all.emplace_back(x, 0);
  for (double x : b) all.emplace_back(x, 1);
  std::sort(all.begin(), all.end());
  double rank_sum_a = 0, tie_term = 0;
  for (std::size_t i = 0; i < all.size();) {
    std::size_t j = i;
    while (j < all.size() && all[j].first == all[i].first) ++j;
    double t = static_cast<double>(j - i);
    double mean_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    for (std::size_t k = i; k < j; ++k)
      if (all[k].second == 0) rank_sum_a += mean_rank;
    tie_term += t * t * t - t;
    i = j;
  }
  const double n = n1 + n2;
  const double u = rank_sum_a - n1 * (n1 + 1) / 2;
  const double mean_u = n1 * n2 / 2;
  const double var_u = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1)));
  if (var_u <= 0) return 1;
  const double z = std::max(0.0, std::fabs(u - mean_u) - 0.5) / std::sqrt(var_u);
  return std::erfc(z / std::sqrt(2.0));
}

}  // namespace rkit::rbench
