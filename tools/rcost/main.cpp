// rcost: who used what, what it cost, and what sat idle.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>

#include "output.hpp"
#include "perf.hpp"
#include "records.hpp"
#include "report.hpp"
#include "rkit/cli.hpp"
#include "rkit/cpus.hpp"
#include "rkit/prices.hpp"
#include "rkit/runs.hpp"

namespace {

using namespace rkit;
using namespace rkit::rcost;

double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// --prices, else rcost.prices, else rsub.auto.prices (the sheet rsub's placement reads).
constexpr const char* kNoSheet = "give --prices FILE or set rcost.prices in the configuration (examples/prices.toml)";

// The price sheet of --prices or the configuration. Without one: Error(Usage) when
// `needed` names what needs it, else a sheet that is not priced.
PriceSheet prices_from(const std::string& flag, Tool& tool, const char* needed = "") {
  std::string path = flag;
  if (path.empty()) path = configured_price_sheet(tool.config()).value_or("");
  if (!path.empty()) return load_prices(path);
  if (*needed) usage_error(fmt::format("no price sheet{}: {}", needed, kNoSheet));
  PriceSheet none;
  none.priced = false;
  return none;
}

std::map<std::string, double> budgets_from(const Config& c) {
  std::map<std::string, double> out;
  const auto* t = c.get_table("rcost.budgets");
  if (!t) return out;
  for (const auto& [tenant, v] : *t) {
    const std::string key = "rcost.budgets." + std::string(tenant.str());
    const auto amount = v.value<double>();
    if (!v.is_number() || !amount || *amount < 0)
      throw Error(Exit::Config, fmt::format("{}: {} must be a monthly amount, 0 or more", c.where(key), key));
    out[std::string(tenant.str())] = *amount;
  }
  return out;
}

// rsub.users: user → tenant, as rsub charges them.
std::map<std::string, std::string> users_from(const Config& c) { return c.get_string_map("rsub.users"); }

// No file arguments: standard input, unless it is a terminal.
std::vector<std::string> inputs_or_stdin(std::vector<std::string> files) {
  if (files.empty()) {
    if (::isatty(STDIN_FILENO))
      usage_error("no input: give files (or - for standard input), e.g. rsub ls --all --json | rcost report -");
    files.push_back("-");
  }
  return files;
}

void report_bad(const Dataset& data, bool quiet) {
  if (data.bad_count == 0 || quiet) return;
  constexpr std::size_t kShown = 10;
  for (std::size_t i = 0; i < std::min(kShown, data.bad.size()); ++i)
    warn("rcost", fmt::format("{}: {}", data.bad[i].where, data.bad[i].why), std::cerr);
  warn("rcost",
       fmt::format("{} bad record{} skipped{} (--strict makes them fatal)", data.bad_count,
                   data.bad_count == 1 ? "" : "s",
                   data.bad_count > kShown ? fmt::format(", the first {} shown", kShown) : ""),
       std::cerr);
}

}  // namespace

