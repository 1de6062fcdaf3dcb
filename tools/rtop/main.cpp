// rtop: topology probe, link matrix, rank placement, live samples and a Prometheus exporter.
#include <iostream>

#include "render.hpp"
#include "rkit/cli.hpp"
#include "rkit/interrupt.hpp"
#include "rkit/placement.hpp"
#include "rkit/process.hpp"
#include "rkit/topology.hpp"
#include "rkit/units.hpp"
#include "sample.hpp"
#include "serve.hpp"

int main(int argc, char** argv) {
  using namespace rkit;
  using namespace rkit::rtop;
  Tool tool(
      "rtop",
      "Probe the machine's topology: CPUs, NUMA, caches, GPUs, NICs, links; place ranks; sample usage; serve metrics");
  CLI::App& app = tool.app();
  ProbeOptions probe_opt;
  std::string input, synthetic, gpus;
  app.add_option("--input", input,
                 "Read an hwloc XML topology (e.g. from lstopo --of xml; - for stdin) instead of this machine")
      ->type_name("FILE");
  app.add_option("--synthetic", synthetic, "Use a synthetic hwloc topology, e.g. \"pack:2 numa:2 core:8 pu:2\"")
      ->type_name("DESC")
      ->excludes("--input");
  app.add_option("--gpus", gpus, "Add GPUs from a JSON fixture (rkit.gpu_fixture.v1), for planning and tests")
      ->type_name("FILE");
  app.add_flag(
      "--no-nvml", [&](std::int64_t) { probe_opt.use_nvml = false; }, "Do not load NVML");

  auto* matrix = tool.add_subcommand("matrix", "Print the GPU/NIC link matrix with CPU and NUMA affinity");

  auto* place_cmd = tool.add_subcommand("place", "Print one rkit.placement.v1 record per rank");
  PlaceRequest req;
  int cpus_per_rank = 0;
  std::string policy;
  place_cmd->add_option("--ranks", req.ranks, "Number of ranks")->required()->type_name("N");
  place_cmd->add_option("--cpus-per-rank", cpus_per_rank, "Cores per rank (default: an equal share of all cores)")
      ->type_name("C");
  place_cmd->add_option("--gpus-per-rank", req.gpus_per_rank, "GPUs per rank (default 0)")->type_name("G");
  place_cmd
      ->add_option("--policy", policy, "pack fills NUMA nodes in order; spread deals ranks over them (default pack)")
      ->check(CLI::IsMember({"pack", "spread"}));

  auto* sample_cmd = tool.add_subcommand("sample", "Print rkit.sample.v1 records: CPU, memory, load and GPU usage");
  std::string interval = "1s";
  std::int64_t count = 0;
  sample_cmd->add_option("--interval", interval, "Time between samples, at most 1d (default 1s)")
      ->type_name("DURATION");
  sample_cmd->add_option("--count", count, "Number of samples (default: until interrupted)")->type_name("N");

  auto* serve_cmd = tool.add_subcommand(
      "serve", "Serve Prometheus metrics over HTTP: node, GPUs, the local rsub queue, cost per tenant");
  std::string listen = "127.0.0.1:9464", prices, window = "5s";
  bool no_queue = false;
  serve_cmd->add_option("--listen", listen, "Address to listen on (default 127.0.0.1:9464; port 0: any free port)")
      ->type_name("HOST:PORT");
  serve_cmd
      ->add_option("--prices", prices,
                   "Price sheet for the cost per tenant (default: rcost.prices, else rsub.auto.prices)")
      ->type_name("FILE");
  serve_cmd->add_option("--interval", window, "Window of the CPU utilisation gauge, at most 1d (default 5s)")
      ->type_name("DURATION");
  serve_cmd->add_flag("--no-queue", no_queue, "Do not read the rsub job store: no queue or cost metrics");

  return tool.run(argc, argv, [&]() -> int {
    const CommonOptions& opts = tool.options();
    if (*serve_cmd) {
      if (app.count("--input") || app.count("--synthetic") || app.count("--gpus"))
        usage_error("serve reads this machine: --input, --synthetic and --gpus do not apply");
      if (opts.format() != Format::Table) usage_error("serve writes Prometheus text: --json and --csv do not apply");
      if (no_queue && serve_cmd->count("--prices"))
        usage_error("--prices with --no-queue: the prices are for the queue's running jobs");
      if (serve_cmd->count("--prices") && prices.empty()) usage_error("--prices: empty file name");
      ServeOptions so;
      so.listen = parse_listen(listen);
      so.cpu_window_s = parse_sample_interval(window);
      so.use_nvml = probe_opt.use_nvml;
      so.queue = !no_queue;
      so.quiet = opts.quiet;
      if (so.queue) {
        so.rsub_program = rkit_program("rsub");
        so.rsub_config = tool.config().path;
        so.prices = serve_prices(tool.config(), serve_cmd->count("--prices") ? std::optional(prices) : std::nullopt);
      }
      InterruptGuard guard;  // SIGINT, SIGTERM, SIGHUP stop the server; then rtop ends of that signal
      {
        Exporter exporter(so);
        serve(exporter, so.listen, [](const std::string& url) {
          std::cout << url << std::endl;
          check_stdout();
        });
      }
      guard.reraise();
      return 0;
    }
    if (app.count("--input")) probe_opt.xml_path = input;
    if (app.count("--synthetic")) probe_opt.synthetic = synthetic;
    if (app.count("--gpus")) probe_opt.gpu_fixture = gpus;
    if (*sample_cmd) {
      if (probe_opt.xml_path || probe_opt.synthetic)
        usage_error("sample reads this machine: --input and --synthetic do not apply");
      if (count < 0) usage_error("--count must not be negative");
      Sampler sampler(probe_opt.use_nvml);
      Printer out(std::cout, opts.format(), sample_columns(), /*streaming=*/true);
      double every = parse_sample_interval(interval);
      for (std::int64_t i = 0; count == 0 || i < count; ++i) out.print(sampler.next(every));
      return 0;
    }

    Topology topo = probe(probe_opt);
    if (*place_cmd) {
      if (place_cmd->count("--cpus-per-rank")) req.cpus_per_rank = cpus_per_rank;
      req.policy = !policy.empty() ? *parse_policy(policy) : policy_from_config(tool.config());
      Printer out(std::cout, opts.format(), placement_columns());
      for (const auto& p : place(topo, req)) out.print(p.to_json());
      out.finish();
      return 0;
    }
    if (*matrix) {
      print_matrix(matrix_json(topo), opts.format(), std::cout);
      return 0;
    }
    if (opts.format() == Format::Csv)
      usage_error("the topology record has no CSV form: use --json, or --csv with matrix, place or sample");
    if (opts.format() == Format::Table)
      print_summary(topo, std::cout);
    else
      std::cout << to_json_line(topo.to_json()) << '\n';
    return 0;
  });
}
