// File: rsub/backends/kube_backend.cpp — the Kubernetes backend (remote.hpp): the manifests of
// kube.hpp created with kubectl, states from one `kubectl get jobs` per refresh. No API
// server can run on the build machines: tests drive it through tests/fakes/fake_kubectl.
#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <map>
#include <string_view>
#include <vector>

#include "backends/kube.hpp"
#include "backends/remote.hpp"
#include "rkit/error.hpp"
#include "rkit/time.hpp"

namespace rkit::rsub {

namespace {

std::optional<double> iso_time(const Json& v) {
  return v.is_string() ? parse_utc_time(v.get_ref<const std::string&>()) : std::nullopt;
}

// What kubectl prints, as rsub reads it: the one place its messages are matched (rsub's
// own errors are typed: BackendUnreachable, SubmitUnconfirmed).
enum class KubectlSays {
  Unreachable,     // the API server did not answer, or answered "not now"
  MaybeDelivered,  // of those, a timeout: the request may have reached the API server
};

bool kubectl_says(KubectlSays what, std::string_view err) {
  static const std::map<KubectlSays, std::vector<std::string_view>> kPhrases = {
      {KubectlSays::Unreachable,
       {"Unable to connect to the server", "connection to the server", "TLS handshake timeout", "i/o timeout",
        "request timed out", "Too Many Requests", "ServiceUnavailable",
        "the server is currently unable to handle the request"}},
      {KubectlSays::MaybeDelivered, {"timed out", "timeout"}},
  };
  return mentions_any(err, kPhrases.at(what));
}

bool unreachable(const std::string& err) { return kubectl_says(KubectlSays::Unreachable, err); }

// [rsub.backends.NAME] with kind = "kubernetes".
struct KubeConfig final : RemoteConfig {
  std::string kubectl = "kubectl";
  std::string context;  // kubectl --context ("" → the current one)
  KubeTarget kube;      // namespace, default image, priority class, GPU resource
  std::unique_ptr<RemoteBackend> remote(std::optional<std::uint32_t> run_as_uid) const override;
};

class KubeBackend final : public RemoteBackend {
 public:
  KubeBackend(const KubeConfig& config, std::optional<std::uint32_t> run_as_uid) : c_(config), run_as_(run_as_uid) {}

  // The client's working directory does not exist in a container image: the image's.
  void prepare(JobSpec&, const std::string&) const override {}

  std::string render(const JobSpec& spec, const RemoteDeps& deps, const SubmitRef& ref) override {
    auto utf8 = [](const std::string& v) { return is_utf8(v); };
    if (!std::all_of(spec.command.begin(), spec.command.end(), utf8) || !utf8(spec.workdir) ||
        !std::all_of(spec.env.begin(), spec.env.end(), [&](const auto& kv) { return utf8(kv.second); }))
      throw Error(Exit::DataErr, fmt::format("{}: the job's command, working directory or environment is not UTF-8 "
                                             "text, which a Kubernetes object cannot carry",
                                             how_.who));
    if (spec.hold)
      throw Error(Exit::DataErr, fmt::format("{}: jobs cannot be submitted held there", how_.who),
                  "Kueue admits them as its queues allow; submit the job when it may run");
    if (!deps.empty())
      throw Error(Exit::DataErr, fmt::format("{}: jobs cannot depend on other jobs there", how_.who),
                  "Kubernetes Jobs have no dependencies; submit the next job when this one has ended");
    KubeTarget target = c_.kube;
    target.store_tag = ref.store_tag;
    if (auto it = c_.tenant_map.find(spec.tenant); it != c_.tenant_map.end()) target.queue = it->second;
    // Created suspended, a Job starts only when Kueue admits it: without a queue, never.
    if (target.queue.empty() && spec.kube.queue.empty())
      throw Error(Exit::DataErr, fmt::format("{}: no Kueue queue for tenant \"{}\"", how_.who, spec.tenant),
                  "map the tenant in the backend's queues, or set queue under [kubernetes] in the job file");
    // One v1 List, which kubectl reads as its items (JSON is kubectl's own format).
    Json items = Json::array();
    for (const auto& index : indices(spec))
      for (auto& doc : kube_manifests(spec, target, ref.id, ref.user, index)) items.push_back(std::move(doc));
    return Json{{"apiVersion", "v1"}, {"kind", "List"}, {"items", std::move(items)}}.dump(2) + "\n";
  }

