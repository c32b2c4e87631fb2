// The GPU link report on made-up machines: the matrix per host, hosts wired alike folded into
// one, the legend, and the warning for tensor-parallel groups on slow links. Also the UUID
// spelling NVML expects, and that without NVML (this machine) every link to another GPU is
// unknown with a reason while a shared GPU is still recognised.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/topology/gpu_links.h"
#include "comm/topology/gpu_link_report.h"
#include "comm/topology/nccl_network_report.h"

namespace feast {
namespace {

using L = GpuLink;

// An 8-GPU host: GPUs 0-3 and 4-7 joined by NVLink within each half, PCIe across sockets between halves.
std::vector<std::vector<GpuLink>> two_islands() {
  std::vector<std::vector<GpuLink>> m(8, std::vector<GpuLink>(8));
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) m[size_t(i)][size_t(j)] = i == j ? L::kSame : (i / 4 == j / 4 ? L::kNvlink : L::kCrossSocket);
  return m;
}

TEST(GpuLinkReport, PrintsOneMatrixForHostsWiredAlikeAndALegend) {
  const ParallelLayout layout(4, 1, 4);  // tp groups: ranks 0-3, 4-7, ... (consecutive)
  std::vector<std::string> named(16);
  for (int r = 0; r < 16; ++r) named[size_t(r)] = r < 8 ? "node01" : "node02";
  HostGpuLinks links;
  for (int h = 0; h < 2; ++h)
    for (const auto& row : two_islands()) links.push_back(row);
  const std::string report = describe_gpu_links(layout, named, links, "");
  EXPECT_NE(report.find("GPU links on node01 and 1 more host alike"), std::string::npos) << report;
  EXPECT_EQ(report.find("node02"), std::string::npos) << report;
  // Row 0: X to itself, NV within its half, SYS across.
  EXPECT_NE(report.find("     0    X   NV   NV   NV  SYS  SYS  SYS  SYS"), std::string::npos) << report;
  EXPECT_NE(report.find("NV = NVLink"), std::string::npos) << report;
  EXPECT_NE(report.find("SYS = PCIe across CPU sockets"), std::string::npos) << report;
  EXPECT_EQ(report.find("warning"), std::string::npos) << "tp groups sit inside NVLink islands:\n" << report;
}

TEST(GpuLinkReport, WarnsWhenATensorParallelGroupCrossesASlowLink) {
  // tp 8 on the same host: the group spans both islands.
  const ParallelLayout layout(8, 1, 1);
  const std::vector<std::string> hosts(8, "node01");
  const std::string report = describe_gpu_links(layout, hosts, two_islands(), "");
  EXPECT_NE(report.find("warning: tensor-parallel group [0, 1, 2, 3, 4, 5, 6, 7] joins ranks 0 and 4 over SYS"),
            std::string::npos)
      << report;
}

TEST(GpuLinkReport, AtMostThreeWarningsThenACount) {
  // tp 2 on a 12-GPU PCIe-only host: all six groups on a host bridge.
  const ParallelLayout layout(2, 1, 6);
  const std::vector<std::string> hosts(12, "node01");
  std::vector<std::vector<GpuLink>> m(12, std::vector<GpuLink>(12, L::kHostBridge));
  for (int i = 0; i < 12; ++i) m[size_t(i)][size_t(i)] = L::kSame;
  const std::string report = describe_gpu_links(layout, hosts, m, "");
  size_t warnings = 0;
  for (size_t at = report.find("warning: tensor-parallel group"); at != std::string::npos;
       at = report.find("warning: tensor-parallel group", at + 1))
    ++warnings;
  EXPECT_EQ(warnings, 3u) << report;
  EXPECT_NE(report.find("warning: 3 more tensor-parallel groups on slow links"), std::string::npos) << report;
  EXPECT_NE(report.find("\n    11  PHB"), std::string::npos) << "local ranks above 9 keep the columns:\n" << report;
}

TEST(GpuLinkReport, UnknownLinksSayWhyAndAreNotWarnedAbout) {
  const ParallelLayout layout(2, 1, 1);
  const std::vector<std::string> hosts(2, "node01");
  const HostGpuLinks links = {{L::kSame, L::kUnknown}, {L::kUnknown, L::kSame}};
  const std::string report = describe_gpu_links(layout, hosts, links, "NVML cannot be loaded");
  EXPECT_NE(report.find("links unknown: NVML cannot be loaded"), std::string::npos) << report;
  EXPECT_EQ(report.find("warning"), std::string::npos) << report;
}

TEST(GpuLinkReport, NothingWhenNoHostHasTwoRanks) {
  const ParallelLayout layout(1, 1, 2);
  EXPECT_EQ(describe_gpu_links(layout, {"a", "b"}, {{L::kSame}, {L::kSame}}, ""), "");
}

TEST(GpuLinks, UuidIsSpelledAsNvmlWantsIt) {
  GpuUuid u{};
  for (size_t i = 0; i < u.size(); ++i) u[i] = uint8_t(0x10 + i);
  EXPECT_EQ(nvml_uuid_string(u), "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f");
}

TEST(GpuLinks, WithoutADriverOtherGpusAreUnknownAndTheSameGpuIsKnown) {
  GpuUuid a{}, b{};
  a[0] = 1;
  b[0] = 2;
  std::string why;
  const std::vector<GpuLink> links = probe_gpu_links(a, {a, b}, &why);
  ASSERT_EQ(links.size(), 2u);
  EXPECT_EQ(links[0], GpuLink::kSame);
  if (why.empty()) GTEST_SKIP() << "NVML is present here; the link depends on this machine";
  EXPECT_EQ(links[1], GpuLink::kUnknown);
  EXPECT_NE(why.find("NVML"), std::string::npos) << why;
}

TEST(GpuLinks, OnlyNvlinkAndTheSameGpuAreFastEnoughForTensorParallelism) {
  EXPECT_FALSE(slow_for_tensor_parallel(GpuLink::kSame));
  EXPECT_FALSE(slow_for_tensor_parallel(GpuLink::kNvlink));
  EXPECT_FALSE(slow_for_tensor_parallel(GpuLink::kUnknown));
  for (GpuLink l : {L::kPcieSwitch, L::kPcieSwitches, L::kHostBridge, L::kNumaNode, L::kCrossSocket})
    EXPECT_TRUE(slow_for_tensor_parallel(l)) << gpu_link_code(l);
}

// NCCL's INFO lines as NCCL 2.21-2.28 print them (src/init.cc, src/transport/net_ib, net_socket).
TEST(NcclNetworkReport, ReadsTheNetworkAndItsDevicesFromNcclsLines) {
  const std::string ib =
      "node01:1234:1234 [0] NCCL INFO Bootstrap : Using ib0:10.1.0.1<0>\n"
      "node01:1234:1234 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.1.0.1<0>\n"
      "node01:1234:1234 [0] NCCL INFO Using network IB\n"
      "node01:1234:1234 [0] NCCL INFO comm 0x55 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 18000 - Init START\n";
  EXPECT_EQ(nccl_network_from_log(ib), "IB ([0]mlx5_0:1/IB [1]mlx5_1:1/IB)");
  const std::string socket =
      "host:77:77 [0] NCCL INFO NET/IB : No device found.\n"
      "host:77:77 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.7<0>\n"
      "host:77:77 [0] NCCL INFO Using network Socket\n";
  EXPECT_EQ(nccl_network_from_log(socket), "Socket ([0]eth0:10.0.0.7<0>)");
  // A plugin's network with no device line of the form above: its name alone.
  EXPECT_EQ(nccl_network_from_log("h:1:1 [0] NCCL INFO Using network AWS Libfabric\n"), "AWS Libfabric");
  EXPECT_EQ(nccl_network_from_log("nothing NCCL said about its network\n"), "");
}

}  // namespace
}  // namespace feast
