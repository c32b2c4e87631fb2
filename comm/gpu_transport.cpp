#include "comm/gpu_transport.h"

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <utility>

#include "comm/process_groups.h"
#include "comm/staged_communicator.h"
#include "comm/topology/nccl_network_report.h"
#include "comm/transport_policy.h"
#include "core/error.h"
#include "core/log.h"
#if defined(FEAST_WITH_NCCL)
#include "comm/nccl_communicator.h"
#endif

namespace feast {

namespace {

// The policy's choice, made alike on every rank of `world`: NCCL only if it loads everywhere and
// no GPU anywhere serves two ranks.
CommBackendChoice choose_for_gpus(Communicator& world, const std::string& backend) {
  std::string why = "this build has no NCCL (nccl.h was not found)";
  bool usable = false;
#if defined(FEAST_WITH_NCCL)
  usable = nccl_available(&why);
#endif
  int32_t unusable = usable ? 0 : 1;
  world.allreduce(&unusable, 1, DType::kInt32, {ReduceOp::kMax})->wait();
  if (unusable && usable) why = "NCCL cannot be loaded on some rank";
  const bool shared = some_gpu_is_shared(gather_gpu_uuids(world));
  return choose_comm_backend(backend, "cuda", unusable == 0, why, shared);
}

std::unique_ptr<Communicator> through_nccl(std::unique_ptr<Communicator> host, const GpuTransportRequest& request) {
#if defined(FEAST_WITH_NCCL)
  return make_nccl_communicator(std::move(host), request.stream, request.timeout);
#else
  (void)host;
  (void)request;
  FEAST_CHECK(false, "NCCL chosen in a build without it");
#endif
}

}  // namespace

void connect_gpu_groups(ProcessGroups& groups, const GpuTransportRequest& request) {
  Communicator& world = *groups.world;
  const CommBackendChoice choice = choose_for_gpus(world, request.backend);
  // Every group stages device buffers through host memory; the NCCL groups below wrap theirs
  // and send only host values (losses, norms, NCCL's id) through it.
  stage_device_buffers(groups);
  if (!choice.nccl) {
    log::info("communication: " + choice.why);
    return;
  }
  // Rank 0 keeps NCCL's own lines about its network, to say which one the nodes use.
  const std::string nccl_log = world.rank() == 0 ? capture_nccl_network_report(request.log_dir) : "";
  std::string on_nccl;
  for (auto [group, name] : {std::pair{&groups.tp, "tensor-parallel"}, std::pair{&groups.dp, "data-parallel"},
                             std::pair{&groups.pp, "pipeline"}, std::pair{&groups.cp, "context-parallel"},
                             std::pair{&groups.embedding, "tied-embedding"}}) {
    if (!*group || (*group)->size() == 1 || (group == &groups.dp && request.dp_stays_on_mpi) ||
        (group == &groups.pp && request.pp_stays_on_mpi))
      continue;
    *group = through_nccl(std::move(*group), request);
    on_nccl += std::string(on_nccl.empty() ? "" : ", ") + name;
  }
  log::info("communication: " + choice.why +
            (on_nccl.empty() ? ", but no group has more than one rank" : " for the " + on_nccl + " groups") +
            "; the rest through MPI, staged through host memory");
#if defined(FEAST_WITH_NCCL)
  // NCCL's own switch back to blocking calls (faster per call with NCCL 2.23 and later, which
  // launches each call of a non-blocking communicator from a new thread; docs/cluster.md).
  if (nccl_calls_forced_blocking() && !on_nccl.empty())
    log::info(std::string("warning: NCCL_COMM_BLOCKING=") + std::getenv("NCCL_COMM_BLOCKING") +
              " makes NCCL's calls block: a peer that fails before NCCL connects to it leaves the others waiting "
              "with no deadline");
#endif
  if (!nccl_log.empty() && !on_nccl.empty()) {
    std::ifstream in(nccl_log);
    const std::string network = nccl_network_from_log(std::string(std::istreambuf_iterator<char>(in), {}));
    log::info("network between nodes (NCCL): " + (network.empty() ? "not reported (see " + nccl_log + ")" : network));
  }
}

std::unique_ptr<Communicator> connect_gpu_world(std::unique_ptr<Communicator> world,
                                                const GpuTransportRequest& request) {
  const CommBackendChoice choice = choose_for_gpus(*world, request.backend);
  if (choice.nccl) return through_nccl(std::move(world), request);
  return std::make_unique<StagedCommunicator>(std::move(world));
}

}  // namespace feast
