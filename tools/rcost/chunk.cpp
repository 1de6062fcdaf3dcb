// File: tools/rcost/chunk.cpp — parsing one chunk of input: rkit.job.v1 and
// rkit.sample.v1 lines with simdjson's on-demand API, or `sacct -P` lines.
#include <algorithm>
#include <array>
#include <cmath>

#include "records_impl.hpp"

namespace rkit::rcost::detail {

namespace {

namespace od = simdjson::ondemand;

// Key comparison against a literal, inlined (a record has ~36 keys; this is hot).
template <std::size_t N>
bool is(std::string_view key, const char (&name)[N]) {
  if (key.size() != N - 1) return false;
  for (std::size_t i = 0; i < N - 1; ++i)  // unrolled: a call to memcmp costs more than the compare
    if (key[i] != name[i]) return false;
  return true;
}

// The rkit.job.v1 fields rcost reads.
enum class JobField {
  Other,
  Id,
  Backend,
  Tenant,
  User,
  Project,
  Workflow,
  Rule,
  GpuType,
  Host,
  State,
  Tasks,
  MemoryPerTask,
  Cpus,
  Gpus,
  Submit,
  Start,
  End,
  Alloc,
  CpuUsed
};

JobField job_field(std::string_view k) {
  switch (k.size()) {
    case 2: return is(k, "id") ? JobField::Id : JobField::Other;
    case 4:
      return is(k, "user")   ? JobField::User
             : is(k, "host") ? JobField::Host
             : is(k, "rule") ? JobField::Rule
             : is(k, "cpus") ? JobField::Cpus
             : is(k, "gpus") ? JobField::Gpus
                             : JobField::Other;
    case 5:
      return is(k, "state")   ? JobField::State
             : is(k, "tasks") ? JobField::Tasks
             : is(k, "alloc") ? JobField::Alloc
                              : JobField::Other;
    case 6: return is(k, "tenant") ? JobField::Tenant : JobField::Other;
    case 7: return is(k, "backend") ? JobField::Backend : is(k, "project") ? JobField::Project : JobField::Other;
    case 8: return is(k, "gpu_type") ? JobField::GpuType : is(k, "workflow") ? JobField::Workflow : JobField::Other;
    case 10: return is(k, "end_unix_s") ? JobField::End : is(k, "cpu_used_s") ? JobField::CpuUsed : JobField::Other;
    case 12: return is(k, "start_unix_s") ? JobField::Start : JobField::Other;
    case 13: return is(k, "submit_unix_s") ? JobField::Submit : JobField::Other;
    case 21: return is(k, "memory_per_task_bytes") ? JobField::MemoryPerTask : JobField::Other;
    default: return JobField::Other;
  }
}

// A key as written, without unescaping (rkit's keys have no escapes; a key that has
// some matches none of them and reads as "").
std::string_view raw_key(od::field& f) {
  const char* p = f.key().raw();
  const char* q = p;
  for (; *q != '"'; ++q)
    if (*q == '\\') return {};
  return {p, static_cast<std::size_t>(q - p)};
}

// Limits that keep sums finite: a record beyond them is bad, not a NaN in the report.
constexpr double kMaxUnits = 1e7;                                     // cores or GPUs of one job
constexpr double kMaxMemoryBytes = 1ull << 60;                        // an exbibyte
constexpr double kMaxSampleInterval = 86400;                          // rtop sample --interval's limit
bool plausible_time(double t) { return t >= 0 && t < 8589934592.0; }  // 2^33 s: year 2242

// Fields whose last value is cached (ChunkParser::name).
enum class Slot { Backend, Tenant, User, Project, Workflow, Rule, GpuType, Host, State, Other };
constexpr std::size_t kSlots = 10;

class ChunkParser {
 public:
  // `parser` and `buffer` are the thread's own, kept from chunk to chunk: making them
  // anew for each 16 MiB chunk costs the kernel fresh zeroed pages every time.
  ChunkParser(const Input& in, InputKind kind, const SacctColumns& cols, const ReadOptions& opt, od::parser& parser,
              std::string& buffer)
      : in_(in), kind_(kind), cols_(cols), opt_(opt), parser_(parser), buffer_(buffer) {}

