// rtrain run's configuration: TOML over the defaults (see train_config.hpp).
#include "train_config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "rkit/config.hpp"
#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "strategy.hpp"

namespace rkit::rtrain {
namespace {

using Options = OptionTable<TrainConfig>;

// model.layers = [8, 4, 1] as --layers spells it, "8,4,1" (an item that is not an
// integer as "?", for parse_layers to refuse).
std::string layers_text(const Config& cfg, const std::string& key) {
  const toml::array* arr = cfg.table.at_path(key).as_array();
  if (!arr) throw Error(Exit::Config, fmt::format("{}: '{}' must be an array of sizes", cfg.where(key), key));
  std::vector<std::string> sizes;
  for (const auto& v : *arr) {
    const auto n = v.value_exact<std::int64_t>();
    sizes.push_back(n ? std::to_string(*n) : std::string("?"));
  }
  return fmt::format("{}", fmt::join(sizes, ","));
}

}  // namespace

const OptionTable<TrainConfig>& run_options() {
  using C = TrainConfig;
  static const Options kOptions(
      {"model", "data", "train", "checkpoint"},
      {
          Options::whole("--steps", "train.steps", &C::steps, "N", "Optimizer steps (default 1000)"),
          Options::whole("--epochs", "train.epochs", &C::epochs, "N",
                         "Passes over the training rows, instead of --steps"),
          Options::whole("--batch-size", "train.batch_size", &C::batch_size, "N",
                         "Rows per rank per step (default 512)"),
          Options::custom(
              "--layers", "model.layers", [](C& c, const std::string& v) { c.layers = parse_layers(v); }, "LIST",
              "Layer sizes, inputs to outputs (default 256,1024,1024,1)", layers_text,
              [](const C& c) { return fmt::format("{}", fmt::join(c.layers, ",")); }),
          Options::custom(
              "--activation", "model.activation",
              [](C& c, const std::string& v) { c.activation = parse_activation(v); }, "ACT",
              "gelu or relu (default gelu)", {}, [](const C& c) { return std::string(activation_name(c.activation)); }),
          Options::custom(
              "--loss", "model.loss", [](C& c, const std::string& v) { c.loss = parse_loss(v); }, "LOSS",
              "mse (regression) or cross_entropy (classes) (default mse)", {},
              [](const C& c) { return std::string(loss_name(c.loss)); }),
          Options::text("--data", "data.source", &C::data, "FILE",
                        "synthetic, or a .csv, .npy or .safetensors file (default synthetic)"),
          Options::whole("--rows", "data.rows", &C::rows, "N", "Rows of synthetic data (default 100000)"),
          Options::whole("", "data.factors", &C::factors, "N", "Latent factors of synthetic data (default 8)"),
          Options::number("", "data.noise", &C::noise, "X", "Noise scale of synthetic data (default 0.5)"),
          Options::number("", "data.eval_fraction", &C::eval_fraction, "X",
                          "The tail of the rows held out for evaluation (default 0.05)"),
          Options::whole("--seed", "train.seed", &C::seed, "N", "Seed of weights, data and shuffling (default 0)"),
          Options::number("--lr", "train.lr", &C::lr, "X", "Peak learning rate of AdamW (default 0.001)"),
          Options::number("", "train.min_lr", &C::min_lr, "X", "Where the cosine decay ends (default 0)"),
          Options::number("--weight-decay", "train.weight_decay", &C::weight_decay, "X",
                          "AdamW weight decay (default 0.01)"),
          Options::number("", "train.beta1", &C::beta1, "X", "AdamW beta1 (default 0.9)"),
          Options::number("", "train.beta2", &C::beta2, "X", "AdamW beta2 (default 0.999)"),
          Options::number("", "train.eps", &C::eps, "X", "AdamW epsilon (default 1e-8)"),
          Options::whole("--warmup-steps", "train.warmup_steps", &C::warmup_steps, "N",
                         "Linear warm-up steps before the cosine decay (default 100)"),
          Options::number("--clip-grad-norm", "train.clip_grad_norm", &C::clip_grad_norm, "X",
                          "Clip the gradient's L2 norm to this (0: off; default 1)"),
          Options::whole("--eval-every", "train.eval_every", &C::eval_every, "N",
                         "Evaluate on the held-out rows every N steps (default: at the end)"),
          Options::whole("--log-every", "train.log_every", &C::log_every, "N",
                         "Report a step record every N steps (default 10)"),
          Options::number("--target-loss", "train.target_loss", &C::target_loss, "X",
                          "Report the time until the evaluation loss first reaches this"),
          Options::text("--device", "train.device", &C::device, "DEV", "cpu or cuda (default cpu)"),
          Options::whole(
              "--threads", "train.threads",
              [](C& c, std::int64_t v) { c.threads = static_cast<int>(std::min<std::int64_t>(v, 4096)); }, "N",
              "CPU threads for the matrix products (default: the usable cores shared among this node's ranks)", {},
              [](const C& c) { return std::int64_t{c.threads}; }),
          Options::number("--bucket-mb", "train.bucket_mb", &C::bucket_mb, "MB",
                          "Gradient all-reduce bucket size in MiB (default 1)"),
          Options::text("--strategy", "train.strategy", &C::strategy, "NAME",
                        "How the ranks split the work: dp (data parallel), zero1, zero2, zero3, tp (tensor "
                        "parallel), pp (pipeline parallel) or 3d (tensor x pipeline x data; default dp)"),
          Options::whole("--tensor-parallel", "train.tensor_parallel", &C::tensor_parallel, "N",
                         "Ranks of a tensor-parallel group (tp, 3d; default: every rank for tp, 1 for 3d)",
                         {0, 1 << 16}),
          Options::whole("--pipeline-parallel", "train.pipeline_parallel", &C::pipeline_parallel, "N",
                         "Pipeline stages (pp, 3d; default: every rank for pp, 1 for 3d)", {0, 1 << 16}),
          Options::whole("--micro-batches", "train.micro_batches", &C::micro_batches, "N",
                         "Micro-batches a step through the pipeline (default: 4 a stage)", {0, 1 << 20}),
          Options::choice("--schedule", "train.schedule", &C::schedule, "NAME",
                          "The pipeline's schedule: 1f1b or gpipe (default 1f1b)", {"1f1b", "gpipe"}),
          Options::whole("--ckpt-every", "checkpoint.every", &C::ckpt_every, "N",
                         "Checkpoint every N steps and at the end (default 0: never)"),
          Options::text("--ckpt-dir", "checkpoint.dir", &C::ckpt_dir, "D",
                        "Checkpoint folder (default $RKIT_CKPT_DIR)"),
          Options::boolean("", "checkpoint.pack", &C::pack,
                           "rckpt pack each checkpoint in the background (default true)"),
          Options::boolean("--no-pack", "", &C::pack, "Keep checkpoints as step-N/ folders: do not rckpt pack them",
                           /*when_given=*/false),
          Options::text("--resume-from", "", &C::resume_from, "PATH",
                        "Resume from this step-N/ folder or .rkpt (default: the newest in the checkpoint folder, else "
                        "$RKIT_RESUME_FROM)"),
          Options::text("--init-from", "", &C::init_from, "PATH",
                        "Fine-tune: start from this checkpoint's weights with a fresh optimizer, at step 0"),
          Options::text("--output", "", &C::output, "FILE", "Write the final weights here (safetensors)"),
          Options::text("--events", "", &C::events, "FILE",
                        "Also write every rkit.train.event.v1 record here (- for stdout)"),
          Options::text("--trace", "", &C::trace, "DIR",
                        "Write each rank's timeline here (Chrome trace format, gzip; rtrain trace merge joins them)"),
      });
  return kOptions;
}

kernels::Activation parse_activation(const std::string& name) {
  if (name == "gelu") return kernels::Activation::Gelu;
  if (name == "relu") return kernels::Activation::Relu;
  throw Error(Exit::Usage, fmt::format("unknown activation '{}' (expected gelu or relu)", name));
}

const char* activation_name(kernels::Activation a) { return a == kernels::Activation::Gelu ? "gelu" : "relu"; }
const char* loss_name(Loss l) { return l == Loss::Mse ? "mse" : "cross_entropy"; }

Loss parse_loss(const std::string& name) {
  if (name == "mse") return Loss::Mse;
  if (name == "cross_entropy") return Loss::CrossEntropy;
  throw Error(Exit::Usage, fmt::format("unknown loss '{}' (expected mse or cross_entropy)", name));
}

std::vector<std::size_t> parse_layers(const std::string& text) {
  std::vector<std::size_t> sizes;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    const std::string_view part = std::string_view(text).substr(start, end - start);
    std::size_t v = 0;
    const auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || ec != std::errc() || ptr != part.data() + part.size() || v < 1 || v > (1u << 20))
      throw Error(Exit::Usage, fmt::format("layers '{}': each size must be a whole number from 1 to 1048576", text));
    sizes.push_back(v);
    start = end + 1;
  }
  if (sizes.size() < 2)
    throw Error(Exit::Usage, fmt::format("layers '{}': need inputs and outputs, at least 2 sizes", text));
  return sizes;
}

