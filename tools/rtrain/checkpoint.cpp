// rtrain run's checkpoints: written and packed in the background (see checkpoint.hpp).
#include "checkpoint.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>

#include "rkit/ckpt/archive.hpp"
#include "rkit/ckpt/extract.hpp"
#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/process.hpp"
#include "rkit/safetensors.hpp"

namespace rkit::rtrain {
namespace fs = std::filesystem;
namespace st = safetensors;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::span<const std::byte> bytes_of(const float* p, std::size_t n) {
  return std::as_bytes(std::span<const float>(p, n));
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw system_error("open " + dir, errno);
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  if (rc != 0) throw system_error("fsync " + dir, e);
}

// "step-N" (folder) or "step-N.rkpt": N; nullopt for any other name.
std::optional<std::int64_t> step_of(const std::string& name, bool archive) {
  std::string_view s = name;
  if (archive) {
    if (!s.ends_with(".rkpt")) return std::nullopt;
    s.remove_suffix(5);
  }
  if (!s.starts_with("step-") || s.size() == 5 || s.size() > 23) return std::nullopt;
  std::int64_t n = 0;
  for (char c : s.substr(5)) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  return n;
}

// The named tensors of a safetensors file, read whole.
struct LoadedFile {
  st::Header header;
  std::map<std::string, std::vector<std::byte>> data;
};

LoadedFile read_safetensors(const std::string& path) {
  LoadedFile f;
  f.header = st::read_header(path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw system_error("open " + path, errno);
  try {
    for (const st::TensorInfo& t : f.header.tensors) {
      std::vector<std::byte> buf(t.bytes);
      if (pread_full(fd, buf.data(), buf.size(), t.offset, path) != buf.size())
        throw Error(Exit::DataErr, path + ": truncated");
      f.data.emplace(t.name, std::move(buf));
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return f;
}

// Copies tensor `name` (F32, `count` elements) of `f` to `out`.
void take_f32(const LoadedFile& f, const std::string& file, const std::string& name, std::size_t count, float* out) {
  auto it = f.data.find(name);
  const st::TensorInfo* info = nullptr;
  for (const auto& t : f.header.tensors)
    if (t.name == name) info = &t;
  if (it == f.data.end() || !info) throw Error(Exit::DataErr, fmt::format("{}: no tensor '{}'", file, name));
  if (info->dtype != st::Dtype::F32 || it->second.size() != count * sizeof(float))
    throw Error(Exit::DataErr, fmt::format("{}: tensor '{}' is not F32 of {} elements: another model's checkpoint",
                                           file, name, count));
  std::memcpy(out, it->second.data(), it->second.size());
}

// A step folder whose two files both have whole safetensors headers and sizes.
bool folder_complete(const fs::path& dir) {
  try {
    st::read_header((dir / "model.safetensors").string());
    st::read_header((dir / "optimizer.safetensors").string());
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Removes .step-N.tmp-PID, .step-N.del-PID and .restore-NAME-PID entries of `dir` whose
// process is gone: what a killed run left behind.
void remove_abandoned(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const std::size_t dash = name.find_last_of('-');
    const std::string_view head = std::string_view(name).substr(0, dash);
    if (!(name.starts_with(".step-") && (head.ends_with(".tmp") || head.ends_with(".del"))) &&
        !name.starts_with(".restore-"))
      continue;  // (rckpt's own temporary files, .NAME.tmp.XXXXXX, are its business)
    const std::string_view pid = std::string_view(name).substr(dash + 1);
    if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string_view::npos) continue;
    if (::kill(std::stoi(std::string(pid)), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to tell
    fs::remove_all(entry.path(), ec);
  }
}

}  // namespace

Checkpointer::Checkpointer(std::string dir, std::vector<Mlp::Tensor> layout, bool pack, std::size_t parameters,
                           Json provenance)
    : dir_(std::move(dir)), layout_(std::move(layout)), pack_(pack), provenance_(std::move(provenance)) {
  spare_.emplace();
  for (std::vector<float>* v : {&spare_->params, &spare_->exp_avg, &spare_->exp_avg_sq}) v->assign(parameters, 0.0f);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw Error(Exit::IoErr, fmt::format("checkpoint directory {}: {}", dir_, ec.message()));
  remove_abandoned(dir_);
  thread_ = std::thread([this] { worker(); });
}

Checkpointer::~Checkpointer() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<CheckpointDone> Checkpointer::take_done() {
  std::lock_guard lock(mu_);
  return std::exchange(done_, {});
}

TrainState Checkpointer::take_buffer() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !busy_ || error_; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  TrainState s = spare_ ? std::move(*spare_) : TrainState{};
  spare_.reset();
  return s;
}

double Checkpointer::save(TrainState&& state) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !busy_ || error_; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  pending_ = std::move(state);
  busy_ = true;
  cv_.notify_all();
  return seconds_since(t0);
}

void Checkpointer::finish() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !busy_; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void Checkpointer::worker() {
  for (;;) {
    TrainState s;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return pending_ || stop_; });
      if (!pending_) return;  // stop, nothing left to write
      s = std::move(*pending_);
      pending_.reset();
    }
    std::exception_ptr err;
    try {
      write(s);
    } catch (...) {
      err = std::current_exception();
    }
    {
      std::lock_guard lock(mu_);
      busy_ = false;
      if (err) error_ = err;
      spare_ = std::move(s);  // its buffers serve the next checkpoint
    }
    cv_.notify_all();
  }
}