  // Parses the lines of [from, to) of the input.
  void parse(std::size_t from, std::size_t to, ChunkResult& out) {
    out_ = &out;
    const char* base = in_.bytes(from, to, buffer_);
    std::size_t pos = 0;
    to -= from;
    std::uint64_t line = 0;
    while (pos < to) {
      const void* nl = std::memchr(base + pos, '\n', to - pos);
      const std::size_t end = nl ? static_cast<std::size_t>(static_cast<const char*>(nl) - base) : to;
      ++line;
      const std::string_view text = trim(std::string_view(base + pos, end - pos));
      if (!text.empty()) {
        ++out.data.lines;
        why_.clear();
        const bool ok = kind_ == InputKind::Json ? json_line(text) : sacct_line(text);
        if (!ok) {
          ++out.data.bad_count;
          if (out.bad.size() < kMaxBadKept) out.bad.emplace_back(line, why_);
          if (opt_.strict) {
            out.lines_in_chunk = line;
            return;
          }
        }
      }
      pos = end + 1;
    }
    out.lines_in_chunk = line;
  }

 private:
  bool fail(std::string why) {
    why_ = std::move(why);
    return false;
  }

  // The chunk is padded (Input::bytes), so simdjson may read past the line's end.
  bool json_line(std::string_view text) {
    od::document doc;
    const simdjson::error_code err =
        parser_
            .iterate(simdjson::padded_string_view(text.data(), text.size(), text.size() + simdjson::SIMDJSON_PADDING))
            .get(doc);
    if (err) return fail(std::string("not JSON: ") + simdjson::error_message(err));
    od::object obj;
    if (text.front() != '{' || doc.get_object().get(obj)) return fail("not a JSON object");
    std::string_view schema;
    if (obj.find_field_unordered("schema").get_string().get(schema)) return fail("no \"schema\" field");
    if (obj.reset().error()) return fail("not JSON");
    const struct {
      std::size_t jobs, samples, units, utils, gpu_utils;
    } mark{out_->data.jobs.size(), out_->data.samples.size(), out_->data.units.size(), out_->data.utils.size(),
           out_->data.gpu_utils.size()};
    bool ok, ignored = false;
    if (schema == "rkit.job.v1")
      ok = job_record(obj);
    else if (schema == "rkit.sample.v1")
      ok = sample_record(obj);
    else if (schema.starts_with("rkit.bench.") || schema.starts_with("rkit.train.event.") ||
             schema.starts_with("rkit.cost.")) {
      std::string_view raw;  // read to its end, so that text after it is seen
      ok = !obj.raw_json().get(raw) || fail("not JSON");
      ignored = true;
    } else if (schema.starts_with("rkit.job.v") || schema.starts_with("rkit.sample.v")) {
      ok = fail(fmt::format("schema {} is a version this rcost does not know", schema));
    } else {
      ok = fail(fmt::format("unknown schema {}", schema));
    }
    // Text after the object (two records on one line: a lost newline) is damage too.
    const char* after = nullptr;
    if (ok && !doc.current_location().get(after)) {
      // The line is bad as a whole: what its first record added goes.
      Dataset& d = out_->data;
      d.jobs.resize(mark.jobs);
      d.ids.resize(std::min(d.ids.size(), mark.jobs));
      d.samples.resize(mark.samples);
      d.units.resize(mark.units);
      d.utils.resize(mark.utils);
      d.gpu_utils.resize(mark.gpu_utils);
      return fail("text after the JSON object (a missing newline?)");
    }
    if (ok && ignored) ++out_->data.ignored;
    return ok;
  }

