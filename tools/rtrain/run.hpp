// File: rtrain/run.hpp
//
// rtrain run: trains the configured MLP, data parallel across the ranks `rtrain launch`
// (or any torchrun-style launcher) starts, with the gradient all-reduce overlapped with
// the backward pass, checkpoints written and packed in the background, and resumption
// from the newest complete checkpoint. Rank 0 reports.
//
//   TrainConfig c = load_train_config("run.toml");
//   Json summary = run_training(c, nullptr, [](const Json& rec) { printer.print(rec); });
//
// Records are rkit.train.event.v1 (rkit(7)): "step" every log_every steps and at the
// end, "eval", "checkpoint", "resume" or "init" (a fine-tune's start) with the parent
// checkpoint, and one "summary" (with the final weights' digest, weights_xxh3). Errors: Usage for a configuration the
// data does not fit, DataErr for bad data or checkpoints, Unavailable for a device or
// peer that cannot be had, IoErr for a failed checkpoint.
#pragma once

#include <functional>

#include "rkit/jsonl.hpp"
#include "train_config.hpp"

namespace rkit::rtrain {

// Runs the whole training; `emit` receives each record (event and time_unix_s first) on
// rank 0, never on the others. Each checkpoint archive carries `provenance` (the run
// store's, RunTracker::provenance(); null: none) with its step and the run's parent.
// Returns the summary record on rank 0, null elsewhere.
Json run_training(const TrainConfig& config, const Json& provenance, const std::function<void(const Json&)>& emit);

// The learning rate at optimizer step `step` (from 0) of `total`: linear warm-up from
// lr/warmup to lr over warmup_steps, then a cosine from lr down to min_lr at `total`.
double learning_rate(const TrainConfig& c, std::uint64_t step, std::uint64_t total);

// Layers grouped into all-reduce buckets, in backward order (the last layer first): a
// bucket closes once it holds at least `bucket_bytes`. Returns, per bucket, its layers.
std::vector<std::vector<std::size_t>> make_buckets(const std::vector<std::size_t>& layer_bytes, double bucket_bytes);

}  // namespace rkit::rtrain
