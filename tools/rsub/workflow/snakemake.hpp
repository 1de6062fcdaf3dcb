// File: rsub/workflow/snakemake.hpp
//
// rsub as Snakemake's cluster (its generic cluster interface, Snakemake 7): the four
// commands that rkit's Snakemake profile (snakemake/rkit/config.yaml) names.
//
//   submit JOBSCRIPT   reads the job's properties from Snakemake's job script (its
//                      "# properties = {...}" line) and submits it as an rsub job: threads
//                      are cores, mem_mb memory, gpus GPUs, runtime (minutes) the time
//                      limit; tenant, project, backend, partition, gpu_type pass through.
//                      Prints the job id alone on its first line.
//   status ID          prints exactly one of running, success, failed and exits 0 (a
//                      non-zero exit ends the whole workflow): "running" whenever it cannot
//                      tell (the daemon restarting, say), "failed" for a job rsub does not
//                      have. With the sidecar, the answer is the sidecar's.
//   cancel ID...       cancels the jobs (Snakemake's Ctrl-C), as one request.
//   sidecar            runs beside snakemake for the whole workflow: prints one line (the
//                      variables Snakemake hands the other three as
//                      SNAKEMAKE_CLUSTER_SIDECAR_VARS: its socket and the workflow's name),
//                      then answers status questions from one `ls --workflow` per polling
//                      round. Snakemake asks about each active job once a round, so a job
//                      asked about twice since the last query starts a new round, and the
//                      only time it queries again.
//
// `rsub workflow ARGS...` runs snakemake with this profile (snakemake_profile()), this
// rsub first on PATH, and CI=true unless set: Snakemake 7 then waits 1 s
// between polling rounds instead of 10, which the sidecar makes cheap.
//
// Every job carries its workflow and rule (rkit.job.v1's workflow and rule): the
// workflow is $RSUB_WORKFLOW, else the name of Snakemake's working directory.
#pragma once

#include <functional>
#include <iosfwd>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/spec.hpp"
#include "rkit/jsonl.hpp"

namespace rkit::rsub {

// One request to the daemon, its output captured.
struct Answer {
  int code = 0;
  std::string out, err;
};
using AskDaemon = std::function<Answer(Json request)>;

// The workflow's name when none is given: the directory's base name, made a valid name.
std::string default_workflow(const std::string& cwd);

// The job spec of a Snakemake job script (Error(DataErr) without a properties line or
// with resources that cannot be a job's, naming the resource). With `quick` (the path of
// the profile's rsub-smk-job.py), the script's `PYTHON -m snakemake ARGS` runs as
// `PYTHON QUICK ARGS`: the same Snakemake, started in a third of the time.
JobSpec spec_of_jobscript(std::string_view script, const std::string& workflow, const std::string& quick = {});

// rkit's Snakemake profile folder (holding config.yaml), or "" when none is found:
// $RSUB_SNAKEMAKE_PROFILE, else snakemake/rkit beside rsub, else ../share/rkit/snakemake/rkit.
std::string snakemake_profile();

// Snakemake's word for a job in state `state` (a state name of rkit.job.v1).
std::string_view snakemake_status_word(std::string_view state);

// What SNAKEMAKE_CLUSTER_SIDECAR_VARS carries.
struct SidecarVars {
  std::string socket, workflow;
};
std::optional<SidecarVars> sidecar_vars(const char* env_value);

int snakemake_submit(const std::string& jobscript, const AskDaemon& ask, std::ostream& out);
int snakemake_status(const std::string& id, const AskDaemon& ask, std::ostream& out);
int snakemake_cancel(const std::vector<std::string>& ids, const AskDaemon& ask);
int snakemake_sidecar(const AskDaemon& ask, std::ostream& out);
// Replaces this process with snakemake (Error(Unavailable) when it or the profile is missing).
[[noreturn]] void run_workflow(const std::vector<std::string>& args);

// The sidecar's rule, apart from its socket: answers one question about job `id`,
// querying (`query`: job id → state name) only when a new polling round begins.
class RoundCache {
 public:
  using Query = std::function<std::optional<std::map<std::string, std::string>>()>;
  explicit RoundCache(Query query) : query_(std::move(query)) {}
  std::string_view status(const std::string& id);
  int queries() const { return queries_; }

 private:
  Query query_;
  std::map<std::string, std::string> states_;  // as of the last query
  std::set<std::string> asked_;                // since the last query
  bool queried_for_unknown_ = false;           // the last query was for a job it did not know
  int queries_ = 0;
};

}  // namespace rkit::rsub