int main(int argc, char** argv) {
  Tool tool("rcost",
            "Cost reports: GPU- and core-hours and money per tenant, waste, idle capacity, queue waits, budgets");
  CLI::App& app = tool.app();
  std::string prices_path;
  app.add_option("--prices", prices_path,
                 "The price sheet (TOML; default: rcost.prices, else rsub.auto.prices in the configuration)")
      ->type_name("FILE");

  auto* report_cmd =
      tool.add_subcommand("report", "Usage and cost grouped by tenant, user, day, ... from job records and samples");
  std::vector<std::string> files;
  std::string by = "tenant", since, until, format, share = "weighted", slurm_backend = "slurm",
              capacity_backend = "local";
  bool fail_over_budget = false, strict = false;
  unsigned threads = 0;
  report_cmd->add_option("files", files, "rkit.job.v1 and rkit.sample.v1 records, or sacct -P text (- for stdin)")
      ->type_name("FILE");
  report_cmd
      ->add_option("--by", by,
                   "Group by these keys, comma-separated: tenant, user, project, workflow, rule, experiment, gpu_type, "
                   "backend, node, partition, state, job, day, month (default tenant)")
      ->type_name("KEYS");
  report_cmd
      ->add_option("--since", since,
                   "Start of the window: 2026-11-01, 2026-11-01T08:00Z, @UNIX_SECONDS, today, or 7d ago (default: the "
                   "first record)")
      ->type_name("TIME");
  std::string project;
  report_cmd
      ->add_option("--project", project,
                   "--by experiment: the run store of this project folder (default $RKIT_PROJECT_DIR, else the state "
                   "directory's)")
      ->type_name("DIR");
  report_cmd->add_option("--until", until, "End of the window, same forms (default now); running jobs count up to it")
      ->type_name("TIME");
  report_cmd
      ->add_option("--format", format,
                   "table, json, csv, focus (FinOps FOCUS CSV) or html (default table; --json and --csv also work)")
      ->check(CLI::IsMember({"table", "json", "csv", "focus", "html"}))
      ->type_name("FORMAT");
  report_cmd
      ->add_option(
          "--share-idle", share,
          "Share unallocated capacity's cost by cost (weighted), evenly (even), or show it as an __idle__ row (none)")
      ->check(CLI::IsMember({"weighted", "even", "none"}))
      ->type_name("HOW");
  report_cmd->add_flag("--fail-over-budget", fail_over_budget,
                       "Exit 1 when a tenant's cost in the window is over its prorated monthly budget");
  report_cmd->add_flag("--strict", strict,
                       "Stop at the first bad record (exit 65) instead of counting and skipping it");
  report_cmd
      ->add_option("--slurm-backend", slurm_backend, "The price sheet backend that sacct jobs ran on (default slurm)")
      ->type_name("NAME");
  report_cmd
      ->add_option(
          "--capacity-backend", capacity_backend,
          "The price sheet backend that prices a sampled host none of whose jobs is in the input (default local)")
      ->type_name("NAME");
  report_cmd->add_option("--threads", threads, "Threads that parse and sum (default: all usable cores)")
      ->type_name("N");

  auto* perf_cmd = tool.add_subcommand(
      "perf", "Price/performance of benchmark results (rkit.bench.v1) and training runs (rkit.train.event.v1)");
  std::vector<std::string> perf_files;
  std::string perf_backend = "local";
  perf_cmd->add_option("files", perf_files, "rbench and rtrain records (- for stdin)")->type_name("FILE");
  perf_cmd
      ->add_option("--backend", perf_backend,
                   "The price sheet backend to price the benchmarked machine at (default local)")
      ->type_name("NAME");

  tool.add_subcommand("prices", "Show every rate of the price sheet, with how derived rates are computed");

  return tool.run(argc, argv, [&]() -> int {
    const CommonOptions& common = tool.options();
    if (*report_cmd) {
      if (const char* flag = common.json  ? "json"
                             : common.csv ? "csv"
                                          : nullptr;
          flag && !format.empty() && format != flag)
        usage_error(fmt::format("--{} and --format {} exclude each other", flag, format));
      const double now = unix_now();
      ReportOptions ro;
      ro.keys = parse_keys(by);
      ro.until = until.empty() ? now : parse_time_arg(until, now, "--until");
      if (!since.empty()) ro.since = parse_time_arg(since, now, "--since");
      if (known(ro.since) && ro.since >= ro.until) usage_error("--since must be before --until");
      ro.share_idle = share == "even" ? ShareIdle::Even : share == "none" ? ShareIdle::None : ShareIdle::Weighted;
      ro.budgets = budgets_from(tool.config());
      ro.capacity_backend = capacity_backend;
      if (fail_over_budget && (format == "focus" || format == "html"))
        usage_error("--fail-over-budget works with the table, json and csv formats");
      ro.threads = threads ? threads : std::max(1u, usable_cpus());
      const char* needs_money = format == "focus"  ? " for --format focus (FOCUS rows are billed costs)"
                                : format == "html" ? " for --format html"
                                : fail_over_budget ? " for --fail-over-budget"
                                                   : "";
      const PriceSheet sheet = prices_from(prices_path, tool, needs_money);
      if (!sheet.priced) {
        ro.budgets.clear();  // budgets are money
        if (!common.quiet)
          warn("rcost", fmt::format("no price sheet: hours only, money left out ({})", kNoSheet), std::cerr);
      }
      ro.prices = &sheet;
      ReadOptions rd;
      rd.threads = ro.threads;
      rd.slurm_backend = slurm_backend;
      rd.tenant_of_user = users_from(tool.config());
      rd.strict = strict;
      // Keep only what the report shows (FOCUS rows show it all).
      auto keyed = [&](Key k) {
        return format == "focus" || std::find(ro.keys.begin(), ro.keys.end(), k) != ro.keys.end();
      };
      rd.ids = keyed(Key::Job);
      rd.users = keyed(Key::User);
      rd.projects = keyed(Key::Project);
      rd.workflows = keyed(Key::Workflow) || keyed(Key::Rule);
      rd.states = keyed(Key::State);
      // By experiment: which run each job was, from the run store (not made when missing).
      std::unordered_map<std::string, std::string> experiments;
      if (std::find(ro.keys.begin(), ro.keys.end(), Key::Experiment) != ro.keys.end()) {
        try {
          experiments = runs::Store(runs::store_path(project), /*create=*/false).job_experiments();
        } catch (const Error& e) {
          if (e.code() != Exit::NoInput) throw;
          warn("rcost", fmt::format("{}: no job has an experiment", e.what()), std::cerr);
        }
        rd.experiments = &experiments;
      }
      OutputFormat fmt = common.json ? OutputFormat::Json : common.csv ? OutputFormat::Csv : OutputFormat::Table;
      if (format == "json")
        fmt = OutputFormat::Json;
      else if (format == "csv")
        fmt = OutputFormat::Csv;
      else if (format == "focus")
        fmt = OutputFormat::Focus;
      else if (format == "html")
        fmt = OutputFormat::Html;
      else if (format == "table")
        fmt = OutputFormat::Table;
      const Inputs inputs(inputs_or_stdin(files));
      if (fmt == OutputFormat::Focus || fmt == OutputFormat::Html) {
        // One row per job (FOCUS), several reports (HTML): these keep the records.
        const Dataset data = read_inputs(inputs, rd);
        report_bad(data, common.quiet);
        if (fmt == OutputFormat::Focus)
          write_focus(std::cout, data, ro);
        else
          write_html(std::cout, data, ro, ReadStats{data.lines, data.bad_count, data.ignored});
        return 0;
      }
      Dataset totals;
      const Report r = stream_report(inputs, rd, ro, totals);
      report_bad(totals, common.quiet);
      const ReadStats stats{totals.lines, totals.bad_count, totals.ignored};
      write_report(std::cout, fmt, r, stats, ro.share_idle);
      if (fail_over_budget) {
        int over = 0;
        for (const TenantBudget& b : r.budgets)
          if (b.cost > b.budget) {
            ++over;
            std::cerr << fmt::format("rcost: tenant {} is over budget: {} of {} {}\n", b.tenant, money(b.cost),
                                     money(b.budget), r.currency);
          }
        if (over) return 1;
      }
      return 0;
    }
    if (*perf_cmd) {
      const PriceSheet sheet = prices_from(prices_path, tool, " for perf (it prices the work)");
      return run_perf(inputs_or_stdin(perf_files), sheet, perf_backend, common.format(), std::cout);
    }
    const PriceSheet sheet = prices_from(prices_path, tool, " to show");
    Printer out(std::cout, common.format(),
                {{"BACKEND", "backend"},
                 {"RESOURCE", "resource"},
                 {"GPU", "gpu"},
                 {"MARKET", "market"},
                 {"LIST", "list", [](const Json& v) { return fmt::format("{:.4f}", v.get<double>()); }},
                 {"BILLED", "effective", [](const Json& v) { return fmt::format("{:.4f}", v.get<double>()); }},
                 {"PER", "unit"},
                 {"HOW", "derivation"}});
    for (const PriceLine& p : price_lines(sheet))
      out.print(Json{{"schema", "rkit.cost.price.v1"},
                     {"backend", p.backend},
                     {"resource", p.resource},
                     {"gpu", p.gpu},
                     {"market", p.market},
                     {"unit", p.unit},
                     {"list", p.list},
                     {"effective", p.effective},
                     {"currency", sheet.currency},
                     {"derivation", p.derivation}});
    out.finish();
    return 0;
  });
}