  // A number or null; false (with why_) for other types.
  bool number_or_null(od::value v, std::string_view key, double& out) {
    if (v.is_null().value_unsafe()) {
      out = kNone;
      return true;
    }
    double d;
    if (v.get_double().get(d) || !std::isfinite(d)) return fail(fmt::format("\"{}\" must be a number or null", key));
    out = d;
    return true;
  }
  bool number(od::value v, std::string_view key, double& out) {
    if (v.get_double().get(out) || !std::isfinite(out)) return fail(fmt::format("\"{}\" must be a number", key));
    return true;
  }
  // A string interned into `out` (slot: a cache of the field's last value), or null
  // (id 0) when `nullable`. With `keep` false the type is checked and nothing is kept.
  bool name(od::value v, std::string_view key, std::uint32_t& out, bool nullable, Slot slot, bool keep = true) {
    if (nullable && v.is_null().value_unsafe()) {
      out = 0;
      return true;
    }
    if (!keep) {
      od::json_type type;
      if (v.type().get(type) || type != od::json_type::string) return fail(fmt::format("\"{}\" must be a string", key));
      return true;
    }
    std::string_view s;
    if (v.get_string().get(s)) return fail(fmt::format("\"{}\" must be a string", key));
    const auto i = static_cast<std::size_t>(slot);
    if (last_id_[i] && last_name_[i] == s) {
      out = last_id_[i];
      return true;
    }
    out = out_->data.strings.id(s);
    last_name_[i] = s;
    last_id_[i] = out;
    return true;
  }
  bool job_record(od::object obj) {
    Dataset& d = out_->data;
    Job j;
    std::string_view id;
    double tasks = 1, mem_per_task = 0;
    enum : unsigned {
      kId = 1,
      kBackend = 2,
      kTenant = 4,
      kUser = 8,
      kState = 16,
      kCpus = 32,
      kGpus = 64,
      kSubmit = 128,
      kStart = 256,
      kEnd = 512
    };
    unsigned seen = 0;
    const std::size_t units_mark = d.units.size();
    for (auto field : obj) {
      od::field f;
      if (std::move(field).get(f)) return fail("not JSON");
      const std::string_view key = raw_key(f);
      od::value v = f.value();
      switch (job_field(key)) {
        case JobField::Id: {
          std::string_view s;
          if (v.get_string().get(s)) return fail("\"id\" must be a string");
          if (opt_.ids || opt_.experiments) id = s;
          seen |= kId;
          break;
        }
        case JobField::Backend:
          if (!name(v, key, j.backend, false, Slot::Backend)) return false;
          seen |= kBackend;
          break;
        case JobField::Tenant:
          if (!name(v, key, j.tenant, false, Slot::Tenant)) return false;
          seen |= kTenant;
          break;
        case JobField::User:
          if (!name(v, key, j.user, false, Slot::User, opt_.users)) return false;
          seen |= kUser;
          break;
        case JobField::Project:
          if (!name(v, key, j.project, true, Slot::Project, opt_.projects)) return false;
          break;
        case JobField::Workflow:
          if (!name(v, key, j.workflow, true, Slot::Workflow, opt_.workflows)) return false;
          break;
        case JobField::Rule:
          if (!name(v, key, j.rule, true, Slot::Rule, opt_.workflows)) return false;
          break;
        case JobField::GpuType:
          if (!name(v, key, j.gpu_type, true, Slot::GpuType)) return false;
          break;
        case JobField::Host:
          if (!name(v, key, j.node, true, Slot::Host)) return false;
          break;
        case JobField::State:
          if (!name(v, key, j.state, false, Slot::State, opt_.states)) return false;
          seen |= kState;
          break;
        case JobField::Tasks:
          if (!number(v, key, tasks)) return false;
          break;
        case JobField::MemoryPerTask:
          if (!number(v, key, mem_per_task)) return false;
          break;
        case JobField::Cpus:
          if (!number(v, key, j.cpus)) return false;
          seen |= kCpus;
          break;
        case JobField::Gpus:
          if (!number(v, key, j.gpus)) return false;
          seen |= kGpus;
          break;
        case JobField::Submit:
          if (!number(v, key, j.submit)) return false;
          seen |= kSubmit;
          break;
        case JobField::Start:
          if (!number_or_null(v, key, j.start)) return false;
          seen |= kStart;
          break;
        case JobField::End:
          if (!number_or_null(v, key, j.end)) return false;
          seen |= kEnd;
          break;
        case JobField::Alloc:
          if (!alloc(v, j)) return false;
          break;
        case JobField::CpuUsed:
          if (!number_or_null(v, key, j.cpu_used_s)) return false;
          break;
        case JobField::Other: break;
      }
    }
    static constexpr std::pair<unsigned, const char*> kRequired[] = {
        {kId, "id"},         {kBackend, "backend"},      {kTenant, "tenant"},
        {kUser, "user"},     {kState, "state"},          {kCpus, "cpus"},
        {kGpus, "gpus"},     {kSubmit, "submit_unix_s"}, {kStart, "start_unix_s"},
        {kEnd, "end_unix_s"}};
    for (auto [bit, field] : kRequired)
      if (!(seen & bit)) {
        d.units.resize(units_mark);
        return fail(fmt::format("missing field \"{}\"", field));
      }
    if (tasks < 0 || mem_per_task < 0) {
      d.units.resize(units_mark);
      return fail("negative resources");
    }
    j.memory_bytes = tasks * mem_per_task;
    if (!check_job(j)) {
      d.units.resize(units_mark);
      return false;
    }
    experiment_of(j, id);
    d.jobs.push_back(j);
    if (opt_.ids) d.ids.emplace_back(id);
    return true;
  }