TrainConfig load_train_config(const std::string& path) {
  Config cfg = load_config(path);  // path is explicit: a missing file is NoInput
  TrainConfig c;
  run_options().apply_file(cfg, c);
  if (c.epochs > 0 && !cfg.table.at_path("train.steps")) c.steps = 0;  // epochs alone: the file means epochs
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(Exit::Config, fmt::format("{}: {}", path, e.what()));
  }
  return c;
}

TrainConfig resolve_run_config(const std::string& path, const OptionFlags& flags) {
  TrainConfig c = path.empty() ? TrainConfig{} : load_train_config(path);
  run_options().apply_flags(flags, c);
  if (flags.given("--epochs") && !flags.given("--steps")) c.steps = 0;  // --epochs alone: the run means epochs
  if (c.ckpt_dir.empty()) {
    if (const char* d = std::getenv("RKIT_CKPT_DIR"); d && *d) c.ckpt_dir = d;
  }
  c.min_lr = std::min(c.min_lr, c.lr);
  c.validate();
  return c;
}

void TrainConfig::validate() const {
  auto bad = [](const std::string& what) { throw Error(Exit::Usage, what); };
  if (layers.size() < 2) bad("layers: need inputs and outputs, at least 2 sizes");
  if (loss == Loss::CrossEntropy && outputs() < 2) bad("cross_entropy needs 2 or more outputs (classes)");
  if (batch_size < 1 || batch_size > (1u << 20)) bad("batch size must be 1 to 1048576");
  if (steps == 0 && epochs == 0) bad("give steps or epochs (both are 0)");
  if (!(lr > 0) || !std::isfinite(lr)) bad("lr must be > 0");
  if (!(min_lr >= 0) || min_lr > lr) bad("min_lr must be 0 to lr");
  if (!(weight_decay >= 0) || !std::isfinite(weight_decay)) bad("weight_decay must be 0 or more");
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1)) bad("beta1 and beta2 must be in [0, 1)");
  if (!(eps > 0)) bad("eps must be > 0");
  if (!(clip_grad_norm >= 0) || !std::isfinite(clip_grad_norm)) bad("clip_grad_norm must be 0 (off) or more");
  if (!(eval_fraction >= 0 && eval_fraction < 1)) bad("eval_fraction must be in [0, 1)");
  if (!(noise >= 0) || !std::isfinite(noise)) bad("noise must be 0 or more");
  if (factors < 1 || factors > 4096) bad("factors must be 1 to 4096");
  if (!(bucket_mb > 0) || bucket_mb > 4096) bad("bucket_mb must be > 0 and at most 4096");
  if (threads < 0) bad("threads must be 0 (all) or more");
  if (log_every == 0) bad("log_every must be 1 or more");
  if (device != "cpu" && device != "cuda") bad(fmt::format("unknown device '{}' (expected cpu or cuda)", device));
  check_strategy(strategy);

  if (target_loss && !std::isfinite(*target_loss)) bad("target_loss must be a number");
}

std::string TrainConfig::fingerprint() const {
  return fmt::format("layers={} activation={} loss={}", fmt::join(layers, ","), activation_name(activation),
                     loss_name(loss));
}

}  // namespace rkit::rtrain
