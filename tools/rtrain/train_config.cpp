// rtrain run's configuration: TOML over the defaults (see train_config.hpp).
#include "train_config.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <map>
#include <set>

#include "rkit/config.hpp"
#include "rkit/error.hpp"
#include "rkit/file.hpp"

namespace rkit::rtrain {
namespace {

// Every key a run configuration may hold, by table.
const std::map<std::string, std::set<std::string>> kKeys = {
    {"model", {"layers", "activation", "loss"}},
    {"data", {"source", "rows", "factors", "noise", "eval_fraction"}},
    {"train",
     {"batch_size", "steps", "epochs", "lr", "min_lr", "weight_decay", "beta1", "beta2", "eps", "warmup_steps",
      "clip_grad_norm", "eval_every", "log_every", "seed", "target_loss", "device", "threads", "bucket_mb"}},
    {"checkpoint", {"every", "dir", "pack"}},
};

void check_keys(const Config& cfg) {
  for (const auto& [table, node] : cfg.table) {
    const std::string name(table.str());
    const auto known = kKeys.find(name);
    if (known == kKeys.end() || !node.is_table())
      throw Error(Exit::Config,
                  fmt::format("{}: unknown table '{}' (expected [model], [data], [train] or [checkpoint])",
                              cfg.where(name), name));
    for (const auto& [key, _] : *node.as_table())
      if (!known->second.count(std::string(key.str())))
        throw Error(Exit::Config, fmt::format("{}:{}:{}: unknown key '{}.{}'", cfg.path, key.source().begin.line,
                                              key.source().begin.column, name, key.str()));
  }
}

// A non-negative integer at `key`, when present.
std::optional<std::uint64_t> count_at(const Config& cfg, const std::string& key) {
  auto v = cfg.get_number(key);
  if (!v) return std::nullopt;
  if (*v < 0 || *v != std::floor(*v) || *v > 9e15)
    throw Error(Exit::Config, fmt::format("{}: '{}' must be a whole number, 0 or more", cfg.where(key), key));
  return static_cast<std::uint64_t>(*v);
}

template <typename F>
auto meaning(const Config& cfg, const std::string& key, F&& parse) {
  try {
    return parse();
  } catch (const Error& e) {
    throw Error(Exit::Config, fmt::format("{}: {}", cfg.where(key), e.what()));
  }
}

}  // namespace

kernels::Activation parse_activation(const std::string& name) {
  if (name == "gelu") return kernels::Activation::Gelu;
  if (name == "relu") return kernels::Activation::Relu;
  throw Error(Exit::Usage, fmt::format("unknown activation '{}' (expected gelu or relu)", name));
}

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
  check_keys(cfg);
  TrainConfig c;
  if (auto node = cfg.table.at_path("model.layers")) {
    const toml::array* arr = node.as_array();
    std::string text;
    if (!arr)
      throw Error(Exit::Config, fmt::format("{}: 'model.layers' must be an array of sizes", cfg.where("model.layers")));
    for (const auto& v : *arr) {
      auto n = v.value_exact<std::int64_t>();
      text += (text.empty() ? "" : ",") + (n ? std::to_string(*n) : std::string("?"));
    }
    c.layers = meaning(cfg, "model.layers", [&] { return parse_layers(text); });
  }
  if (auto v = cfg.get_string("model.activation"))
    c.activation = meaning(cfg, "model.activation", [&] { return parse_activation(*v); });
  if (auto v = cfg.get_string("model.loss")) c.loss = meaning(cfg, "model.loss", [&] { return parse_loss(*v); });
  if (auto v = cfg.get_string("data.source")) c.data = *v;
  if (auto v = count_at(cfg, "data.rows")) c.rows = *v;
  if (auto v = count_at(cfg, "data.factors")) c.factors = *v;
  if (auto v = cfg.get_number("data.noise")) c.noise = *v;
  if (auto v = cfg.get_number("data.eval_fraction")) c.eval_fraction = *v;
  if (auto v = count_at(cfg, "train.batch_size")) c.batch_size = *v;
  if (auto v = count_at(cfg, "train.steps")) c.steps = *v;
  if (auto v = count_at(cfg, "train.epochs")) c.epochs = *v;
  if (c.epochs > 0 && !cfg.table.at_path("train.steps")) c.steps = 0;  // epochs alone: the file means epochs
  for (auto [key, field] : {std::pair{"train.lr", &c.lr},
                            {"train.min_lr", &c.min_lr},
                            {"train.weight_decay", &c.weight_decay},
                            {"train.beta1", &c.beta1},
                            {"train.beta2", &c.beta2},
                            {"train.eps", &c.eps},
                            {"train.clip_grad_norm", &c.clip_grad_norm},
                            {"train.bucket_mb", &c.bucket_mb}})
    if (auto v = cfg.get_number(key)) *field = *v;
  if (auto v = count_at(cfg, "train.warmup_steps")) c.warmup_steps = *v;
  if (auto v = count_at(cfg, "train.eval_every")) c.eval_every = *v;
  if (auto v = count_at(cfg, "train.log_every")) c.log_every = *v;
  if (auto v = count_at(cfg, "train.seed")) c.seed = *v;
  if (auto v = cfg.get_number("train.target_loss")) c.target_loss = *v;
  if (auto v = cfg.get_string("train.device")) c.device = *v;
  if (auto v = count_at(cfg, "train.threads")) c.threads = static_cast<int>(std::min<std::uint64_t>(*v, 4096));
  if (auto v = count_at(cfg, "checkpoint.every")) c.ckpt_every = *v;
  if (auto v = cfg.get_string("checkpoint.dir")) c.ckpt_dir = *v;
  if (auto v = cfg.get_bool("checkpoint.pack")) c.pack = *v;
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(Exit::Config, fmt::format("{}: {}", path, e.what()));
  }
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
  if (target_loss && !std::isfinite(*target_loss)) bad("target_loss must be a number");
}

std::string TrainConfig::fingerprint() const {
  std::string l;
  for (std::size_t s : layers) l += (l.empty() ? "" : ",") + std::to_string(s);
  return fmt::format("layers={} activation={} loss={}", l, activation == kernels::Activation::Gelu ? "gelu" : "relu",
                     loss == Loss::Mse ? "mse" : "cross_entropy");
}

}  // namespace rkit::rtrain
