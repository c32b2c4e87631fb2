// `trainer check-backend`: runs the table of backend op cases (backend/check/op_cases.h) on the
// tested backend against the float64 reference, prints one row per compared output as it
// arrives (a run that crashes still shows how far it got), a summary line, and exits 0 when all
// pass, 1 on any mismatch and 2 when --device cuda finds no GPU. The harness and the cases are
// backend/check/'s; this file is the command line and the table's printing.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/check/checked_ops.h"
#include "backend/check/run_checks.h"
#include "cli/verb.h"
#include "core/device_info.h"
#include "core/error.h"
#include "core/log.h"

namespace feast {
namespace {

struct CheckOptions {
  std::string device = "cuda";
  std::vector<std::string> dtypes = {"fp32", "bf16"};
  uint64_t seed = 1;
  bool verbose = false;
  std::string inject_error;  // an op of check::checked_ops(), or empty
};

void print_header() {
  char line[256];
  std::snprintf(line, sizeof line, "%-42s %-46s %-5s %11s %11s %8s  %s", "op output", "shape", "dtype", "max rel err",
                "NMSE", "tol", "result");
  log::info(line);
}

// One row of the table, and with --verbose or on failure the worst element.
void print_row(const check::CheckRow& row, bool verbose) {
  char line[512];
  const std::string what = row.op + " " + row.output;
  if (!row.error.empty()) {
    std::snprintf(line, sizeof line, "%-42s %-46s %-5s %s  FAIL", what.c_str(), row.shape.c_str(), row.dtype.c_str(),
                  row.error.c_str());
  } else {
    std::snprintf(line, sizeof line, "%-42s %-46s %-5s %11.3e %11.3e %8.0e  %s", what.c_str(), row.shape.c_str(),
                  row.dtype.c_str(), row.max_rel_err, row.nmse, row.tolerance, row.ok ? "ok" : "FAIL");
  }
  log::info(line);
  if (row.error.empty() && row.max_rel_err > 0 && (verbose || !row.ok)) {
    std::snprintf(line, sizeof line, "    worst: element %zu is %.9g, reference %.9g", row.worst, row.test_value,
                  row.ref_value);
    log::info(line);
  }
}

CheckOptions options_of(const Args& args) {
  CheckOptions o;
  o.device = args.text("--device", "cuda");
  const std::string dtype = args.text("--dtype", "both");
  o.seed = uint64_t(args.integer("--seed", 1));
  o.verbose = args.flag("--verbose");
  o.inject_error = args.text("--inject-error");
  if (!o.inject_error.empty() && !check::is_checked_op(o.inject_error))
    throw ConfigError("check-backend: --inject-error: no op named '" + o.inject_error + "'");
  if (o.device == "cpu") {
    if (dtype == "bf16")
      throw ConfigError("check-backend: --dtype bf16 needs --device cuda: the CPU backend computes in fp32 only");
    o.dtypes = {"fp32"};
  } else if (dtype != "both") {
    o.dtypes = {dtype};
  }
  return o;
}

int run_check_backend(const Args& args, const VerbContext&) {
  const CheckOptions options = options_of(args);
  if (options.device == "cuda" && (!cuda_backend_built() || cuda_device_count() == 0)) {
    std::fprintf(stderr, "check-backend: did not run: no CUDA device is available (%s)\n",
                 cuda_backend_built() ? "the driver reports no GPU; check nvidia-smi and CUDA_VISIBLE_DEVICES"
                                      : "this trainer was built without the CUDA backend");
    return 2;
  }

  std::string dtypes;
  for (const std::string& d : options.dtypes) dtypes += (dtypes.empty() ? "" : " and ") + d;
  log::info("check-backend: " + options.device + " in " + dtypes + " against the float64 reference, seed " +
            std::to_string(options.seed));
  log::info("tolerance on max |test - ref| / max |ref| per output: fp32 1e-04, bf16 2e-02 (adamw_step, sum, "
            "sum_of_squares, sums_of_squares, cast, copy and zero compute in float32 or are exact: held to "
            "fp32's in every run)");
  print_header();
  std::vector<check::CheckRow> rows;
  std::string tested_name;
  for (const std::string& dtype : options.dtypes) {
    const std::unique_ptr<Backend> tested = make_backend(options.device, dtype);
    tested_name = tested->name();
    check::run_checks(*tested, {options.seed, options.inject_error}, [&](const check::CheckRow& row) {
      print_row(row, options.verbose);
      rows.push_back(row);
    });
  }

  std::vector<std::string> failed;
  for (const check::CheckRow& r : rows)
    if (!r.ok) failed.push_back(r.op + (r.output.empty() ? "" : " " + r.output) + " (" + r.dtype + ")");
  const size_t ops = check::checked_ops().size();
  const std::string counted = std::to_string(rows.size()) + " comparisons of " + std::to_string(ops) + " ops on " +
                              tested_name + " (" + dtypes + ")";
  if (failed.empty()) {
    log::info("check-backend: all " + counted + " within tolerance");
    return 0;
  }
  std::string list;
  for (size_t i = 0; i < failed.size() && i < 10; ++i) list += (i ? ", " : "") + failed[i];
  if (failed.size() > 10) list += ", ...";
  log::info("check-backend: FAIL: " + std::to_string(failed.size()) + " of " + counted + " out of tolerance: " + list);
  return 1;
}

}  // namespace

Verb check_backend_verb() {
  Verb v;
  v.name = "check-backend";
  v.summary = "every backend op on the device against the float64 reference";
  v.single_process = true;
  CommandLine& cl = v.command_line;
  cl.verb = "check-backend";
  cl.synopsis = "trainer check-backend [--device cuda|cpu] [--dtype fp32|bf16|both] [--seed N] [--verbose]";
  cl.description =
      "Runs every op of the compute backend, forward and backward, on odd shapes on the device and in the\n"
      "float64 reference from identical random inputs, and compares every output: the largest |test - ref|\n"
      "relative to the largest |ref| of the tensor (tolerance fp32 1e-4, bf16 2e-2) and the NMSE. Prints\n"
      "one row per output and a summary; exits 0 when all pass, 1 on any mismatch, and 2 when --device\n"
      "cuda finds no CUDA device (nothing was checked).";
  cl.options = {
      {"--device", ValueKind::kText, "cuda|cpu", "the backend to test (default cuda; cpu: the CPU backend's own fp32 error)",
       {"cuda", "cpu"}},
      {"--dtype", ValueKind::kText, "fp32|bf16|both", "its compute dtype (default both; the CPU backend computes in fp32 only)",
       {"fp32", "bf16", "both"}},
      {"--seed", ValueKind::kInteger, "N", "the random inputs (default 1)", {}, 0, 9.007199254740992e15},
      {"--verbose", ValueKind::kFlag, "", "also print each output's worst element"},
      {"--inject-error", ValueKind::kText, "OP", "perturb OP's first output on the tested side (the harness's own test)"},
  };
  v.run = run_check_backend;
  return v;
}

}  // namespace feast
