#include "plan/machine_constants.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "backend/cpu/blas_library.h"
#include "comm/topology/cpu_threads.h"
#include "core/device_info.h"
#include "core/error.h"
#include "core/formatted.h"
#include "core/io/atomic_file.h"

namespace feast {
namespace {

constexpr const char* kFormat = "feast plan constants 1";

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  const std::regex model(R"(^(model name|Model|Hardware)\s*:\s*(.*\S))");
  std::smatch m;
  for (std::string line; std::getline(in, line);)
    if (std::regex_search(line, m, model)) return m[2];
  return "";
}

}  // namespace

std::string MachineIdentity::describe() const {
  std::string s = "host " + host + ", " + (cpu.empty() ? "an unnamed CPU" : cpu) + ", " + std::to_string(cores) +
                  (cores == 1 ? " core" : " cores");
  if (!gpu.empty()) s += ", " + gpu;
  return s;
}

MachineIdentity this_machine() {
  MachineIdentity id;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) id.host = host;
  id.cpu = cpu_model_name();
  id.cores = available_cores();
  id.gpu = cuda_device_count() > 0 ? cuda_device_name() : "";
  return id;
}

std::string default_constants_path() {
  if (const char* p = std::getenv("FEAST_PLAN_CONSTANTS"); p && *p) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/feast/plan-constants.json";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/feast/plan-constants.json";
  return ".feast-plan-constants.json";
}

std::optional<MachineConstants> read_machine_constants(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string fix = "; run `trainer plan CONFIG --gpus N --calibrate` to measure this machine again (it "
                          "rewrites the file), or delete it to plan with the defaults";
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw ConfigError(path + ": not a JSON object of plan constants" + fix);
  if (j.value("format", "") != kFormat)
    throw ConfigError(path + ": format \"" + j.value("format", "") + "\", not \"" + kFormat + "\"" + fix);
  try {
    MachineConstants c;
    const nlohmann::json& m = j.at("machine");
    c.machine = {m.at("host").get<std::string>(), m.at("cpu").get<std::string>(), m.at("gpu").get<std::string>(),
                 m.at("cores").get<int>()};
    c.device = j.at("device").get<std::string>();
    c.measured_at = j.at("measured_at").get<std::string>();
    c.measured_on = j.at("measured_on").get<std::string>();
    c.tflops = j.at("tflops_per_rank").get<double>();
    c.threads = j.at("threads_per_rank").get<int>();
    c.ranks_per_node = j.at("ranks_per_node").get<int>();
    c.cpu_kernels = j.value("cpu_kernels", "");  // absent in files calibrated before it was recorded
    if (!(c.tflops > 0)) throw ConfigError(path + ": tflops_per_rank must be > 0" + fix);
    if (const auto& l = j.at("link"); !l.is_null()) {
      c.link = Link{l.at("bandwidth_bytes_per_s").get<double>(), l.at("latency_s").get<double>()};
      if (!(c.link->bandwidth > 0) || c.link->latency < 0)
        throw ConfigError(path + ": link.bandwidth_bytes_per_s must be > 0 and link.latency_s >= 0" + fix);
    }
    return c;
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(path + ": " + e.what() + fix);
  }
}

void write_machine_constants(const std::string& path, const MachineConstants& c) {
  nlohmann::json j = {
      {"format", kFormat},
      {"machine", {{"host", c.machine.host}, {"cpu", c.machine.cpu}, {"gpu", c.machine.gpu}, {"cores", c.machine.cores}}},
      {"device", c.device},
      {"measured_at", c.measured_at},
      {"measured_on", c.measured_on},
      {"tflops_per_rank", c.tflops},
      {"threads_per_rank", c.threads},
      {"ranks_per_node", c.ranks_per_node},
      {"cpu_kernels", c.cpu_kernels},
      {"link", c.link ? nlohmann::json{{"bandwidth_bytes_per_s", c.link->bandwidth}, {"latency_s", c.link->latency}}
                      : nlohmann::json(nullptr)},
  };
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  write_file_atomically(path, j.dump(1) + "\n");
}

ConstantsChoice choose_machine_constants(const std::string& path, const std::string& device) {
  const std::string calibrate = "`trainer plan CONFIG --gpus N --calibrate` measures this machine's (about a minute)";
  std::optional<MachineConstants> c = read_machine_constants(path);
  if (!c) return {std::nullopt, "no figures measured on this machine (" + path + "); " + calibrate};
  const MachineIdentity here = this_machine();
  if (c->machine != here)
    return {std::nullopt, path + " was measured on another machine (" + c->machine.describe() + "; this is " +
                              here.describe() + "): stale; " + calibrate};
  if (c->device != device)
    return {std::nullopt, path + " holds this machine's " + c->device + " figures, and this run trains on " + device +
                              "; " + calibrate + " with training.device = \"" + device + "\""};
  if (device == "cpu") {
    const std::string kernels = cpu::cpu_kernels_id();
    if (c->cpu_kernels != kernels)
      return {std::nullopt, path + " was measured with other CPU kernels (" +
                                (c->cpu_kernels.empty() ? std::string("not recorded") : c->cpu_kernels) +
                                "; this run's: " + kernels + "): stale; " + calibrate};
  }
  std::string said = "this machine's figures from " + path + " (trainer plan --calibrate, " + c->measured_at +
                     ", on " + c->measured_on + "): " + formatted("%.4g", c->tflops) + " TFLOP/s per rank";
  if (c->link)
    said += ", links " + formatted("%.3g", c->link->bandwidth / 1e9) + " GB/s and " +
            formatted("%.3g", c->link->latency * 1e6) + " us";
  else
    said += "; links: the defaults (the calibration measured none)";
  return {c, said};
}

}  // namespace feast
