// File: rckpt/models.hpp
//
// rckpt model: the model registry's commands (register, ls, show, promote) over the run
// store's registry (rkit/runs.hpp), and rckpt verify --model: a registered version's
// archive checked frame by frame and against the digest it was registered with.
//
//   ModelCommand m{.name = "alpha", .archive = "run/step-1000.rkpt"};
//   model_register_main(m, Format::Table, std::cout);   // "alpha v3 candidate ..."
#pragma once

#include <ostream>
#include <string>

#include "rkit/ckpt/extract.hpp"
#include "rkit/printer.hpp"
#include "rkit/runs.hpp"

namespace rkit::rckpt {

struct ModelCommand {
  std::string name, archive, ref, stage, project;
};

struct ModelRef {
  std::string name;
  std::string version = "latest";  // a number, latest, or a stage
};
// "alpha", "alpha@3", "alpha@production"; Error(Usage) for an empty part.
ModelRef parse_model_ref(const std::string& text);
// The version named; Error(NoInput) "no model alpha@3 in run store PATH".
runs::ModelVersion find_model(runs::Store& store, const ModelRef& ref);
// Adds a problem to `report` when the archive's digest is not `registered`.
void check_registered(const std::string& archive, const std::string& registered, VerifyReport& report);

int model_register_main(const ModelCommand& m, Format format, std::ostream& out);
int model_ls_main(const ModelCommand& m, Format format, std::ostream& out);
int model_show_main(const ModelCommand& m, Format format, std::ostream& out);
int model_promote_main(const ModelCommand& m, Format format, std::ostream& out);

}  // namespace rkit::rckpt