void Checkpointer::write(const TrainState& s) {
  CheckpointDone done;
  done.step = s.step;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string name = fmt::format("step-{}", s.step);
  const std::string final_dir = dir_ + "/" + name;
  const std::string tmp = fmt::format("{}/.{}.tmp-{}", dir_, name, ::getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec) || ec)
    throw Error(Exit::IoErr, fmt::format("checkpoint {}: {}", tmp, ec ? ec.message() : "exists"));

  st::Writer model, optim;
  model.set_metadata("format", "pt");
  model.set_metadata("rkit.model", s.fingerprint);
  optim.set_metadata("rkit.model", s.fingerprint);
  for (const Mlp::Tensor& t : layout_) {
    model.add(t.name, st::Dtype::F32, t.shape, bytes_of(s.params.data() + t.offset, t.count));
    optim.add("exp_avg." + t.name, st::Dtype::F32, t.shape, bytes_of(s.exp_avg.data() + t.offset, t.count));
    optim.add("exp_avg_sq." + t.name, st::Dtype::F32, t.shape, bytes_of(s.exp_avg_sq.data() + t.offset, t.count));
  }
  const std::int64_t step = s.step;
  const std::uint64_t rng[2] = {s.seed, static_cast<std::uint64_t>(s.step)};
  optim.add("step", st::Dtype::I64, {}, std::as_bytes(std::span(&step, 1)));
  optim.add("rng", st::Dtype::U64, {2}, std::as_bytes(std::span(rng)));
  model.write(tmp + "/model.safetensors");
  optim.write(tmp + "/optimizer.safetensors");
  done.bytes = model.file_bytes() + optim.file_bytes();
  fs::remove_all(final_dir, ec);  // a folder of this step from an earlier attempt: replaced whole
  fs::rename(tmp, final_dir, ec);
  if (ec) throw Error(Exit::IoErr, fmt::format("checkpoint {}: {}", final_dir, ec.message()));
  fsync_dir(dir_);
  done.write_s = seconds_since(t0);
  done.path = final_dir;

  if (pack_) {
    const auto t1 = std::chrono::steady_clock::now();
    const std::string archive = final_dir + ".rkpt";
    SpawnOptions o;
    o.argv = {rkit_program("rckpt"), "pack", final_dir, "-o", archive, "--threads", "1", "--quiet"};
    // The provenance goes to rckpt on its standard input: no file in a folder others may write.
    std::string provenance;
    if (!provenance_.is_null()) {
      Json p = provenance_;
      p["step"] = s.step;
      provenance = p.dump();
      o.argv.insert(o.argv.end(), {"--provenance", "-"});
      o.in = Redirect::pipe();
    }
    o.out = Redirect::null();
    o.err = Redirect::pipe();
    o.new_process_group = false;  // stopped with this worker's group
    RunResult r = run(o, std::nullopt, 5.0, provenance);
    if (!r.status.success())
      throw Error(Exit::IoErr, fmt::format("rckpt pack {}: {}: {}", final_dir, r.status.describe(),
                                           r.err.substr(0, r.err.find('\n'))));
    // The archive is the checkpoint now. The folder is renamed away first: a kill during
    // the removal must not leave a partial step-N/ that looks like a checkpoint.
    const std::string doomed = fmt::format("{}/.{}.del-{}", dir_, name, ::getpid());
    fs::rename(final_dir, doomed, ec);
    if (!ec) fs::remove_all(doomed, ec);
    done.pack_s = seconds_since(t1);
    done.path = archive;
    done.archive_xxh3 = rckpt::hash_hex(rckpt::Archive::open(archive).manifest().archive_xxh3);
  }
  std::lock_guard lock(mu_);
  done_.push_back(std::move(done));
}

