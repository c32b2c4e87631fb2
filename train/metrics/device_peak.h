// The peak a rank's device can reach, which MFU divides by: a configured figure
// (logging.peak_tflops), a known GPU's datasheet figure, or on the CPU the FMA peak of the cores
// the rank's threads may use (core/cpu_peak.h), or a GEMM rate the ranks measure together at
// start when that is higher (the clock read was not the highest) or no FMA peak is known.
#pragma once

#include <optional>
#include <string>

#include "comm/communicator.h"
#include "backend/backend.h"

namespace feast {

struct DevicePeak {
  double tflops_per_rank = 0;  // the job's peak is this times the world size
  std::string kind;            // in a progress line: "configured peak", "datasheet peak", "FMA peak", "measured sgemm"
  std::string source;          // in full: "datasheet: H100 SXM", "FMA peak: 2 cores x 2.30 GHz x 64 ..."
};

// GFLOP/s of the best of a few n^3 float32 GEMMs on this rank's threads (the first is warm-up).
// Throws feast::Error if the product is wrong.
double measure_sgemm_gflops(int n = 1536, int repeats = 4);

// GFLOP/s of the best of a few n^3 products through `backend`'s matmul in its compute dtype on
// random operands (zeros would run faster than real data), timed from the host after waiting for
// the device. For a GPU backend: the ceiling its matrix products can reach.
double measure_backend_gemm_gflops(Backend& backend, int n, int repeats = 5);

// The dense bf16 tensor-core peak (TFLOP/s) of a GPU whose name (as CUDA reports it) contains a
// known model ("H100 SXM", "A100", ...), and the name it matched; nullopt for an unknown one.
std::optional<std::pair<double, std::string>> known_gpu_peak_tflops(const std::string& device_name);

// The FMA peak of `cores` cores of this CPU in TFLOP/s, with its derivation in words; nothing
// when the CPU's vector unit or clock is unknown.
std::optional<std::pair<double, std::string>> cpu_fma_peak_tflops(double cores);

// Collective over world: configured_tflops when > 0; a GPU's datasheet peak; on the CPU (device
// "cpu") the larger of the FMA peak of the cores a rank may use (its threads, or its share of
// the host's cores when `sharing_ranks` ranks share them) and the sgemm rate measured on every
// rank at once (the best of a few rounds, each the work of all ranks over the time the last one
// took, per rank, so ranks sharing cores count those cores once).
DevicePeak device_peak(Communicator& world, const std::string& device, double configured_tflops,
                       int sharing_ranks = 1);

}  // namespace feast
