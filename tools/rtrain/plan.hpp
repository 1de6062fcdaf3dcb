// File: rtrain/plan.hpp
//
// `rtrain plan`: for rtrain run's model, global batch and a rank count on a machine,
// the predicted step of every strategy and grid — compute, exposed communication and
// pipeline bubble, memory held and bytes sent a rank — ranked fastest first, as in
// Calculon (Isaev et al., SC'23) and Megatron-LM's analysis (Narayanan et al. 2021), for
// the MLP rtrain runs.
//
//   Machine m = machine_from_bench(records, threads_per_rank);   // this one, measured
//   Machine h = load_machine("h200x8.toml");                    // or one described
//   std::vector<Plan> plans = plan_strategies(config, ranks, m); // ranked
//
// The model of a step: each rank's matrix products at the machine's GEMM rate, its
// element-wise passes and AdamW at its memory bandwidth; each collective as nccl-tests
// times it (latency + bytes × busbw factor / bus bandwidth), at `comm_speed` of that,
// or `overlap_speed` when it runs beside computation; a step simulated as
// the rank's computation and its queue of collectives in the strategy's order, each
// collective waiting for what it carries, each pass for what it needs.
// A pipeline is simulated stage by stage through its schedule. The step excludes loading
// the data (rtrain run's data_s).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "rkit/collectives.hpp"
#include "rkit/jsonl.hpp"
#include "strategy.hpp"
#include "train_config.hpp"

namespace rkit::rtrain {

struct Machine {
  std::string name, device = "cpu";  // device: as rtrain run's summary names it ("cpu (1 BLAS thread)")
  double gemm_flops = 0;             // one rank's sustained fp32 GEMM rate, FLOP/s
  // Or the rate by a product's size, the cube root of m n k (ascending; log-log between points,
  // clamped outside): small products run slower. Empty: gemm_flops.
  std::vector<std::pair<double, double>> gemm_by_size;
  double memory_bandwidth = 0;  // one rank's, bytes/s
  double memory_bytes = 0;      // what one rank may hold (0: unknown)
  // Each collective's cost, nccl-tests' way: latency + bytes × busbw factor / bus bandwidth.
  struct Link {
    double latency_s = 0, busbw = 0;  // seconds, bytes/s
  };
  Link links[std::size(kAllCollectives)];
  Link p2p;  // point to point: latency + bytes / bandwidth
  // The share of those times' speed a training step's collectives reach, alone and beside
  // the step's computation (0, 1]: CPU collectives share their cores with it.
  double comm_speed = 1, overlap_speed = 1;
  // FLOP/s of a product of size `size` (the cube root of m n k: a square product's side).
  double gemm_rate(double size) const;
  // Seconds for `c` over `bytes` (the whole buffer, as nccl-tests sizes it) on `ranks`,
  // alone (beside: computation runs meanwhile).
  double collective_s(Collective c, double bytes, int ranks, bool beside = false) const;
  double transfer_s(double bytes) const;
};

// This machine from rbench records (rbench run cpu.gemm cpu.stream comm.gloo --json):
// sgemm's rate by size and STREAM triad, each per thread times `threads` a rank; each comm.gloo collective's latency
// and bus bandwidth, fitted to its times by size (least squares of the relative error; broadcast's on 2 ranks for point
// to point). Error(DataErr) naming what is missing.
Machine machine_from_bench(const std::vector<Json>& records, int threads, const std::string& host);

// A described machine (TOML, rtrain(1) PLANS):
//   [machine] name, device, gemm_tflops, memory_gbps, memory_gib
//   [network] busbw_gbps, p2p_gbps, latency_us, comm_speed, overlap_speed
// Error(Config) for a bad or missing key, Error(NoInput) for no file.
Machine load_machine(const std::string& path);

struct Plan {
  std::string strategy, schedule;
  int tp = 1, pp = 1, dp = 1;
  unsigned micro_batches = 1;
  double step_s = 0, compute_s = 0, exposed_s = 0, bubble_s = 0;
  CommCounters sent;  // a step's bytes, the busiest rank's
  MemoryHeld memory;  // the rank that holds most
  bool fits = true;
  Json to_json(const TrainConfig& c, int world, const Machine& m) const;
};

// Every strategy and grid that `world` ranks allow for the model (dp, the ZeRO stages,
// tp, pp and each tp x pp x dp grid with tp, pp > 1), predicted and ranked: the ones that
// fit first, fastest first. Only `only` when not empty.
std::vector<Plan> plan_strategies(const TrainConfig& c, int world, const Machine& m, const std::string& only = "");

}  // namespace rkit::rtrain