std::string newest_checkpoint_in(const std::string& dir) {
  std::map<std::int64_t, std::string, std::greater<>> found;  // newest first; an archive wins a tie
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (auto n = step_of(name, true); n && entry.is_regular_file(ec) && rckpt::Archive::complete(entry.path()))
      found[*n] = entry.path().string();
  }
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (auto n = step_of(name, false); n && !found.count(*n) && entry.is_directory(ec) && folder_complete(entry.path()))
      found[*n] = entry.path().string();
  }
  return found.empty() ? std::string() : found.begin()->second;
}

TrainState load_checkpoint(const std::string& path, const std::vector<Mlp::Tensor>& layout,
                           const std::string& fingerprint, std::size_t parameters) {
  // An archive is unpacked into a folder beside it, removed however this ends.
  struct Unpacked {
    std::string dir;
    ~Unpacked() {
      std::error_code ec;
      if (!dir.empty()) fs::remove_all(dir, ec);
    }
  } unpacked;
  std::string dir = path;
  if (path.ends_with(".rkpt")) {
    unpacked.dir = fmt::format("{}/.restore-{}-{}", parent_dir(path), base_name(path), ::getpid());
    std::error_code ec;
    fs::remove_all(unpacked.dir, ec);
    rckpt::UnpackOptions o;
    o.archive = path;
    o.dir = unpacked.dir;
    rckpt::unpack_checkpoint(o);
    dir = unpacked.dir;
  } else if (!fs::is_directory(path)) {
    throw Error(Exit::NoInput, fmt::format("checkpoint {}: no such folder or .rkpt archive", path));
  }
  const LoadedFile model = read_safetensors(dir + "/model.safetensors");
  const LoadedFile optim = read_safetensors(dir + "/optimizer.safetensors");
  const auto meta = model.header.metadata.find("rkit.model");
  if (meta == model.header.metadata.end() || meta->second != fingerprint)
    throw Error(Exit::DataErr,
                fmt::format("checkpoint {} is of another model ({}), not {}", path,
                            meta == model.header.metadata.end() ? "unknown" : meta->second, fingerprint));
  TrainState s;
  s.params.resize(parameters);
  s.exp_avg.resize(parameters);
  s.exp_avg_sq.resize(parameters);
  for (const Mlp::Tensor& t : layout) {
    take_f32(model, path, t.name, t.count, s.params.data() + t.offset);
    take_f32(optim, path, "exp_avg." + t.name, t.count, s.exp_avg.data() + t.offset);
    take_f32(optim, path, "exp_avg_sq." + t.name, t.count, s.exp_avg_sq.data() + t.offset);
  }
  auto step = optim.data.find("step");
  auto rng = optim.data.find("rng");
  if (step == optim.data.end() || step->second.size() != 8 || rng == optim.data.end() || rng->second.size() != 16)
    throw Error(Exit::DataErr, fmt::format("checkpoint {}: no step or rng state", path));
  std::memcpy(&s.step, step->second.data(), 8);
  std::uint64_t r[2];
  std::memcpy(r, rng->second.data(), 16);
  s.seed = r[0];
  s.fingerprint = fingerprint;
  if (s.step < 0) throw Error(Exit::DataErr, fmt::format("checkpoint {}: negative step", path));
  return s;
}

}  // namespace rkit::rtrain
