// File: rtrain/strategy.hpp
//
// How `rtrain run` splits training across its ranks: a strategy owns the model's state
// (parameters, gradients, AdamW's moments, whole or sharded), runs a step's forward and
// backward passes with the communication they need, the optimizer, and evaluation, and
// moves the state to and from the whole, unsharded form checkpoints hold — so that a
// checkpoint saved under one strategy and rank count resumes under another.
//
// Strategies are plug-ins: each file defines its class and registers it with
// RKIT_TRAIN_STRATEGY; the trainer (run.cpp) finds them by name (--strategy).
//
//   std::unique_ptr<Strategy> s = make_strategy("zero2", {dev, comm, config});
//   s->load_state(initial_params(layer_slots(config.layers), seed).data(), nullptr, nullptr);
//   DataShard d = s->data_shard();      // which rows this rank reads: the replica's
//   s->upload_batch(x, y, labels, rows);
//   s->begin_step();
//   double loss_sum = s->forward_backward(rows, loss_scale);
//   double norm = std::sqrt(s->grad_norm_squared());
//   s->optimizer_step(adamw);           // clipped as the norm says
//   StepComm c = s->end_step();         // bytes sent, time in collectives and waiting
//
// Every call that communicates is collective: every rank makes it, in the same order.
// Rows: the global batch is batch_size rows a rank, whatever the strategy. The ranks
// that hold one model replica between them (tensor and pipeline parallel) read the same
// rows: data_shard() says which replica this rank belongs to and how many there are,
// and each replica trains on batch_size * world / replicas rows of a step.
// Errors: the communicator's (Unavailable for a lost peer), Error(Usage) from
// make_strategy for an unknown name or a device the strategy cannot run on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm.hpp"
#include "model.hpp"
#include "train_config.hpp"

namespace rkit::rtrain {

// One step's communication, as this rank saw it.
struct StepComm {
  double comm_s = 0;      // time spent in the step's collectives
  double exposed_s = 0;   // time the step waited for them
  double bubble_s = 0;    // time a pipeline stage waited for its neighbours' activations or gradients
  double pipeline_s = 0;  // the pipeline's span: from the first forward to the last stage's end (0: none)
  CommCounters sent;      // bytes sent, by collective (ring_bytes_sent) and point to point
};

// The data-parallel replica a rank belongs to: replicas `world`, this rank's `rank`.
struct DataShard {
  int rank = 0, world = 1;
};

// What this rank holds, in bytes: the state the strategy keeps between steps
// (parameters, gradients, optimizer moments: the ZeRO paper's three terms), and the
// staging buffers it works in (gradients before their reduce-scatter, parameters
// gathered ahead of use).
struct MemoryHeld {
  std::uint64_t params = 0, grads = 0, optimizer = 0, buffers = 0;
};

struct StrategySetup {
  Device& dev;
  Communicator& comm;
  const TrainConfig& config;
  Tracer* tracer = nullptr;  // the passes' and waits' slices (null: none)
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // Which rows this rank trains and evaluates on (see above).
  virtual DataShard data_shard() const = 0;
  // Whether this rank's loss sums count: false on the ranks whose replica's loss another
  // rank reports (the other ranks of a tensor-parallel group, the stages before the last).
  virtual bool reports_loss() const { return true; }
  // The whole state, on every rank, in the flat layout of layer_slots(config.layers): each rank keeps
  // its part. Moments null: zeros (a fresh optimizer).
  virtual void load_state(const float* params, const float* exp_avg, const float* exp_avg_sq) = 0;
  // Collective: the whole state into the given host arrays (the flat layout); a rank that
  // keeps nothing passes null pointers, but every rank asks for the same parts (`moments`).
  virtual void gather_state(bool moments, float* params, float* exp_avg, float* exp_avg_sq) = 0;
  // This rank's rows of the step (its replica's).
  virtual void upload_batch(const float* x, const float* y, const std::int32_t* labels, std::size_t rows) = 0;
  virtual void begin_step() = 0;
  // Forward and backward; afterwards the gradients are reduced as the strategy keeps them.
  // Returns this rank's loss sum (Mlp::forward_backward).
  virtual double forward_backward(std::size_t rows, float loss_scale) = 0;
  // The squared L2 norm of the whole (mean) gradient, the same on every rank.
  virtual double grad_norm_squared() = 0;
  virtual void optimizer_step(const kernels::AdamwStep& s) = 0;
  virtual StepComm end_step() = 0;
  // Forward only over this rank's uploaded rows: loss sum and correct rows (Mlp::evaluate).
  virtual std::pair<double, std::size_t> evaluate(std::size_t rows) = 0;
  virtual MemoryHeld memory() const = 0;
};

using StrategyFactory = std::function<std::unique_ptr<Strategy>(const StrategySetup&)>;

struct StrategyInfo {
  std::string name, summary;
  StrategyFactory make;
};

// Every registered strategy, by name.
const std::vector<StrategyInfo>& strategies();
// The strategy of that name, built; Error(Usage) naming the known ones otherwise.
std::unique_ptr<Strategy> make_strategy(const std::string& name, const StrategySetup& setup);
// Error(Usage) "unknown strategy 'x' (expected dp, zero1, ...)" unless one of that name is registered.
void check_strategy(const std::string& name);

struct StrategyRegistrar {
  StrategyRegistrar(std::string name, std::string summary, StrategyFactory make);
};
#define RKIT_TRAIN_STRATEGY(id, name, summary, factory) \
  static const ::rkit::rtrain::StrategyRegistrar rkit_train_strategy_##id { name, summary, factory }

// How the sharded strategies cut the model: each layer's block (W then b) padded to a
// multiple of the rank count and cut in equal shards, rank r holding [r * shard, (r + 1)
// * shard) of it — FSDP's flat parameter per layer. Offsets in floats.
struct ShardLayout {
  struct Layer {
    std::size_t count = 0;     // floats of the layer (W and b)
    std::size_t shard = 0;     // floats of one rank's shard: ceil(count / ranks)
    std::size_t padded = 0;    // offset of the layer in a whole padded buffer (ranks * shard each)
    std::size_t sharded = 0;   // offset of the layer's shard in a rank's shard buffer
    std::size_t unpadded = 0;  // offset of the layer in the flat layout (LayerSlot::weight)
  };
  std::vector<Layer> layers;
  std::size_t padded_total = 0, shard_total = 0, widest_padded = 0;
  ShardLayout(const std::vector<LayerSlot>& slots, unsigned ranks);
};

// Pipeline stages (strategy_mp.cpp): stage s holds layers [cut[s], cut[s+1]), each about
// an equal share of the work, at least one layer each. A layer's work: in × out times its
// matrix products, three (forward, the weights' gradient, the input's) and two for the
// first layer, whose input needs no gradient. Error(Usage) for more stages than layers.
std::vector<std::size_t> pipeline_cut(const std::vector<LayerSlot>& slots, int stages);

// How tensor parallelism on `tp` ranks holds layers [first, last) of a stage: in pairs,
// the first column-parallel, the second row-parallel; a layer left over whole (every
// layer whole for tp 1). Error(Usage) when tp does not divide a column layer's outputs.
enum class Split { Whole, Column, Row };
std::vector<Split> tensor_splits(const std::vector<LayerSlot>& slots, std::size_t first, std::size_t last, int tp);

}  // namespace rkit::rtrain
