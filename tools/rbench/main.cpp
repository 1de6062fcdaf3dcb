// rbench: hardware benchmarks for ML training, each checked and judged against its peak.
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <iostream>

#include "compare.hpp"
#include "record.hpp"
#include "report.hpp"
#include "rkit/atomic_file.hpp"
#include "rkit/cli.hpp"
#include "rkit/cpus.hpp"
#include "rkit/error.hpp"
#include "rkit/interrupt.hpp"
#include "suite.hpp"

namespace {

using namespace rkit;
using namespace rkit::rbench;

std::string cell_number(const Json& v) { return v.is_number() ? fmt::format("{:.4g}", v.get<double>()) : "-"; }

std::string params_cell(const Json& p) {
  std::string out;
  for (auto& [k, v] : p.items()) out += (out.empty() ? "" : " ") + k + "=" + Printer::cell(v, "-");
  return out;
}

std::vector<Column> result_columns() {
  return {
      {"SUITE", "suite"},
      {"METRIC", "metric"},
      {"PARAMS", "params", params_cell},
      {"MEDIAN", "median", cell_number},
      {"UNIT", "unit"},
      {"CV", "cv", [](const Json& v) { return v.is_number() ? fmt::format("{:.1f}%", 100 * v.get<double>()) : "-"; }},
      {"PEAK", "peak_fraction",
       [](const Json& v) { return v.is_number() ? fmt::format("{:.0f}%", 100 * v.get<double>()) : "-"; }},
      {"CHECK", "correct", [](const Json& v) { return !v.is_boolean() ? "-"
                                                      : v.get<bool>() ? "ok"
                                                                      : "WRONG"; }}};
}

// Runs f, which writes the report to `out`; any failure to write it is an I/O error
// (74), whatever its errno, so that 66 and 77 keep meaning a results file.
template <typename F>
auto writing_report(const std::string& out, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    throw Error(Exit::IoErr, "cannot write the report to " + out + ": " + e.what());
  }
}

// The report's output, opened before the inputs are read so that a bad OUT fails at
// once; refused when it is a directory or one of the inputs.
std::optional<AtomicFile> open_report(const std::string& out, const std::vector<std::string>& inputs) {
  if (out.empty() || out == "-") return std::nullopt;
  struct stat st {};
  if (::stat(out.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw Error(Exit::IoErr, "cannot write the report to " + out + ": it is a directory");
    for (const auto& in : inputs) {
      struct stat is {};
      if (in != "-" && ::stat(in.c_str(), &is) == 0 && is.st_dev == st.st_dev && is.st_ino == st.st_ino)
        usage_error("--html " + out + " is also a results file to read");
    }
  }
  return writing_report(out, [&] { return std::optional<AtomicFile>(std::in_place, out); });
}

}  // namespace

