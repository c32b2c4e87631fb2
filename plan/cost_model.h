// The planner's cost model (`trainer plan`, docs/planner.md): what one layout of a config costs
// before it runs. Memory per rank comes from what the trainer itself allocates (the parameter
// table cut by stage and tensor-parallel slice, the schedule's activation slots, the ZeRO
// stage's gradient buffers and buckets, AdamW's shard), so on the CPU in float32 it equals
// TrainingRun::memory_bytes(); a CI test holds it to that. Time comes from closed forms of
// compute and communication on a described cluster. Pure functions: no MPI, nothing allocated.
// Legend: B micro-batch size, T sequence length, C channels, m micro-batches per step, p stages,
// t tp degree, d dp degree, P bytes moved, B_link bandwidth, α latency per message.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/layout_plan.h"

namespace feast {

// Element types of a run: float32 throughout (the CPU path, or training.dtype = "fp32" on GPUs)
// or mixed precision on a GPU (bf16 parameters and activations, float32 gradients, float32
// master weights and moments).
enum class PlanDType { kFp32, kBf16 };
std::string to_string(PlanDType dtype);

// One rank's memory in bytes: the four parts TrainingRun::memory_bytes() reports, plus buffers
// the trainer allocates but does not report (the rotary tables).
struct PlannedMemory {
  double parameters = 0;   // this rank's stage and tensor-parallel slice
  double gradients = 0;    // full buffer, shard, ZeRO 2's staging slots and tied accumulator
  double optimizer = 0;    // AdamW's moments (and master copy) of what this rank updates
  double activations = 0;  // the stage's activation slots and recompute set
  double workspace = 0;    // the scratch its layers share
  double communication = 0;  // bf16 wire buffers, a parameter server's receive buffer
  double buffers = 0;      // not in the trainer's report
  double activations_per_micro_batch = 0;  // of the activations: one slot
  double offloaded = 0;    // host memory: offloaded optimizer state and its gradient copy
  double reported() const { return parameters + gradients + optimizer + activations + workspace + communication; }
  double total() const { return reported() + buffers; }
};

struct MemoryOptions {
  PlanDType dtype = PlanDType::kFp32;
  // OpenMP threads per rank: the CPU attention backward keeps a T x T scratch per thread.
  int threads = 1;
  // On GPUs attention is one fused kernel that keeps a log-sum-exp per row, not the T x T
  // probabilities and scratch of the CPU path; fp32 runs on GPUs too (training.dtype = "fp32").
  bool gpu = false;
  // ZeRO 3: the page size in which parameters are held and given back (the CPU's 4 KiB, a
  // GPU's 2 MiB); 0 where pages cannot be given back (every rank holds its stage's parameters).
  size_t page_bytes = 4096;
};

// The memory of world rank `rank` of a run of `config` laid out as `plan` (plan_layout(config,
// world)): exact for float32, where it is what the trainer allocates.
PlannedMemory rank_memory(const Config& config, const LayoutPlan& plan, int rank, const MemoryOptions& options = {});

// A link as the α-β model sees it: bytes per second each GPU sends (and receives) at once, and
// the start-up cost of one message.
struct Link {
  double bandwidth = 0;  // bytes/s
  double latency = 0;    // seconds per message
};

// Closed forms of the collectives over n ranks moving `bytes` (the size of the whole buffer).
// Each is 0 for n = 1.
double ring_allreduce_seconds(double bytes, int n, const Link& link);   // 2(n-1)/n P/B + 2(n-1) α
double reduce_scatter_seconds(double bytes, int n, const Link& link);   // (n-1)/n P/B + (n-1) α
double allgather_seconds(double bytes, int n, const Link& link);        // (n-1)/n P/B + (n-1) α
// Each rank sends its P bytes in n equal parts, one to every rank (its own stays).
double alltoall_seconds(double bytes, int n, const Link& link);         // (n-1)/n P/B + (n-1) α
double send_recv_seconds(double bytes, const Link& link);               // P/B + α
// One direction (push or pull) of a parameter server: each server's link carries every remote
// worker's share of the P bytes, remote P / (servers B) + remote α, where remote = workers, or
// workers - 1 when each server is also a worker (feast's: its own share never crosses a link).
// One dedicated server gives the textbook N P/B; feast's dp servers (d - 1)/d P/B.
double parameter_server_seconds(double bytes, int workers, int servers, bool colocated, const Link& link);
// Cluster MTTF from one GPU's: MTTF_gpu / N (independent failures, any one ends the job).
double cluster_mttf_hours(double gpu_mttf_hours, int gpus);
// Young/Daly: the checkpoint interval that minimises lost work, sqrt(2 C MTTF).
double young_daly_interval_seconds(double checkpoint_seconds, double mttf_seconds);

// The machine a plan is for. Defaults are an H100 SXM-like node (docs/planner.md).
struct Cluster {
  int gpus = 8;
  int gpus_per_node = 8;
  double gpu_memory = 80.0 * 1024 * 1024 * 1024;  // bytes per GPU
  Link intra_node{450e9, 5e-6};                   // NVLink 4 per GPU, one direction
  Link inter_node{50e9, 5e-6};                    // one 400 Gb/s NIC per GPU
  double tflops = 400;  // achieved (not peak) TFLOP/s per GPU in the model's FLOP count
  Link host_link{25e9, 10e-6};  // a GPU's copies to and from its host (PCIe), one direction
  double host_memory_bw = 50e9;  // a rank's share of host memory bandwidth for an offloaded AdamW update
};

struct PlanOptions {
  Cluster cluster;
  MemoryOptions memory;
};

// One point of the search: the degrees, the ZeRO stage and the split of the global batch.
struct LayoutChoice {
  int tp = 1, pp = 1, dp = 1, zero_stage = 0, micro_batch_size = 1, num_micro_batches = 1;
  std::string recompute = "none";  // training.recompute (of every block)
  bool offload = false;            // parallel.offload_optimizer
  bool sequence_parallel = false;  // parallel.sequence_parallel
  std::string schedule = "1f1b";   // parallel.schedule
  int ep = 1;                      // parallel.ep (mixture-of-experts models)
  // "tp2 pp2 dp2 zero1 mbs4 m2", then " ep2", " zero-bubble" or " gpipe", " sp", " recompute-full",
  // " offload" when set
  std::string name() const;
};

// Seconds of one optimizer step, split as metrics.jsonl splits a measured one.
struct PlannedTime {
  double compute_s = 0;  // forward and backward of the step's micro-batches on the slowest stage
  double tp_comm_s = 0;  // tensor-parallel all-reduces (exposed: they sit between the products)
  double pp_idle_s = 0;  // pipeline bubble and the activation transfers on its critical path
  double dp_comm_s = 0;  // exposed data-parallel communication (docs/planner.md: what overlaps)
  double ep_comm_s = 0;  // expert parallelism's all-to-all exchanges (the MoE blocks wait for them)
  double offload_s = 0;  // offloaded optimizer: gradients to the host, weights back, the host's update
  double step_s() const { return compute_s + tp_comm_s + pp_idle_s + dp_comm_s + ep_comm_s + offload_s; }
};

struct LayoutEstimate {
  LayoutChoice layout;
  bool valid = false;  // plan_layout accepted it (why says what it refused otherwise)
  bool fits = false;   // valid, and the largest rank fits in the GPU's memory
  std::string why;     // empty when it fits
  PlannedMemory memory;                      // the rank that needs the most
  std::vector<PlannedMemory> stage_memory;   // per pipeline stage (tp rank 0, dp rank 0: the largest shard)
  PlannedTime time;
  double tokens_per_s = 0;
  double efficiency = 0;        // E = compute / step
  double pp_idle_fraction = 0;  // (p-1)/(m+p-1)
  bool tp_inter_node = false, pp_inter_node = false, dp_inter_node = false;  // a group spans nodes
  bool ep_inter_node = false;
};

// Sequences per step over all ranks: training.batch_size, or dp * num_micro_batches *
// micro_batch_size of the config as given (dp = 0: gpus / (tp * pp)). Throws ConfigError.
int64_t global_batch_sequences(const Config& config, int gpus);
// `config` with the choice's degrees, ZeRO stage and batch split (parallel.stage_layers kept only
// when it has pp entries).
Config config_for_layout(const Config& config, const LayoutChoice& choice, int64_t global_batch);
// Memory and time of one layout that plan_layout accepted (`config` from config_for_layout).
LayoutEstimate estimate_layout(const Config& config, const LayoutPlan& plan, const PlanOptions& options);
// Every (tp, pp, dp) with tp pp dp = gpus, for an MoE model every ep dividing dp and the
// experts, every ZeRO stage (0 only at dp 1 or with a parameter server), every micro-batch size dividing the per-replica batch, each recomputation
// mode and with and without optimizer offload; refused degrees
// appear once per (tp, pp, dp) with plan_layout's reason. Best first: fitting layouts by
// tokens/s, then the ones that do not fit, then the refused ones.
std::vector<LayoutEstimate> plan_layouts(const Config& config, const PlanOptions& options);


}  // namespace feast
