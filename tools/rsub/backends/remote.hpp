// File: rsub/backends/remote.hpp
//
// The remote backends: the Slurm clusters and Kubernetes contexts rsub hands jobs to,
// each a [rsub.backends.NAME] table of the configuration (rsub(1), BACKENDS). rsub does
// not schedule their jobs: it translates the job spec (an sbatch script, an Indexed Job),
// submits it with the backend's own commands, and follows it. A kind supplies the
// primitives (RemoteBackend: slurm.cpp, kube_backend.cpp); what every remote backend does
// with them (store the job first, adopt a submission whose answer was lost, refresh the
// states in one query, rsub why) is written once, in remote.cpp.
//
//   std::unique_ptr<RemoteBackend> slurm = config.remote(std::nullopt);
//   std::vector<std::string> ids = slurm->submit(spec, deps, {12, "alice", store.tag()});  // {"1234"}
//   slurm->query({"1234"});  // one batched query for many jobs
//
// Refreshing: the states of a backend's active jobs are read in one query (sacct for
// Slurm, kubectl get for Kubernetes) at most every `refresh_s` seconds for all clients
// together (the last refresh time is kept in the store), never one query per job.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/backend.hpp"
#include "rkit/error.hpp"
#include "rkit/process.hpp"

namespace rkit::rsub {

// What a remote job waits for: (type, the backend's id of the job).
using RemoteDeps = std::vector<std::pair<DepType, std::string>>;

// Whose job a submission is: rsub's id of its first element, its user, and the store's
// tag (Store::tag), which makes the job's name or comment on the backend unique across
// every rsub store that uses it.
struct SubmitRef {
  std::int64_t id = 0;
  std::string user;
  std::string store_tag;
};

// A submission whose answer never came (a timeout): the backend may have the job. rsub
// keeps it, learns its id when the backend answers (RemoteBackend::adopt), or marks it LOST.
// `ids`: the backend's ids of the elements when they are known without an answer.
class SubmitUnconfirmed : public Error {
 public:
  SubmitUnconfirmed(std::string message, std::vector<std::string> ids = {})
      : Error(Exit::Unavailable, std::move(message)), ids(std::move(ids)) {}
  std::vector<std::string> ids;
};

// A backend that did not answer within the retry window (run_backend_command): exit 69,
// "<who>: cannot reach <peer> (...)". A kind decides from these fields, never from the
// message, whether a request may have reached the peer all the same (a submission then
// becomes SubmitUnconfirmed): `timed_out`, the last try ran past its time limit;
// `client_says`, the first line of what the backend's own client printed on its last try
// ("" when it timed out).
class BackendUnreachable : public Error {
 public:
  BackendUnreachable(std::string message, std::string hint, bool timed_out, std::string client_says)
      : Error(Exit::Unavailable, std::move(message), std::move(hint)),
        timed_out(timed_out),
        client_says(std::move(client_says)) {}
  bool timed_out;
  std::string client_says;
};

// What a kind of remote backend does; remote.cpp builds the commands' Backend on it.
class RemoteBackend {
 public:
  virtual ~RemoteBackend() = default;
  // The defaults a job gets there (Slurm: the client's working directory, on a
  // filesystem the nodes share; Kubernetes: none, the image's).
  virtual void prepare(JobSpec& spec, const std::string& client_cwd) const = 0;
  // What submit hands the backend: an sbatch script, a v1 List (JSON). Error(DataErr) for a job the
  // backend cannot take (a value an sbatch line cannot carry, no image, dependencies
  // on Kubernetes ...).
  virtual std::string render(const JobSpec& spec, const RemoteDeps& deps, const SubmitRef& ref) = 0;
  // Submits; returns the backend's id of each element (one, or one per array index).
  // A backend that refuses the connection is retried for submit_retry_s, then
  // Error(Unavailable): nothing was submitted. One that does not answer:
  // SubmitUnconfirmed. A job the backend refuses: Error(DataErr) with its message.
  virtual std::vector<std::string> submit(const JobSpec& spec, const RemoteDeps& deps, const SubmitRef& ref) = 0;
  // The jobs of this store (`store_tag`) and user that the backend has: rsub id → the
  // backend's id of the job (an array's id), for submissions whose answer was lost.
  virtual std::map<std::int64_t, std::string> adopt(const std::string& store_tag, const std::string& user) = 0;
  // The states of these jobs, in one query (Slurm: two); a job Slurm no longer knows is
  // left out, one Kubernetes no longer lists is LOST (deleted behind rsub's back).
  // Error(Unavailable) when the backend cannot be reached.
  virtual std::vector<Store::RemoteState> query(const std::vector<std::string>& ids) = 0;
  // True when the backend forgets the jobs as they end (Kubernetes deletes them): rsub
  // then records the cancellation itself.
  virtual bool control(const std::vector<std::string>& ids, Control action) = 0;
  // Seconds until the job would start, as the backend estimates it now; nullopt when it
  // cannot say. Error(Unavailable) when it cannot be reached.
  virtual std::optional<double> expected_wait(const JobSpec& spec) = 0;
  // Why a pending job waits, as the backend says it now (lines for rsub why), and its
  // reason code ("Resources"). Error(Unavailable) when it cannot be reached.
  virtual std::vector<std::string> explain(const JobRecord& job, std::string& reason) = 0;
  // One line for rsub status: what it is ("Slurm 22.05.8, ..."). Error(Unavailable) when
  // it cannot be reached.
  virtual std::string describe() = 0;
  // The file a task's output goes to.
  virtual std::string log_path(const JobRecord& job, int task, bool err) const = 0;
};

// A remote backend's settings; its kind makes the primitives.
struct RemoteConfig : BackendConfig {
  std::map<std::string, std::string> tenant_map;  // tenant → Slurm account, or → Kueue LocalQueue
  virtual std::unique_ptr<RemoteBackend> remote(std::optional<std::uint32_t> run_as_uid) const = 0;
  std::unique_ptr<Backend> open(std::optional<std::uint32_t> run_as_uid) const final;  // remote.cpp
};

// [rsub.backends.NAME] with kind = "slurm".
struct SlurmConfig final : RemoteConfig {
  std::string slurm_conf;      // SLURM_CONF for its commands ("" → Slurm's default)
  std::string bin_dir;         // where sbatch, squeue ... are ("" → PATH)
  std::string partition, qos;  // defaults for its jobs
  std::unique_ptr<RemoteBackend> remote(std::optional<std::uint32_t> run_as_uid) const override;
};

// How the backends run their commands (sbatch, kubectl ...): captured, with a timeout.
// While a call fails as `unreachable` says (the service is down or busy), it is retried
// with doubling pauses for `retry_s` seconds, then BackendUnreachable "<who>: cannot
// reach <peer> (...)"; a program that cannot start is Error(Unavailable) (nothing was sent).
struct BackendCall {
  std::string who;   // "slurm backend \"dc1\""
  std::string peer;  // "Slurm", "the API server"
  std::function<bool(const std::string& err)> unreachable;
  std::optional<std::uint32_t> run_as_uid;  // BackendConfig::open
};
RunResult run_backend_command(const BackendCall& how, std::vector<std::string> argv,
                              const std::vector<std::pair<std::string, std::string>>& env, const std::string& input,
                              double retry_s);
// Whether a backend client's message holds one of `phrases`: how a kind reads its
// client's words (slurm.cpp's SlurmSays, kube_backend.cpp's KubectlSays), the only text
// rsub matches.
bool mentions_any(std::string_view text, const std::vector<std::string_view>& phrases);
// Error(DataErr) "<who>: <what> failed: <first line of its message>": the backend refused.
[[noreturn]] void backend_refused(const BackendCall& how, const std::string& what, const RunResult& r);

// Slurm's names, mapped to rsub's states ("PENDING", "RUNNING", "COMPLETED", "FAILED",
// "OUT_OF_MEMORY", "CANCELLED by 0", "NODE_FAIL" ...). NODE_FAIL is LOST, as a vanished
// local supervisor is.
JobState slurm_state(std::string_view name);

// Parses `sacct -X -D -n -P -o JobID,State,ExitCode,Start,End,NodeList,Reason` output for
// the wanted ids ("1234", "1234_5"): the last line of each id is its state, the number of
// its lines its attempts; an array's pending line ("1234_[5-9%2]") stands for the
// elements that have no line of their own.
std::vector<Store::RemoteState> parse_sacct(std::string_view text, const std::vector<std::string>& wanted);

// The same from `scontrol -o show job` (a Slurm without accounting: slurmctld's memory).
std::vector<Store::RemoteState> parse_scontrol_jobs(std::string_view text, const std::vector<std::string>& wanted);

// The sbatch script of a job (exposed for tests); `comment` tags it ("rsub:TAG:ID").
// Error(DataErr) for a value an #SBATCH line cannot carry.
std::string slurm_script(const JobSpec& spec, const RemoteDeps& deps, const SlurmConfig& config,
                         const std::string& comment = {});

}  // namespace rkit::rsub
