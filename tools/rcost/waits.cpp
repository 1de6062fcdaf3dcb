// File: tools/rcost/waits.cpp — queue waits' percentiles, exact then sketched (waits.hpp).
#include "waits.hpp"

#include <algorithm>
#include <cmath>

namespace rkit::rcost {

namespace {

constexpr double kGamma = (1 + Waits::kAlpha) / (1 - Waits::kAlpha);
constexpr double kTiny = 1e-6;  // seconds: smaller magnitudes count as zero
const double kLogGamma = std::log(kGamma);

std::int32_t bucket_of(double magnitude) {
  return static_cast<std::int32_t>(std::ceil(std::log(magnitude) / kLogGamma));
}
double middle_of(std::int32_t i) { return 2 * std::pow(kGamma, i) / (kGamma + 1); }

// Percentile q of v, linear between ranks; reorders v. O(n).
double exact_quantile(std::vector<double>& v, double q) {
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(lo), v.end());
  const double a = v[lo];
  if (pos == static_cast<double>(lo) || lo + 1 >= v.size()) return a;
  const double b = *std::min_element(v.begin() + static_cast<std::ptrdiff_t>(lo) + 1, v.end());
  return a + (pos - static_cast<double>(lo)) * (b - a);
}

}  // namespace

void Waits::Buckets::add(std::int32_t i, std::uint64_t n) {
  if (counts.empty()) base = i;
  if (i < base) {
    counts.insert(counts.begin(), static_cast<std::size_t>(base - i), 0);
    base = i;
  }
  const auto at = static_cast<std::size_t>(i - base);
  if (at >= counts.size()) counts.resize(at + 1, 0);
  counts[at] += n;
}

void Waits::count_in(double v, std::uint64_t n) {
  if (std::fabs(v) < kTiny)
    zeros_ += n;
  else if (v > 0)
    positive_.add(bucket_of(v), n);
  else
    negative_.add(bucket_of(-v), n);
}

void Waits::to_sketch() {
  if (sketch_) return;
  sketch_ = true;
  for (double v : exact_) count_in(v, 1);
  std::vector<double>().swap(exact_);
}

void Waits::add(double seconds) {
  ++count_;
  if (!sketch_) {
    exact_.push_back(seconds);
    if (exact_.size() > kExact) to_sketch();
    return;
  }
  count_in(seconds, 1);
}

void Waits::merge(const Waits& other) {
  if (other.count_ == 0) return;
  count_ += other.count_;
  if (!sketch_ && !other.sketch_ && exact_.size() + other.exact_.size() <= kExact) {
    exact_.insert(exact_.end(), other.exact_.begin(), other.exact_.end());
    return;
  }
  to_sketch();
  for (double v : other.exact_) count_in(v, 1);
  zeros_ += other.zeros_;
  for (std::size_t i = 0; i < other.positive_.counts.size(); ++i)
    if (other.positive_.counts[i])
      positive_.add(other.positive_.base + static_cast<std::int32_t>(i), other.positive_.counts[i]);
  for (std::size_t i = 0; i < other.negative_.counts.size(); ++i)
    if (other.negative_.counts[i])
      negative_.add(other.negative_.base + static_cast<std::int32_t>(i), other.negative_.counts[i]);
}

double Waits::ranked(std::uint64_t rank) const {
  // In order: negatives (largest magnitude first), zeros, positives.
  std::uint64_t seen = 0;
  for (std::size_t k = negative_.counts.size(); k-- > 0;) {
    seen += negative_.counts[k];
    if (seen > rank) return -middle_of(negative_.base + static_cast<std::int32_t>(k));
  }
  seen += zeros_;
  if (seen > rank) return 0;
  for (std::size_t k = 0; k < positive_.counts.size(); ++k) {
    seen += positive_.counts[k];
    if (seen > rank) return middle_of(positive_.base + static_cast<std::int32_t>(k));
  }
  return middle_of(positive_.base + static_cast<std::int32_t>(positive_.counts.size()) - 1);
}

double Waits::quantile(double q) {
  if (count_ == 0) return 0;
  if (!sketch_) return exact_quantile(exact_, q);
  // Linear between the two ranks around q (n - 1), as for exact waits: each within α
  // of its wait, so the interpolation is within α of the exact one's.
  const double pos = q * static_cast<double>(count_ - 1);
  const auto lo = static_cast<std::uint64_t>(std::floor(pos));
  const double a = ranked(lo);
  if (lo + 1 >= count_ || pos == static_cast<double>(lo)) return a;
  return a + (pos - static_cast<double>(lo)) * (ranked(lo + 1) - a);
}

}  // namespace rkit::rcost
