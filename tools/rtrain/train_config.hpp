// File: rtrain/train_config.hpp
//
// What `rtrain run` trains and how: the run configuration, read from a TOML file
// (rtrain(1), CONFIGURATION) with command-line flags over it. Defaults train the
// reference workload: a 256→1024→1024→1 GELU MLP on synthetic factor-model data,
// batch 512 per rank, AdamW. Every flag and key is declared once, in run_options().
//
//   OptionFlags flags = run_options().add_to(*run_cmd);     // rtrain run's flags
//   ...parse...
//   TrainConfig c = resolve_run_config("run.toml", flags);  // flags over the file over the defaults
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mlp.hpp"
#include "rkit/options.hpp"

namespace rkit::rtrain {

enum class Loss { Mse, CrossEntropy };

struct TrainConfig {
  // [model]
  std::vector<std::size_t> layers = {256, 1024, 1024, 1};  // input features, hidden sizes..., outputs
  kernels::Activation activation = kernels::Activation::Gelu;
  Loss loss = Loss::Mse;
  // [data]
  std::string data = "synthetic";  // or a .csv, .npy or .safetensors file
  std::uint64_t rows = 100'000;    // synthetic rows (a file has its own)
  std::size_t factors = 8;         // synthetic latent factors
  double noise = 0.5;              // synthetic noise scale
  double eval_fraction = 0.05;     // the tail held out for evaluation
  // [train]
  std::size_t batch_size = 512;  // per rank
  std::uint64_t steps = 1000;    // 0: use epochs
  std::uint64_t epochs = 0;
  double lr = 1e-3, min_lr = 0, weight_decay = 0.01, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  std::uint64_t warmup_steps = 100;
  double clip_grad_norm = 1.0;   // 0: no clipping
  std::uint64_t eval_every = 0;  // 0: only at the end
  std::uint64_t log_every = 10;
  std::uint64_t seed = 0;
  std::optional<double> target_loss;  // time to this evaluation loss in the summary
  std::string device = "cpu";         // cpu | cuda
  int threads = 0;                    // CPU threads for BLAS (0: the usable cores / LOCAL_WORLD_SIZE)
  double bucket_mb = 1.0;             // gradient bucket size for the overlapped all-reduce
  std::string strategy = "dp";        // how the ranks split the work (strategy.hpp): dp | zero1 | ... | 3d
  unsigned tensor_parallel = 0;       // ranks of a tensor-parallel group (0: the strategy's: tp all, else 1)
  unsigned pipeline_parallel = 0;     // pipeline stages (0: the strategy's: pp all, else 1)
  unsigned micro_batches = 0;         // a pipeline's micro-batches a step (0: 4 a stage; 1 without one)
  std::string schedule = "1f1b";      // the pipeline's schedule: 1f1b | gpipe
  // [checkpoint]
  std::uint64_t ckpt_every = 0;  // steps between checkpoints (0: none)
  std::string ckpt_dir;          // default $RKIT_CKPT_DIR
  bool pack = true;              // rckpt pack each checkpoint in the background
  std::string resume_from;       // default: the newest complete in ckpt_dir, else $RKIT_RESUME_FROM
  std::string init_from;         // a fine-tune: start from this checkpoint's weights, at step 0
  // outputs
  std::string output;  // final weights (safetensors, rank 0)
  std::string events;  // rkit.train.event.v1 records ("-": stdout)
  std::string trace;   // each rank's timeline here (trace.hpp)

  std::size_t outputs() const { return layers.back(); }
  // Checks ranges and combinations; Error(Usage) "lr must be > 0" (the configuration's key names).
  void validate() const;
  // The values that must match between a checkpoint and the run resuming it.
  std::string fingerprint() const;
};

// rtrain run's options: each flag, each key of the configuration file, or both
// (rtrain(1), OPTIONS and CONFIGURATION), in --help's order.
const OptionTable<TrainConfig>& run_options();

// The run that `rtrain run [CONFIG.toml] flags...` describes: the flags given over the
// file (none when `path` is empty) over the defaults. --epochs without --steps (and
// epochs without steps in the file) trains for epochs; an empty checkpoint folder
// defaults to $RKIT_CKPT_DIR; min_lr is at most lr. Errors of the file as
// load_train_config(), of the flags and of the whole run Error(Usage) (validate()).
TrainConfig resolve_run_config(const std::string& path, const OptionFlags& flags);

// Reads a run configuration (TOML) over the defaults. Unknown tables or keys and values
// of the wrong type or range are Error(Config) naming file:line:column; a missing file
// is Error(NoInput).
TrainConfig load_train_config(const std::string& path);

// Names of activations and losses as the configuration and flags spell them.
kernels::Activation parse_activation(const std::string& name);  // gelu | relu; Error(Usage) otherwise
Loss parse_loss(const std::string& name);                       // mse | cross_entropy
const char* activation_name(kernels::Activation a);             // and back
const char* loss_name(Loss l);
// "256,1024,1024,1" → sizes (at least 2, each 1 to 1<<20); Error(Usage) otherwise.
std::vector<std::size_t> parse_layers(const std::string& text);

}  // namespace rkit::rtrain