  std::vector<std::string> submit(const JobSpec& spec, const RemoteDeps& deps, const SubmitRef& ref) override {
    const std::string manifests = render(spec, deps, ref);
    // The names are rsub's to choose, so they are known before the API server answers.
    std::vector<std::string> names;
    for (const auto& index : indices(spec)) names.push_back(kube_job_name(spec, ref.id, index, ref.store_tag));
    RunResult r;
    try {
      // create, not apply: a name taken already is an error, never someone else's Job adopted.
      r = call({"create", "-f", "-"}, manifests, c_.submit_retry_s);
    } catch (const BackendUnreachable& e) {
      // A refused connection took nothing; a timeout may have created the Jobs.
      if (!e.timed_out && !kubectl_says(KubectlSays::MaybeDelivered, e.client_says)) throw;
      throw SubmitUnconfirmed(fmt::format("{}; the Jobs may still have been created", e.what()), names);
    }
    if (!r.status.success()) refused("kubectl create", r);
    return names;
  }

  std::map<std::int64_t, std::string> adopt(const std::string&, const std::string&) override {
    return {};  // names are known at submission (SubmitUnconfirmed carries them)
  }

  std::vector<Store::RemoteState> query(const std::vector<std::string>& ids) override {
    // One list call for every job of this backend (a label rsub sets), not one per job.
    const RunResult r = call({"get", "jobs", "-l", "rkit.io/backend=" + c_.name, "-o", "json"}, {}, 0);
    if (!r.status.success()) refused("kubectl get jobs", r);
    std::map<std::string, Store::RemoteState> by_name;
    try {
      for (const Json& job : parse_json(r.out, "kubectl get jobs").value("items", Json::array())) {
        const Store::RemoteState s = job_state(job);
        by_name[s.remote_id] = s;
      }
    } catch (const Json::exception& e) {
      throw Error(Exit::DataErr, fmt::format("{}: kubectl get jobs: unexpected output: {}", how_.who, e.what()));
    }
    std::vector<Store::RemoteState> out;
    for (const auto& id : ids) {
      if (auto it = by_name.find(id); it != by_name.end()) {
        out.push_back(it->second);
        continue;
      }
      // Not listed: deleted behind rsub's back (kubectl delete, a TTL controller), or
      // never created (an unconfirmed submission). Its end is unknown.
      Store::RemoteState gone;
      gone.remote_id = id;
      gone.state = JobState::Lost;
      gone.reason = "no longer listed by Kubernetes";
      gone.end_s = static_cast<double>(std::time(nullptr));
      out.push_back(gone);
    }
    return out;
  }

  bool control(const std::vector<std::string>& ids, Control action) override {
    if (action != Control::Cancel)
      throw Error(Exit::DataErr, fmt::format("{}: jobs cannot be held or released there", how_.who),
                  "Kueue decides when a Job starts; cancel it and submit it again later");
    std::vector<std::string> args{"delete", "--ignore-not-found", "--wait=false"};
    for (const auto& name : ids) args.insert(args.end(), {"job/" + name, "service/" + name});
    const RunResult r = call(args, {}, 0);
    if (!r.status.success()) refused("kubectl delete", r);
    return true;  // deleted: rsub records the cancellation
  }

  std::optional<double> expected_wait(const JobSpec& spec) override {
    render(spec, {}, {});  // a job this backend cannot take is not a candidate
    return std::nullopt;
  }

  std::vector<std::string> explain(const JobRecord& job, std::string& reason) override {
    reason = job.reason;
    return {"Kueue admits it (unsuspends the Job) when its queue's ClusterQueue has quota for the whole gang",
            fmt::format("kubectl -n {} get workloads shows Kueue's view", name_space())};
  }

  std::string describe() override {
    return fmt::format("Kubernetes, kubectl context {}, namespace {}; Jobs for Kueue",
                       c_.context.empty() ? "(current)" : c_.context, name_space());
  }

