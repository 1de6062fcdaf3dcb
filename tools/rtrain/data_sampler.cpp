// File: rtrain/data_sampler.cpp — which rows each rank trains on (data.hpp: Sampler) and
// evaluates (eval_rows): per-epoch permutations computed from (seed, epoch) alone.
#include <fmt/format.h>

#include <numeric>

#include "data.hpp"
#include "data_impl.hpp"
#include "rkit/error.hpp"
#include "rkit/rng.hpp"

namespace rkit::rtrain {
namespace {

using detail::bits_at;

// unsigned __int128 is a GCC/Clang extension; __extension__ keeps -Wpedantic quiet.
__extension__ typedef unsigned __int128 U128;

// floor(h * n / 2^64): a draw in [0, n) (bias below n / 2^64).
std::uint64_t below(std::uint64_t h, std::uint64_t n) { return static_cast<std::uint64_t>((U128{h} * n) >> 64); }

}  // namespace

Sampler::Sampler(std::uint64_t train_rows, std::uint64_t seed, int rank, int world, std::size_t batch_per_rank)
    : train_rows_(train_rows), seed_(seed) {
  if (world < 1) throw Error(Exit::Usage, fmt::format("sampler: world size must be at least 1, not {}", world));
  if (rank < 0 || rank >= world)
    throw Error(Exit::Usage, fmt::format("sampler: rank {} is not in [0, {})", rank, world));
  if (batch_per_rank == 0) throw Error(Exit::Usage, "sampler: the batch size must be at least 1");
  rank_ = static_cast<std::size_t>(rank);
  world_ = static_cast<std::size_t>(world);
  batch_ = batch_per_rank;
  if (batch_per_rank > train_rows / world_)
    throw Error(Exit::Usage, fmt::format("sampler: {} training rows are fewer than one global batch ({} x {} ranks)",
                                         train_rows, batch_per_rank, world));
  steps_per_epoch_ = train_rows / (batch_ * world_);
}

std::span<const std::uint64_t> Sampler::batch(std::uint64_t step) {
  const std::uint64_t epoch = step / steps_per_epoch_, b = step % steps_per_epoch_;
  if (epoch != epoch_) {
    // Fisher-Yates, the swap partner of position i drawn from (seed, epoch, i) alone.
    const std::uint64_t key = mix64(mix64(seed_ ^ 0x5a3b'1e00'0000'0004ULL) + epoch * kGolden64);
    perm_.resize(train_rows_);
    std::iota(perm_.begin(), perm_.end(), std::uint64_t{0});
    for (std::uint64_t i = train_rows_ - 1; i > 0; --i) std::swap(perm_[i], perm_[below(bits_at(key, i), i + 1)]);
    epoch_ = epoch;
  }
  const std::uint64_t global = batch_ * world_;
  return std::span<const std::uint64_t>(perm_).subspan(b * global + rank_ * batch_, batch_);
}

std::vector<std::uint64_t> eval_rows(std::uint64_t train_rows, std::uint64_t rows, int rank, int world) {
  if (world < 1) throw Error(Exit::Usage, fmt::format("eval rows: world size must be at least 1, not {}", world));
  if (rank < 0 || rank >= world)
    throw Error(Exit::Usage, fmt::format("eval rows: rank {} is not in [0, {})", rank, world));
  std::vector<std::uint64_t> out;
  if (train_rows >= rows) return out;
  out.reserve((rows - train_rows) / static_cast<std::uint64_t>(world) + 1);
  for (std::uint64_t r = train_rows + static_cast<std::uint64_t>(rank); r < rows;
       r += static_cast<std::uint64_t>(world))
    out.push_back(r);
  return out;
}

}  // namespace rkit::rtrain
