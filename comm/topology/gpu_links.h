// How two GPUs of one machine are connected, as NVML reports it (nvidia-smi topo -m's terms),
// for the start-up report and the warning when a tensor-parallel group sits on a slow link.
// NVML is loaded with dlopen, so the binary starts where no driver is installed; without it
// every link is kUnknown and the reason says why.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace feast {

enum class GpuLink {
  kSame,          // the same GPU (ranks sharing it)
  kNvlink,        // NVLink, directly or through NVSwitch
  kPcieSwitch,    // PCIe through one switch (PIX)
  kPcieSwitches,  // PCIe through several switches, no host bridge (PXB)
  kHostBridge,    // PCIe through the CPU's host bridge (PHB)
  kNumaNode,      // across host bridges within one CPU socket (NODE)
  kCrossSocket,   // across CPU sockets (SYS)
  kUnknown,
};

// nvidia-smi topo -m's code: X, NV, PIX, PXB, PHB, NODE, SYS, or ? for unknown.
const char* gpu_link_code(GpuLink link);
// The code's meaning, for the report's legend.
const char* gpu_link_meaning(GpuLink link);
// Tensor parallelism all-reduces activations on every layer: only NVLink (or one shared GPU)
// keeps up with it. Unknown links are not called slow.
bool slow_for_tensor_parallel(GpuLink link);

using GpuUuid = std::array<uint8_t, 16>;

// The link from GPU `from` to each GPU of `to`, by UUID (core/device_info.h), from NVML. When
// NVML cannot be loaded or does not know a GPU, those links are kUnknown and *why says why.
std::vector<GpuLink> probe_gpu_links(const GpuUuid& from, const std::vector<GpuUuid>& to, std::string* why);

// NVML's spelling of a UUID: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
std::string nvml_uuid_string(const GpuUuid& uuid);

}  // namespace feast
