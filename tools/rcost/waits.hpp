// File: tools/rcost/waits.hpp
//
// A row's queue waits, for their count and percentiles, in memory bounded whatever the
// number of jobs: up to kExact waits are kept as they are, and their percentiles are
// exact (linear between ranks, numpy's default); past that they are counted in
// logarithmic buckets, each (γ^(i-1), γ^i] with γ = (1 + α) / (1 - α): the wait of a
// rank is its bucket's middle 2γ^i / (γ + 1), within α (0.5%) of the real one
// (DDSketch's guarantee), and a percentile is linear between the two ranks around it,
// so within α of the exact percentile too (when both ranks have one sign). Waits merge
// (rows of several threads, chunks, pieces), so that a report streams.
#pragma once

#include <cstdint>
#include <vector>

namespace rkit::rcost {

class Waits {
 public:
  static constexpr std::size_t kExact = 1024;
  static constexpr double kAlpha = 0.005;

  void add(double seconds);
  void merge(const Waits& other);
  std::uint64_t count() const { return count_; }
  bool empty() const { return count_ == 0; }
  bool exact() const { return !sketch_; }
  // Percentile q (0..1) of the waits; 0 when there are none. Reorders the exact ones.
  double quantile(double q);

 private:
  // A side of zero: bucket i counts magnitudes in (γ^(i-1), γ^i], i from base.
  struct Buckets {
    std::int32_t base = 0;
    std::vector<std::uint64_t> counts;
    void add(std::int32_t i, std::uint64_t n);
  };
  void to_sketch();
  double ranked(std::uint64_t rank) const;  // the sketched wait of rank `rank`, from 0
  void count_in(double v, std::uint64_t n);

  std::uint64_t count_ = 0;
  bool sketch_ = false;
  std::vector<double> exact_;
  Buckets positive_, negative_;  // negative waits (clock skew) by magnitude
  std::uint64_t zeros_ = 0;      // magnitude under 1 µs
};

}  // namespace rkit::rcost