  // The experiment of the run job `id` was, when the report is by experiment.
  void experiment_of(Job& j, std::string_view id) {
    if (!opt_.experiments) return;
    const auto it = opt_.experiments->find(std::string(id));
    if (it != opt_.experiments->end()) j.experiment = out_->data.strings.id(it->second);
  }

  // alloc: [{"task":0,"cores":[..],"pus":[..],"gpus":[..],"memory_bytes":0}, ...]
  bool alloc(od::value v, Job& j) {
    od::array tasks;
    if (v.get_array().get(tasks)) return fail("\"alloc\" must be an array");
    Dataset& d = out_->data;
    std::vector<std::uint32_t> pus, gpus;
    for (auto t : tasks) {
      od::object o;
      if (t.get_object().get(o)) return fail("\"alloc\" must hold objects");
      for (auto field : o) {
        od::field f;
        if (std::move(field).get(f)) return fail("not JSON");
        const std::string_view key = raw_key(f);
        if (key != "pus" && key != "gpus") continue;
        od::array a;
        if (f.value().get_array().get(a)) return fail(fmt::format("alloc \"{}\" must be an array", key));
        for (auto e : a) {
          std::uint64_t i;
          if (e.get_uint64().get(i) || i > UINT32_MAX) return fail(fmt::format("alloc \"{}\" must hold indices", key));
          (key == "pus" ? pus : gpus).push_back(static_cast<std::uint32_t>(i));
        }
      }
    }
    j.pus_at = static_cast<std::uint32_t>(d.units.size());
    j.pus_count = static_cast<std::uint32_t>(pus.size());
    d.units.insert(d.units.end(), pus.begin(), pus.end());
    j.gpus_at = static_cast<std::uint32_t>(d.units.size());
    j.gpus_count = static_cast<std::uint32_t>(gpus.size());
    d.units.insert(d.units.end(), gpus.begin(), gpus.end());
    return true;
  }

  // Checks that hold for every source.
  bool check_job(const Job& j) {
    if (j.cpus < 0 || j.gpus < 0 || j.memory_bytes < 0) return fail("negative resources");
    if (j.cpus > kMaxUnits || j.gpus > kMaxUnits || j.memory_bytes > kMaxMemoryBytes)
      return fail("resources out of range");
    for (double t : {j.submit, j.eligible, j.start, j.end})
      if (known(t) && !plausible_time(t)) return fail(fmt::format("time {} is not between 1970 and 2242", t));
    if (known(j.start) && known(j.end) && j.end < j.start)
      return fail(fmt::format("negative duration: ends {:.0f} s before it starts", j.start - j.end));
    if (known(j.start) && j.start < (known(j.eligible) ? j.eligible : j.submit))
      return fail("negative queue wait: starts before it was submitted");
    return true;
  }