  std::string log_path(const JobRecord& job, int, bool) const override {
    throw Error(Exit::Unavailable, fmt::format("job {}: rsub logs does not read Kubernetes pods", job.display_id()),
                fmt::format("kubectl{} -n {} logs job/{}", c_.context.empty() ? "" : " --context " + c_.context,
                            name_space(), job.remote_id));
  }

 private:
  static std::vector<std::optional<int>> indices(const JobSpec& spec) {
    if (!spec.array) return {std::nullopt};
    return {spec.array->indices.begin(), spec.array->indices.end()};
  }

  // A Job's state from its status: suspended → PENDING (Kueue has not admitted it),
  // conditions Complete/Failed → the end, else RUNNING once started.
  static Store::RemoteState job_state(const Json& job) {
    Store::RemoteState s;
    s.remote_id = job.value("metadata", Json::object()).value("name", "");
    const Json st = job.value("status", Json::object());
    s.start_s = iso_time(st.value("startTime", Json()));
    s.attempts = st.value("failed", 0) + (s.start_s ? 1 : 0);
    s.state = job.value("spec", Json::object()).value("suspend", false) ? JobState::Pending : JobState::Running;
    if (s.state == JobState::Pending) s.reason = "Suspended (waiting for Kueue admission)";
    for (const Json& cond : st.value("conditions", Json::array())) {
      if (cond.value("status", "") != "True") continue;
      const std::string type = cond.value("type", ""), reason = cond.value("reason", "");
      if (type == "Complete")
        s.state = JobState::Completed;
      else if (type == "Failed")
        s.state = reason == "DeadlineExceeded" ? JobState::Timeout : JobState::Failed;
      else
        continue;
      s.reason = reason;
      s.end_s = iso_time(cond.value("lastTransitionTime", Json()));
    }
    if (s.state == JobState::Running && st.value("active", 0) == 0 && !s.start_s) s.state = JobState::Pending;
    if (s.state == JobState::Failed) s.exit_code = 1;  // a Job's status has no exit code
    return s;
  }

  std::string name_space() const { return c_.kube.namespace_name.empty() ? "default" : c_.kube.namespace_name; }

  RunResult call(const std::vector<std::string>& args, const std::string& input, double retry_s) const {
    std::vector<std::string> argv{c_.kubectl};
    if (!c_.context.empty()) argv.insert(argv.end(), {"--context", c_.context});
    argv.insert(argv.end(), {"-n", name_space()});
    argv.insert(argv.end(), args.begin(), args.end());
    return run_backend_command(how_, argv, {}, input, retry_s);
  }
  [[noreturn]] void refused(const std::string& what, const RunResult& r) const { backend_refused(how_, what, r); }

  KubeConfig c_;
  std::optional<std::uint32_t> run_as_;
  BackendCall how_{fmt::format("kubernetes backend \"{}\"", c_.name), "the API server", unreachable, run_as_};
};

}  // namespace

std::unique_ptr<RemoteBackend> KubeConfig::remote(std::optional<std::uint32_t> run_as_uid) const {
  return std::make_unique<KubeBackend>(*this, run_as_uid);
}

BackendKind kubernetes_backend_kind() {
  return {"kubernetes",
          {"queues", "kubectl", "context", "namespace", "image", "priority_class", "gpu_resource", "gpu_label"},
          [](const Config& c, const std::string& key, const BackendCommon& common) -> std::shared_ptr<BackendConfig> {
            auto b = std::make_shared<KubeConfig>();
            static_cast<BackendCommon&>(*b) = common;
            b->tenant_map = c.get_string_map(key + ".queues");
            auto str = [&](const char* k, std::string& out) {
              if (auto v = c.get_string(key + "." + k)) out = *v;
            };
            str("kubectl", b->kubectl);
            str("context", b->context);
            str("namespace", b->kube.namespace_name);
            str("image", b->kube.image);
            str("priority_class", b->kube.priority_class);
            str("gpu_resource", b->kube.gpu_resource);
            str("gpu_label", b->kube.gpu_label);
            b->kube.backend = common.name;
            return b;
          }};
}

}  // namespace rkit::rsub