int main(int argc, char** argv) {
  // A suite's helper process (comm.gloo's ranks): rbench started itself; not a command.
  if (argc > 1 && std::string_view(argv[1]) == kWorkerCommand) return run_worker(argc - 2, argv + 2);
  // A closed stdout or stderr must be a write error (74), not a kill that skips the
  // suites' cleanup (io.seq's scratch file).
  std::signal(SIGPIPE, SIG_IGN);
  InterruptGuard interrupts;
  Tool tool("rbench", "Benchmark the hardware ML training runs on, with checked results and peak fractions");

  auto* list_cmd = tool.add_subcommand("list", "List the suites and whether each can run here");

  auto* run_cmd = tool.add_subcommand("run", "Run suites (all when none is named) and print rkit.bench.v1 records");
  std::vector<std::string> names;
  RunOptions opt;
  int reps = 0, warmup = -1;
  std::string output;
  run_cmd->add_option("suite", names, "Suites to run: a name (cpu.stream) or a prefix (cpu)")->type_name("SUITE");
  run_cmd->add_flag("--quick", opt.quick, "Smaller sizes and 3 repetitions: every CPU suite within a minute");
  run_cmd->add_option("--reps", reps, "Timed repetitions per metric (default 5; 3 with --quick)")->type_name("N");
  run_cmd->add_option("--warmup", warmup, "Untimed runs first (default 1)")->type_name("N");
  run_cmd->add_option("--threads", opt.threads, "Threads for CPU suites (default: all cores)")->type_name("N");
  run_cmd->add_option("--dir", opt.dir, "Directory for I/O suites (default: $TMPDIR or /tmp)")->type_name("DIR");
  run_cmd->add_option("--ranks", opt.ranks, "Processes for communication suites (default 2, at most 64)")
      ->type_name("N");
  run_cmd->add_option("-o,--output", output, "Also write the records to FILE (JSON Lines, atomically)")
      ->type_name("FILE");

  auto* compare_cmd =
      tool.add_subcommand("compare", "Compare two result files metric by metric; exit 1 on a real regression");
  std::string base_file, new_file;
  double fail_below = 0.95;
  compare_cmd->add_option("base", base_file, "Earlier results (JSON Lines; - for stdin)")
      ->required()
      ->type_name("BASE_FILE");
  compare_cmd->add_option("new", new_file, "Later results (JSON Lines)")->required()->type_name("NEW_FILE");
  compare_cmd
      ->add_option("--fail-below", fail_below, "A ratio under this (default 0.95) is a regression when it is real")
      ->type_name("RATIO");

  auto* report_cmd =
      tool.add_subcommand("report", "Draw result files as one self-contained HTML page, or print their table");
  std::vector<std::string> report_files;
  std::string html_out;
  report_cmd->add_option("file", report_files, "Results (JSON Lines; - for stdin)")->required()->type_name("FILE");
  report_cmd
      ->add_option("--html", html_out, "Write the HTML page to OUT (atomically; - for stdout) instead of the table")
      ->type_name("OUT");

  int rc = tool.run(argc, argv, [&]() -> int {
    if (tool.app().get_subcommands().empty()) usage_error("a subcommand is required (see --help)");
    const CommonOptions& common = tool.options();
    if (*list_cmd) {
      Printer out(std::cout, common.format(),
                  {{"SUITE", "suite"},
                   {"AVAILABLE", "available", [](const Json& v) { return v.get<bool>() ? "yes" : "no"; }},
                   {"DESCRIPTION", "description"},
                   {"REASON", "reason"}});
      for (Suite* s : suites()) {
        std::string why = s->unavailable();
        out.print(Json{{"schema", "rkit.bench.suite.v1"},
                       {"suite", s->name()},
                       {"available", why.empty()},
                       {"reason", why.empty() ? Json(nullptr) : Json(why)},
                       {"description", s->description()}});
      }
      out.finish();
      return 0;
    }
    if (*compare_cmd) {
      if (!(fail_below > 0 && fail_below <= 1)) usage_error("--fail-below must be in (0, 1]");
      if (base_file == "-" && new_file == "-") usage_error("only one of BASE and NEW can be - (stdin)");
      std::vector<Json> base = read_bench_records(base_file);  // base first: errors name it first
      std::vector<Json> fresh = read_bench_records(new_file);
      auto rows = compare_runs(base, fresh, fail_below);
      if (std::none_of(rows.begin(), rows.end(), [](const Comparison& c) { return c.ratio.has_value(); }))
        throw Error(Exit::DataErr, fmt::format("{} and {} have no measurement in common", base_file, new_file),
                    "compare runs of the same suites and sizes (--quick runs use other sizes)");
      Printer out(std::cout, common.format(),
                  {{"SUITE", "suite"},
                   {"METRIC", "metric"},
                   {"PARAMS", "params", params_cell},
                   {"BASE", "base_median", cell_number},
                   {"NEW", "new_median", cell_number},
                   {"UNIT", "unit"},
                   {"RATIO", "ratio", cell_number},
                   {"P", "p_value", cell_number},
                   {"VERDICT", "verdict"}});
      bool regressed = false;
      for (const auto& c : rows) {
        out.print(c.to_json());
        regressed |= c.verdict == "regression" || c.verdict == "wrong";
      }
      out.finish();
      return regressed ? 1 : 0;
    }
    if (*report_cmd) {
      if (std::count(report_files.begin(), report_files.end(), "-") > 1) usage_error("only one FILE can be - (stdin)");
      std::optional<AtomicFile> page = open_report(html_out, report_files);
      std::vector<ResultsFile> files;
      std::size_t records = 0;
      for (const auto& f : report_files) {
        records += files.emplace_back(ResultsFile{f, read_bench_records(f)}).records.size();
      }
      require_bench_records(report_files, records);
      if (html_out.empty()) {
        Printer out(std::cout, common.format(), result_columns());
        for (const auto& f : files)
          for (const auto& rec : f.records) out.print(rec);
        out.finish();
        return 0;
      }
      Report report = html_report(files);
      if (!page) {
        std::cout << report.html;
        return 0;
      }
      writing_report(html_out, [&] {
        page->write(report.html);
        page->commit();
      });
      return 0;
    }
    // run
    if (reps < 0 || (run_cmd->count("--warmup") && warmup < 0)) usage_error("--reps and --warmup must not be negative");
    opt.reps = reps > 0 ? reps : opt.quick ? 3 : 5;
    opt.warmup = warmup >= 0 ? warmup : 1;
    const unsigned cores = usable_cpus();
    if (opt.threads > 4 * cores)
      usage_error(fmt::format("--threads {} is more than 4x the {} usable cores", opt.threads, cores));
    if (opt.threads == 0) opt.threads = cores;
    // Only comm.gloo reads --ranks, and one rank moves nothing.
    if (opt.ranks < 2 || opt.ranks > 64) usage_error(fmt::format("--ranks {} is not from 2 to 64", opt.ranks));
    auto unavailable = [&](const Suite& s, const std::string& why) {
      if (!common.quiet) warn("rbench", s.name() + " is unavailable: " + why, std::cerr);
    };
    std::vector<Suite*> runnable;
    for (Suite* s : select_suites(names)) {
      std::string why = s->unavailable();
      if (why.empty())
        runnable.push_back(s);
      else
        unavailable(*s, why);
    }
    if (runnable.empty())
      throw Error(Exit::Unavailable, "none of the suites asked for can run here", "rbench list says why");
    for (Suite* s : runnable) s->check_options(opt);  // a bad option or variable before anything runs
    // A bad --dir is found before minutes of other suites, not after them.
    if (!opt.dir.empty()) {
      struct stat st {};
      if (::stat(opt.dir.c_str(), &st) != 0) throw system_error("--dir " + opt.dir, errno);
      if (!S_ISDIR(st.st_mode)) throw Error(Exit::NoInput, "--dir " + opt.dir + ": not a directory");
      if (::access(opt.dir.c_str(), W_OK) != 0) throw system_error("--dir " + opt.dir, errno);
    }
    std::optional<AtomicFile> file;
    if (!output.empty()) {
      struct stat st {};
      if (::stat(output.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
        throw Error(Exit::IoErr, "cannot write results to " + output + ": it is a directory");
      file.emplace(output);
    }
    Progress progress = [&](const std::string& line) {
      if (!common.quiet) std::cerr << "rbench: " << line << '\n';
    };
    Json host = host_fingerprint();
    Printer out(std::cout, common.format(), result_columns());
    bool all_correct = true;
    auto record = [&](const Suite& s, const Measurement& m) {
      Json rec = bench_record(s, m, opt, host);
      out.print(rec);
      if (file) file->write(to_json_line(rec) + "\n");
      if (!m.correct) warn("rbench", fmt::format("{} {} failed its check: {}", s.name(), m.metric, m.check), std::cerr);
      all_correct &= m.correct;
    };
    // A suite that finds it cannot run after all (too little GPU memory) is skipped as one
    // found unavailable up front; the others' results still count and -o still holds them.
    const std::size_t finished = run_suites(runnable, opt, progress, record, unavailable);
    if (finished == 0)
      throw Error(Exit::Unavailable, "none of the suites asked for can run here",
                  common.quiet ? "rbench run without -q says why" : "");
    out.finish();
    if (file) file->commit();
    return all_correct ? 0 : 1;
  });
  interrupts.reraise();
  return rc;
}