  bool sample_record(od::object obj) {
    Dataset& d = out_->data;
    Sample s;
    bool have_time = false, have_interval = false, have_host = false;
    const std::size_t utils_mark = d.utils.size(), gpus_mark = d.gpu_utils.size();
    auto undo = [&] {
      d.utils.resize(utils_mark);
      d.gpu_utils.resize(gpus_mark);
      return false;
    };
    s.cpus_at = static_cast<std::uint32_t>(utils_mark);
    s.gpus_at = static_cast<std::uint32_t>(gpus_mark);
    for (auto field : obj) {
      od::field f;
      if (std::move(field).get(f)) return fail("not JSON"), undo();
      const std::string_view key = raw_key(f);
      od::value v = f.value();
      if (key == "time_unix_s") {
        if (!number(v, key, s.end)) return undo();
        have_time = true;
      } else if (key == "interval_s") {
        if (!number(v, key, s.interval_s)) return undo();
        have_interval = true;
      } else if (key == "host") {
        if (!name(v, key, s.host, false, Slot::Other)) return undo();
        have_host = true;
      } else if (key == "cpu_util") {
        if (!number(v, key, s.cpu_util)) return undo();
      } else if (key == "memory_total_bytes") {
        if (!number(v, key, s.memory_total_bytes) || s.memory_total_bytes < 0 || s.memory_total_bytes > kMaxMemoryBytes)
          return fail("\"memory_total_bytes\" is out of range"), undo();
      } else if (key == "cores") {
        if (!number(v, key, s.cores) || s.cores < 0 || s.cores > kMaxUnits)
          return fail("\"cores\" is out of range"), undo();
      } else if (key == "cpu_util_per_cpu") {
        od::array a;
        if (v.get_array().get(a)) return fail("\"cpu_util_per_cpu\" must be an array"), undo();
        for (auto e : a) {
          double u;
          if (e.get_double().get(u)) return fail("\"cpu_util_per_cpu\" must hold numbers"), undo();
          d.utils.push_back(static_cast<float>(std::clamp(u, 0.0, 1.0)));
        }
      } else if (key == "gpus") {
        if (!sample_gpus(v, s)) return undo();
      }
    }
    if (!have_time) return fail("missing field \"time_unix_s\""), undo();
    if (!have_interval) return fail("missing field \"interval_s\""), undo();
    if (!have_host) return fail("missing field \"host\" (records of rtop before 0.2 lack it)"), undo();
    if (s.interval_s <= 0 || s.interval_s > kMaxSampleInterval)
      return fail("\"interval_s\" must be more than 0 and at most a day"), undo();
    if (!plausible_time(s.end)) return fail("\"time_unix_s\" is not between 1970 and 2242"), undo();
    s.cpus_count = static_cast<std::uint32_t>(d.utils.size() - utils_mark);
    s.gpus_count = static_cast<std::uint32_t>(d.gpu_utils.size() - gpus_mark);
    double sum = 0;
    for (std::uint32_t i = 0; i < s.gpus_count; ++i) sum += d.gpu_utils[s.gpus_at + i].second;
    s.gpu_util_mean = s.gpus_count ? sum / s.gpus_count : 0;
    s.cpu_util = std::clamp(s.cpu_util, 0.0, 1.0);
    d.samples.push_back(s);
    return true;
  }

  // gpus: [{"index":0,"name":"...","util":0.5,...}]; a null util counts as 0.
  bool sample_gpus(od::value v, Sample& s) {
    od::array a;
    if (v.get_array().get(a)) return fail("\"gpus\" must be an array");
    for (auto g : a) {
      od::object o;
      if (g.get_object().get(o)) return fail("\"gpus\" must hold objects");
      std::uint64_t index = UINT64_MAX;
      double util = 0;
      for (auto field : o) {
        od::field f;
        if (std::move(field).get(f)) return fail("not JSON");
        const std::string_view key = raw_key(f);
        od::value fv = f.value();
        if (key == "index") {
          if (fv.get_uint64().get(index) || index > UINT32_MAX) return fail("gpus \"index\" must be an index");
        } else if (key == "util") {
          if (!number_or_null(fv, "util", util)) return false;
          if (!known(util)) util = 0;
        } else if (key == "name" && s.gpu_model == 0) {
          std::string_view n;
          if (!fv.get_string().get(n)) s.gpu_model = out_->data.strings.id(n);
        }
      }
      if (index == UINT64_MAX) return fail("gpus entry without \"index\"");
      out_->data.gpu_utils.emplace_back(static_cast<std::uint32_t>(index),
                                        static_cast<float>(std::clamp(util, 0.0, 1.0)));
    }
    return true;
  }

