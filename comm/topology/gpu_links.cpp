#include "comm/topology/gpu_links.h"

#include <dlfcn.h>

#include <cstdio>

namespace feast {
namespace {

// The few NVML entry points used, with NVML's ABI (nvml.h is not needed to build: only these
// signatures and enum values, which NVML keeps stable).
using NvmlReturn = int;  // nvmlReturn_t: 0 is NVML_SUCCESS
using NvmlDevice = struct NvmlDeviceOpaque*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr int kNvmlP2pCapsNvlink = 2;  // NVML_P2P_CAPS_INDEX_NVLINK
constexpr int kNvmlP2pStatusOk = 0;    // NVML_P2P_STATUS_OK
// nvmlGpuTopologyLevel_t
constexpr int kTopologyInternal = 0, kTopologySingle = 10, kTopologyMultiple = 20, kTopologyHostBridge = 30,
              kTopologyNode = 40, kTopologySystem = 50;

struct Nvml {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*handle_by_uuid)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*common_ancestor)(NvmlDevice, NvmlDevice, int*) = nullptr;
  NvmlReturn (*p2p_status)(NvmlDevice, NvmlDevice, int, int*) = nullptr;
  std::string error;  // empty when usable
};

const Nvml& nvml() {
  static const Nvml loaded = [] {
    Nvml n;
    // libnvidia-ml.so.1 comes with the driver, not the toolkit: a login node or CI has none.
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      n.error = "NVML (libnvidia-ml.so.1, part of the NVIDIA driver) cannot be loaded";
      return n;
    }
    n.init = reinterpret_cast<decltype(n.init)>(dlsym(lib, "nvmlInit_v2"));
    n.handle_by_uuid = reinterpret_cast<decltype(n.handle_by_uuid)>(dlsym(lib, "nvmlDeviceGetHandleByUUID"));
    n.common_ancestor =
        reinterpret_cast<decltype(n.common_ancestor)>(dlsym(lib, "nvmlDeviceGetTopologyCommonAncestor"));
    n.p2p_status = reinterpret_cast<decltype(n.p2p_status)>(dlsym(lib, "nvmlDeviceGetP2PStatus"));
    if (!n.init || !n.handle_by_uuid || !n.common_ancestor || !n.p2p_status) {
      n.error = "NVML (libnvidia-ml.so.1) lacks the topology calls: the driver is too old";
    } else if (n.init() != kNvmlSuccess) {
      n.error = "NVML (libnvidia-ml.so.1) failed to initialise";
    }
    return n;
  }();
  return loaded;
}

GpuLink from_topology_level(int level) {
  switch (level) {
    case kTopologyInternal:
    case kTopologySingle: return GpuLink::kPcieSwitch;
    case kTopologyMultiple: return GpuLink::kPcieSwitches;
    case kTopologyHostBridge: return GpuLink::kHostBridge;
    case kTopologyNode: return GpuLink::kNumaNode;
    case kTopologySystem: return GpuLink::kCrossSocket;
    default: return GpuLink::kUnknown;
  }
}

}  // namespace

const char* gpu_link_code(GpuLink link) {
  switch (link) {
    case GpuLink::kSame: return "X";
    case GpuLink::kNvlink: return "NV";
    case GpuLink::kPcieSwitch: return "PIX";
    case GpuLink::kPcieSwitches: return "PXB";
    case GpuLink::kHostBridge: return "PHB";
    case GpuLink::kNumaNode: return "NODE";
    case GpuLink::kCrossSocket: return "SYS";
    case GpuLink::kUnknown: return "?";
  }
  return "?";
}

const char* gpu_link_meaning(GpuLink link) {
  switch (link) {
    case GpuLink::kSame: return "the same GPU";
    case GpuLink::kNvlink: return "NVLink";
    case GpuLink::kPcieSwitch: return "PCIe, one switch";
    case GpuLink::kPcieSwitches: return "PCIe, several switches";
    case GpuLink::kHostBridge: return "PCIe through the CPU's host bridge";
    case GpuLink::kNumaNode: return "PCIe across host bridges of one CPU";
    case GpuLink::kCrossSocket: return "PCIe across CPU sockets";
    case GpuLink::kUnknown: return "unknown";
  }
  return "unknown";
}

bool slow_for_tensor_parallel(GpuLink link) {
  return link != GpuLink::kSame && link != GpuLink::kNvlink && link != GpuLink::kUnknown;
}

std::string nvml_uuid_string(const GpuUuid& u) {
  char s[48];
  std::snprintf(s, sizeof s, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  return s;
}

std::vector<GpuLink> probe_gpu_links(const GpuUuid& from, const std::vector<GpuUuid>& to, std::string* why) {
  std::vector<GpuLink> links(to.size(), GpuLink::kUnknown);
  for (size_t i = 0; i < to.size(); ++i)
    if (to[i] == from) links[i] = GpuLink::kSame;
  const Nvml& n = nvml();
  if (!n.error.empty()) {
    if (why) *why = n.error;
    return links;
  }
  NvmlDevice mine = nullptr;
  if (n.handle_by_uuid(nvml_uuid_string(from).c_str(), &mine) != kNvmlSuccess) {
    if (why) *why = "NVML does not know this rank's GPU " + nvml_uuid_string(from);
    return links;
  }
  for (size_t i = 0; i < to.size(); ++i) {
    if (links[i] == GpuLink::kSame) continue;
    NvmlDevice other = nullptr;
    if (n.handle_by_uuid(nvml_uuid_string(to[i]).c_str(), &other) != kNvmlSuccess) {
      if (why) *why = "NVML does not know GPU " + nvml_uuid_string(to[i]);
      continue;
    }
    int status = -1, level = -1;
    if (n.p2p_status(mine, other, kNvmlP2pCapsNvlink, &status) == kNvmlSuccess && status == kNvmlP2pStatusOk)
      links[i] = GpuLink::kNvlink;
    else if (n.common_ancestor(mine, other, &level) == kNvmlSuccess)
      links[i] = from_topology_level(level);
  }
  return links;
}

}  // namespace feast
