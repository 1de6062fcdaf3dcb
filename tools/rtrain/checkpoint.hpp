// File: rtrain/checkpoint.hpp
//
// rtrain run's checkpoints. Each is a folder step-N/ in the checkpoint directory with
// two safetensors files: model.safetensors (the weights, "layers.L.weight" [out, in]
// and "layers.L.bias", as PyTorch names an nn.Linear's) and optimizer.safetensors
// (AdamW's "exp_avg.<name>" and "exp_avg_sq.<name>", "step": I64 optimizer steps done,
// "rng": U64 [seed, step], the whole state of rtrain's counter-based generators). The
// folder is written as .step-N.tmp-PID and renamed: it is complete or absent. Then,
// unless told not to, `rckpt pack step-N -o step-N.rkpt` makes the archive rtrain
// launch resumes from, and the folder is removed once the archive is whole.
//
// Saving stalls training only for the copy of the state off the device (and when the
// previous checkpoint is still being written): the files are written and packed by a
// background thread.
//
//   Checkpointer ck(dir, layout, true);
//   TrainState s = ck.take_buffer();              // fill it from the device, then
//   double stall_s = ck.save(std::move(s));       // returns at once
//   for (const CheckpointDone& d : ck.take_done()) report(d);
//   ck.finish();                                  // at the end: waits, rethrows its error
//   std::optional<TrainState> s = load_checkpoint(newest_checkpoint_in(dir), layout);
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "model.hpp"
#include "rkit/jsonl.hpp"

namespace rkit::rtrain {

// Training state on the host.
struct TrainState {
  std::vector<float> params, exp_avg, exp_avg_sq;
  std::int64_t step = 0;  // optimizer steps done
  std::uint64_t seed = 0;
  std::string fingerprint;  // TrainConfig::fingerprint(): must match to resume
};

// What one background checkpoint cost: the numbers behind the stall ratio.
struct CheckpointDone {
  std::int64_t step = 0;
  std::string path;          // the archive (packed) or the folder
  std::uint64_t bytes = 0;   // safetensors bytes written
  double write_s = 0;        // writing the folder
  double pack_s = 0;         // rckpt pack (0 when not packing)
  std::string archive_xxh3;  // the archive's digest ("" when not packing)
};

class Checkpointer {
 public:
  // Creates `dir` if needed and removes what killed runs left there (temporary folders
  // of processes that are gone). Allocates and touches the buffers of one state of
  // `parameters` floats now, so that no checkpoint pays for fresh memory. Each archive
  // carries `provenance` (an object, with "step" added; null: none) in its manifest.
  Checkpointer(std::string dir, std::vector<Mlp::Tensor> layout, bool pack, std::size_t parameters,
               Json provenance = nullptr);
  ~Checkpointer();  // waits for the checkpoint in progress; errors are dropped (call finish())
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // A state to fill for the next save(), once the checkpoint in progress is done, its
  // buffers allocated and touched (the copy into them is then the whole stall): the one
  // the last checkpoint was written from, or the one made up front. Rethrows an error
  // of an earlier checkpoint.
  TrainState take_buffer();
  // Hands `state` to the background thread, first waiting for the previous checkpoint.
  // Returns the seconds it blocked. Rethrows an error of an earlier checkpoint.
  double save(TrainState&& state);
  // Waits for the checkpoint in progress; rethrows its error.
  void finish();
  // The checkpoints completed since the last call, oldest first (for the caller's
  // thread to report: the background thread reports nothing itself).
  std::vector<CheckpointDone> take_done();

 private:
  void worker();
  void write(const TrainState& s);
  std::string dir_;
  std::vector<Mlp::Tensor> layout_;
  bool pack_;
  Json provenance_;
  std::vector<CheckpointDone> done_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<TrainState> pending_, spare_;
  bool busy_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

// The newest complete checkpoint of `dir`: the highest N among step-N.rkpt archives
// that open whole and step-N/ folders whose two files have whole headers (an archive
// wins a tie); "" when there is none or `dir` does not exist.
std::string newest_checkpoint_in(const std::string& dir);

// Reads a checkpoint, a step-N/ folder or an .rkpt archive (unpacked into memory via a
// temporary folder beside it). Error(DataErr) when it is damaged or was made by another
// model (fingerprint or a tensor's shape differs), Error(NoInput) when missing.
TrainState load_checkpoint(const std::string& path, const std::vector<Mlp::Tensor>& layout,
                           const std::string& fingerprint, std::size_t parameters);

}  // namespace rkit::rtrain