  // One `sacct -P` row. Job steps ("123.batch") are skipped: their parent line holds
  // the allocation.
  bool sacct_line(std::string_view text) {
    const auto f = split_bar(text);
    if (f.size() != cols_.count) return fail(fmt::format("{} fields where the header has {}", f.size(), cols_.count));
    auto col = [&](int i) { return i < 0 ? std::string_view() : f[static_cast<std::size_t>(i)]; };
    const std::string_view job_id = col(cols_.job_id);
    if (job_id.find('.') != std::string_view::npos) {
      ++out_->data.ignored;
      return true;
    }
    Dataset& d = out_->data;
    Job j;

    const std::string_view user = col(cols_.user);
    if (user.empty()) return fail("empty User");
    j.user = d.strings.id(user);
    const auto mapped = opt_.tenant_of_user.find(std::string(user));
    j.tenant = d.strings.id(mapped != opt_.tenant_of_user.end() ? std::string_view(mapped->second)
                            : !col(cols_.account).empty()       ? col(cols_.account)
                                                                : user);
    j.partition = d.strings.id(col(cols_.partition));
    // "CANCELLED by 1000" → CANCELLED.
    std::string_view state = col(cols_.state);
    state = state.substr(0, state.find(' '));
    j.state = d.strings.id(state);
    j.backend = d.strings.id(opt_.slurm_backend);
    j.submit = parse_sacct_time(col(cols_.submit));
    if (!known(j.submit)) return fail(fmt::format("Submit \"{}\" is not a time", col(cols_.submit)));
    j.eligible = parse_sacct_time(col(cols_.eligible));
    j.start = parse_sacct_time(col(cols_.start));
    j.end = parse_sacct_time(col(cols_.end));
    if (known(j.end) && !known(j.start)) j.end = kNone;  // cancelled while pending
    // A single node's name is where it ran; a list ("n[1-4]") is kept as it is.
    j.node = d.strings.id(col(cols_.node_list) == "None assigned" ? std::string_view() : col(cols_.node_list));
    Tres tres;
    if (!parse_tres(col(cols_.alloc_tres), tres))
      return fail(fmt::format("AllocTRES \"{}\" is malformed", col(cols_.alloc_tres)));
    j.cpus = tres.cpus;
    j.gpus = tres.gpus;
    j.memory_bytes = tres.memory_bytes;
    j.gpu_type = d.strings.id(tres.gpu_type);
    if (!check_job(j)) return false;
    experiment_of(j, job_id);
    d.jobs.push_back(j);
    if (opt_.ids) d.ids.emplace_back(job_id);
    return true;
  }

  const Input& in_;
  InputKind kind_;
  const SacctColumns& cols_;
  const ReadOptions& opt_;
  ChunkResult* out_ = nullptr;
  od::parser& parser_;
  std::string& buffer_;
  // The last name read into each slot and its id: consecutive records often repeat them.
  std::array<std::string, kSlots> last_name_;
  std::array<std::uint32_t, kSlots> last_id_{};
  std::string why_;
};

}  // namespace

void parse_chunk(const Input& in, InputKind kind, const SacctColumns& cols, const ReadOptions& opt, std::size_t from,
                 std::size_t to, ChunkResult& out) {
  thread_local od::parser parser;
  thread_local std::string buffer;
  ChunkParser(in, kind, cols, opt, parser, buffer).parse(from, to, out);
}

}  // namespace rkit::rcost::detail
