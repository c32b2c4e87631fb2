#include "backend/cpu/onednn_library.h"

#include <cstdlib>

#include "backend/cpu/shared_library.h"
#include "core/error.h"

#ifdef FEAST_ONEDNN_LIB
#include <oneapi/dnnl/dnnl.h>
#endif

namespace feast::cpu {

int onednn_isa_level(unsigned isa) {
  // dnnl_cpu_isa_t's values are nested bit sets: each ISA's bits hold every ISA it extends
  // (avx2 0x7 = avx 0x3 + 0x4; avx512_core 0x27, its vnni, bf16 and amx supersets).
  const auto has = [isa](unsigned bits) { return (isa & bits) == bits; };
  if (has(0x27) || has(0xf)) return 4;  // avx512_core and its extensions; avx512_mic (Xeon Phi)
  if (has(0x7)) return 3;               // avx2, avx2_vnni
  if (has(0x3)) return 2;
  return 1;
}

namespace {

// FEAST_CPU_GEMM: "" (the default: oneDNN where the build has it), "onednn" or "openblas".
std::string requested() {
  const char* choice = std::getenv("FEAST_CPU_GEMM");
  const std::string c = choice ? choice : "";
  if (c.empty() || c == "onednn" || c == "openblas") return c;
  throw Error("FEAST_CPU_GEMM=" + c +
              ": must be \"onednn\" or \"openblas\" (the library for the CPU's float32 products), or unset");
}

}  // namespace

#ifdef FEAST_ONEDNN_LIB
namespace {

OnednnLibrary load() {
  OnednnLibrary d;
  d.path = FEAST_ONEDNN_LIB;
  const std::string major = std::to_string(DNNL_VERSION_MAJOR);
  void* handle = open_shared_library(
      d.path, "oneDNN", "install Debian's libdnnl" + major + " (scripts/setup.sh), or set FEAST_CPU_GEMM=openblas");
  const auto resolve = [&](const char* name, auto& f) { resolve_symbol(handle, name, f, d.path, "not oneDNN " + major + "?"); };
  resolve("dnnl_sgemm", d.sgemm);
  const dnnl_version_t* (*version)() = nullptr;
  dnnl_cpu_isa_t (*effective_isa)() = nullptr;
  const char* (*isa_name)(dnnl_cpu_isa_t) = nullptr;
  resolve("dnnl_version", version);
  resolve("dnnl_get_effective_cpu_isa", effective_isa);
  resolve("dnnl_cpu_isa2str", isa_name);
  const dnnl_version_t* v = version();
  d.version = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
  const dnnl_cpu_isa_t isa = effective_isa();
  d.isa = isa_name(isa);
  if (d.isa.rfind("cpu_isa_", 0) == 0) d.isa = d.isa.substr(8);  // "cpu_isa_avx512_core_bf16"
  d.level = onednn_isa_level(unsigned(isa));
  return d;
}

}  // namespace

const OnednnLibrary* onednn_library() {
  static const bool use = requested() != "openblas";
  if (!use) return nullptr;
  static const OnednnLibrary library = load();
  return &library;
}
#else
const OnednnLibrary* onednn_library() {
  // Asked once, like the build with oneDNN does: this is on every float32 product's path.
  static const bool refused = requested() == "onednn";
  if (refused)
    throw Error("FEAST_CPU_GEMM=onednn: this feast was built without oneDNN; install Debian's libdnnl-dev "
                "(scripts/setup.sh) and rebuild, or unset FEAST_CPU_GEMM");
  return nullptr;
}
#endif

}  // namespace feast::cpu
