// rckpt: fast, verifiable, seekable checkpoint archives.
#include <unistd.h>

#include <fmt/format.h>
#include <csignal>

#include <iostream>
#include <map>

#include "diff.hpp"
#include "gc.hpp"
#include "lineage.hpp"
#include "models.hpp"
#include "pack.hpp"
#include "render.hpp"
#include "rkit/ckpt/archive.hpp"
#include "rkit/ckpt/extract.hpp"
#include "rkit/cli.hpp"
#include "rkit/error.hpp"
#include "rkit/interrupt.hpp"
#include "rkit/units.hpp"

namespace {

// Prints one record: a human line for tables, else through the printer.
void print_one(rkit::Format format, const rkit::Json& record, const std::vector<rkit::Column>& columns,
               const std::string& human, std::ostream& out) {
  if (format == rkit::Format::Table) {
    out << human << '\n';
    return;
  }
  rkit::Printer p(out, format, columns);
  p.print(record);
  p.finish();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace rkit;
  using namespace rkit::rckpt;
  // A file-size limit (ulimit -f) must be a write error (74), not a kill.
  std::signal(SIGXFSZ, SIG_IGN);
  InterruptGuard interrupts;
  Tool tool("rckpt",
            "Pack checkpoints into fast, verifiable, seekable archives; unpack, inspect, compare and prune them");

  auto* pack_cmd = tool.add_subcommand("pack", "Pack a checkpoint directory into an archive");
  PackOptions pack;
  std::string frame_size;
  unsigned threads = 0;
  std::string base;
  pack_cmd->add_option("dir", pack.dir, "Checkpoint directory")->required()->type_name("DIR");
  pack_cmd->add_option("-o,--output", pack.output, "Archive to write (- for stdout)")->required()->type_name("FILE");
  pack_cmd->add_option("--threads", threads, "Compression threads (default: all cores)")->type_name("N");
  pack_cmd->add_option("--level", pack.level, "zstd level, 1 (fast) to 19 (default 1)")->type_name("L");
  pack_cmd->add_option("--frame-size", frame_size, "Input bytes per frame, 64K to 64M (default 8M)")->type_name("SIZE");
  pack_cmd->add_flag(
      "--no-shuffle", [&](std::int64_t) { pack.shuffle = false; },
      "Do not byte-shuffle tensor data before compression");
  pack_cmd->add_option("--base", base, "Reuse identical frames of this earlier archive (incremental)")
      ->type_name("FILE");
  pack_cmd->add_flag("-L,--dereference", pack.dereference,
                     "Store the files and directories symlinks point at, not the links (e.g. a Hugging Face snapshot)");
  std::string provenance;
  pack_cmd
      ->add_option("--provenance", provenance,
                   "Record where the checkpoint came from: a JSON object (run, step, inputs, parent), as rtrain writes")
      ->type_name("FILE");

  auto* unpack_cmd = tool.add_subcommand("unpack", "Unpack an archive into a directory, checking every hash");
  UnpackOptions unpack;
  unpack_cmd->add_option("archive", unpack.archive, "Archive to read")->required()->type_name("FILE");
  unpack_cmd->add_option("-C,--directory", unpack.dir, "Directory to unpack into (created if missing)")
      ->required()
      ->type_name("DIR");
  unpack_cmd->add_option("--only", unpack.only, "Unpack only these files or directories (repeatable)")
      ->type_name("PATH");
  unpack_cmd->add_option("--threads", threads, "Decompression threads (default: all cores)")->type_name("N");

  auto* ls_cmd = tool.add_subcommand("ls", "List the files (or tensors) of an archive");
  std::string archive;
  bool list_tensors = false;
  ls_cmd->add_option("archive", archive, "Archive to read")->required()->type_name("FILE");
  ls_cmd->add_flag("--tensors", list_tensors, "List tensors of safetensors files instead of files");

  auto* verify_cmd = tool.add_subcommand("verify", "Check every hash; exit 1 naming each damaged frame");
  std::string model_ref, project;
  auto* verify_archive = verify_cmd->add_option("archive", archive, "Archive to check")->type_name("FILE");
  verify_cmd->add_option("--threads", threads, "Decompression threads (default: all cores)")->type_name("N");
  verify_cmd
      ->add_option("--model", model_ref,
                   "Check a registered version instead, and that its archive is the one registered (digest)")
      ->type_name("NAME[@VERSION]")
      ->excludes(verify_archive);
  auto add_project = [&](CLI::App* cmd) {
    cmd->add_option("--project", project,
                    "The run store of this project folder (default $RKIT_PROJECT_DIR, else "
                    "the state directory's)")
        ->type_name("DIR");
  };
  add_project(verify_cmd);

  auto* log_cmd = tool.add_subcommand("log", "Walk a checkpoint back through its resumes and fine-tunes to its data");
  log_cmd->add_option("archive", archive, "Archive to start from")->required()->type_name("FILE");

  auto* model_cmd = tool.add_subcommand("model", "The model registry: named, versioned archives with a stage");
  model_cmd->require_subcommand(1);
  ModelCommand model;
  auto* model_register = model_cmd->add_subcommand("register", "Register an archive as the next version of NAME");
  model_register->add_option("name", model.name, "Model name: letters, digits and _ . -")
      ->required()
      ->type_name("NAME");
  model_register->add_option("archive", model.archive, "The archive (.rkpt)")->required()->type_name("FILE");
  auto* model_ls = model_cmd->add_subcommand("ls", "List the versions of every model, or of NAME");
  model_ls->add_option("name", model.name, "Only this model")->type_name("NAME");
  auto* model_show = model_cmd->add_subcommand("show", "One version with its history (default: the latest)");
  model_show->add_option("ref", model.ref, "NAME, NAME@VERSION, NAME@latest or NAME@STAGE")
      ->required()
      ->type_name("NAME[@VERSION]");
  auto* model_promote = model_cmd->add_subcommand(
      "promote", "Move a version to a stage; a new production version archives the one before");
  model_promote->add_option("ref", model.ref, "NAME@VERSION")->required()->type_name("NAME@VERSION");
  model_promote->add_option("stage", model.stage, "candidate, production or archived")
      ->required()
      ->check(CLI::IsMember({"candidate", "production", "archived"}))
      ->type_name("STAGE");
  for (CLI::App* c : {model_register, model_ls, model_show, model_promote}) add_project(c);

  auto* cat_cmd = tool.add_subcommand("cat", "Write one file's or tensor's raw bytes to stdout");
  std::string spec;
  cat_cmd->add_option("archive", archive, "Archive to read")->required()->type_name("FILE");
  cat_cmd->add_option("entry", spec, "PATH, or PATH:TENSOR for one tensor of a safetensors file")
      ->required()
      ->type_name("PATH[:TENSOR]");

  auto* diff_cmd = tool.add_subcommand("diff", "Compare two archives tensor by tensor; exit 1 when they differ");
  std::string other;
  bool diff_all = false;
  diff_cmd->add_option("a", archive, "Old archive")->required()->type_name("A");
  diff_cmd->add_option("b", other, "New archive")->required()->type_name("B");
  diff_cmd->add_flag("--all", diff_all, "Also list tensors that are the same");

  auto* gc_cmd = tool.add_subcommand("gc", "Remove old archives of a directory, never one a kept archive needs");
  std::string gc_dir;
  std::size_t keep_last = 0;
  bool dry_run = false;
  gc_cmd->add_option("dir", gc_dir, "Directory holding .rkpt archives")->required()->type_name("DIR");
  gc_cmd->add_option("--keep-last", keep_last, "Keep the newest N archives (and their bases)")
      ->required()
      ->type_name("N");
  gc_cmd->add_flag("-n,--dry-run", dry_run, "Print what would be removed; remove nothing");

  int rc = tool.run(argc, argv, [&]() -> int {
    if (tool.app().get_subcommands().empty()) usage_error("a subcommand is required (see --help)");
    const CommonOptions& opts = tool.options();
    Format format = opts.format();
    bool progress = !opts.quiet;
    if (*pack_cmd) {
      if (pack.output == "-" && format != Format::Table)
        usage_error("--json and --csv need -o FILE: stdout holds the archive");
      if (!provenance.empty()) pack.provenance = read_provenance(provenance);
      if (!frame_size.empty()) pack.frame_bytes = parse_size(frame_size);
      if (pack_cmd->count("--base")) pack.base = base;
      pack.threads = threads;
      pack.progress = progress;
      // Shown even with -q: each warning says what the archive leaves out.
      pack.warn = [](const std::string& w) { warn("rckpt", w, std::cerr); };
      PackResult r = pack_checkpoint(pack);
      if (!opts.quiet || format != Format::Table)
        print_one(format, r.to_json(), pack_columns(), pack_line(r), pack.output == "-" ? std::cerr : std::cout);
      return 0;
    }
    if (*unpack_cmd) {
      unpack.threads = threads;
      unpack.progress = progress;
      UnpackResult r = unpack_checkpoint(unpack);
      if (!opts.quiet || format != Format::Table)
        print_one(format, r.to_json(), unpack_columns(), unpack_line(r), std::cout);
      return 0;
    }
    if (*verify_cmd) {
      if (archive.empty() && model_ref.empty()) usage_error("verify needs an ARCHIVE or --model NAME[@VERSION]");
      std::optional<std::string> registered;
      if (!model_ref.empty()) {
        const ModelRef ref = parse_model_ref(model_ref);
        runs::Store store(runs::store_path(project), /*create=*/false);
        const runs::ModelVersion v = find_model(store, ref);
        archive = v.archive;
        registered = v.archive_xxh3;
      }
      VerifyReport r = verify_checkpoint(archive, threads, progress);
      if (registered) check_registered(archive, *registered, r);
      if (format == Format::Table)
        for (const auto& p : r.problems) std::cout << "corrupt: " << p.message << '\n';
      if (!opts.quiet || format != Format::Table)
        print_one(format, r.to_json(), verify_columns(), verify_line(r), std::cout);
      return r.ok() ? 0 : 1;
    }
    if (*log_cmd) {
      Lineage l = lineage(archive);
      Printer out(std::cout, format, log_columns());
      for (const Json& rec : l.records) out.print(rec);
      out.finish();
      if (!l.complete()) warn("rckpt", "lineage broken: " + l.broken, std::cerr);
      return l.complete() ? 0 : 1;
    }
    if (*model_cmd) {
      model.project = project;
      if (*model_register) return model_register_main(model, format, std::cout);
      if (*model_ls) return model_ls_main(model, format, std::cout);
      if (*model_show) return model_show_main(model, format, std::cout);
      return model_promote_main(model, format, std::cout);
    }
    if (*cat_cmd) {
      cat_entry(archive, spec, 0, STDOUT_FILENO);
      return 0;
    }
    if (*ls_cmd) {
      Archive a = Archive::open(archive);
      const Manifest& m = a.manifest();
      Printer out(std::cout, format, list_tensors ? tensor_columns() : ls_columns());
      for (const auto& f : m.files) {
        if (!list_tensors)
          out.print(file_json(archive, m, f));
        else
          for (const auto& t : f.tensors) out.print(tensor_json(archive, f, t));
      }
      out.finish();
      return 0;
    }
    if (*diff_cmd) {
      DiffReport d = diff_checkpoints(archive, other);
      Printer out(std::cout, format, diff_columns());
      std::map<std::string, int> counts;
      for (const auto& row : d.rows) {
        ++counts[row.status];
        if (diff_all || row.status != "same") out.print(row.to_json());
      }
      out.finish();
      if (format == Format::Table && !opts.quiet)
        std::cout << fmt::format("{} compared: {} same, {} changed, {} added, {} removed\n", d.rows.size(),
                                 counts["same"], counts["changed"], counts["added"], counts["removed"]);
      return d.identical() ? 0 : 1;
    }
    Printer out(std::cout, format, gc_columns());
    for (const auto& a : gc_checkpoints(gc_dir, keep_last, dry_run)) out.print(a.to_json());
    out.finish();
    return 0;
  });
  interrupts.reraise();
  return rc;
}
