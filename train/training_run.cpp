#include "train/training_run.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "interop/hf/hf_weights.h"
#include "interop/hf/peft_adapter.h"
#include "interop/hf/weights_fingerprint.h"
#include "interop/hf/safetensors_model.h"
#include "core/device_info.h"
#include "core/error.h"
#include "core/log.h"
#include "core/plural.h"
#include "core/timer.h"
#include "model/decoder_stage.h"
#include "comm/agreement.h"
#include "comm/gpu_transport.h"
#include "comm/mpi_world.h"
#include "comm/topology/gpu_link_report.h"
#include "comm/topology/grid_report.h"
#include "comm/transport_policy.h"
#include "train/metrics/run_summary.h"
#include "backend/cpu/blas_library.h"
#include "comm/topology/cpu_threads.h"

namespace feast {
namespace {

// Opens a split, naming the config key that chose it when anything is wrong.
Dataset open_split(const Config& config, const std::string& key, const std::string& pattern, Split split) {
  try {
    Dataset d(pattern, split);
    d.set_vocab_limit(config.model.vocab_size, "model.vocab_size");
    return d;
  } catch (const DataError& e) {
    throw DataError(std::string(e.what()) + " [" + key + " set at " + config.where(key) + "]");
  }
}


// The end-of-text id that ends documents under data.document_mask (-1 without): data.eos_id, or
// the one the split's meta.json records.
int32_t document_eos(const Config& config, const Dataset& data, const std::string& key) {
  if (!config.data.document_mask) return -1;
  const std::optional<int32_t> recorded = data.recorded_eos_id();
  const int32_t eos = config.data.eos_id >= 0 ? int32_t(config.data.eos_id) : recorded.value_or(-1);
  // Unpacked data's documents end at the end-of-text token: wrong where it occurs inside them
  // (chat templates end every turn with it), which packed data's recorded starts avoid.
  if (eos >= 0 && recorded == eos && !data.has_document_starts() && data.eos_inside_documents() > 0)
    throw DataError("data.document_mask = true (" + config.where("data.document_mask") +
                    ") starts a document after each end-of-text token (id " + std::to_string(eos) + "), but " +
                    std::to_string(data.eos_inside_documents()) + " of the documents of " + key + " (" +
                    data.meta_path() + ") hold it before their end (a chat template ends every turn with it): "
                    "each turn would become a document that cannot see the turns before it; prepare the data "
                    "with `trainer prepare-data --pack --seq-len N`, which records where each sample starts, or "
                    "set data.document_mask = false");
  if (eos >= 0) return eos;
  throw DataError("data.document_mask = true (" + config.where("data.document_mask") +
                  ") needs the end-of-text id that ends each document, and " +
                  (data.meta_path().empty() ? "the shards of " + key + " have no meta.json"
                                            : data.meta_path() + " records none (the byte tokenizer has none)") +
                  ": set data.eos_id, or prepare the data with `trainer prepare-data --tokenizer MODEL`");
}

}  // namespace

TrainingRun::TrainingRun(const Config& config, const LayoutPlan& plan, std::unique_ptr<Communicator> world,
                         RunPurpose purpose)
    : config_(config), purpose_(purpose), plan_(plan) {
  FEAST_CHECK(plan.layout.world_size() == world->size(),
              "TrainingRun: the layout is for " << plan.layout.world_size() << " ranks, the world has " << world->size());
  const TrainingConfig& tc = config.training;
  const ParallelLayout& layout = plan_.layout;
  const int world_rank = world->rank();
  me_ = layout.coord(world_rank);

  // Everything that can be wrong with the data is found before the model is allocated, and
  // the ranks agree on it: one message (from the lowest failing rank), every rank exits.
  std::string data_error;
  try {
    open_data();
  } catch (const DataError& e) {
    data_error = e.what();
  }
  agree_on_error(*world, data_error);

  groups_ = make_process_groups(std::move(world), layout, config.model.tied());
  Communicator& w = *groups_.world;
  if (config.model.moe.enabled() && layout.pp() > 1) {
    const int pipeline = (me_.dp * layout.tp() + me_.tp) * layout.cp() + me_.cp;  // one color per pipeline
    moe_pipeline_ = w.split(pipeline, me_.pp, "moe-pp");
  }
  // Expert parallelism: ep consecutive data-parallel ranks of one tensor-parallel and pipeline
  // coordinate share the experts.
  const int ep = config.parallel.ep;
  if (ep > 1) {
    const int group = ((me_.pp * layout.tp() + me_.tp) * layout.cp() + me_.cp) * (layout.dp() / ep) + me_.dp / ep;
    expert_group_ = w.split(group, me_.dp % ep, "ep");
    // The data-parallel ranks that hold the same experts (one per ep group, of the same ep
    // rank): the experts' gradients are summed over them, and ZeRO shards over them.
    const int holders = ((me_.pp * layout.tp() + me_.tp) * layout.cp() + me_.cp) * ep + me_.dp % ep;
    expert_replicas_ = w.split(holders, me_.dp / ep, "ep-dp");
  }
  std::vector<std::string> hosts(1);
  if (w.size() > 1) {
    hosts = gather_host_names(w);
    log::info(describe_grid(layout, hosts, config.model.tied(), config.logging.verbose));
  }
  if (config.training.device == "cpu") {
    // Every rank opens its BLAS libraries now, with the kernels its CPU's features call for, and
    // the ranks compare them: hosts of different CPUs would run different kernels (and round differently).
    const std::string kernels = cpu::cpu_kernels_id();
    if (w.size() > 1) {
      const std::vector<std::string> all = gather_strings(w, kernels);
      std::string listed;
      for (size_t r = 0; r < all.size(); ++r)
        if (all[r] != all[0]) listed += (listed.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " " + all[r];
      if (!listed.empty())
        log::info("warning: the ranks run different CPU kernels (rank 0 " + all[0] + "; " + listed +
                  "): their products round differently, so layouts no longer repeat one another bit for bit");
    }
  }
  const int sharing = ranks_sharing_my_cpus(w, hosts);
  cpu_sharing_ranks_ = sharing;
  const ThreadChoice choice = config.training.threads > 0 ? ThreadChoice{config.training.threads, ""}
                                                          : thread_policy(sharing);
  const int threads = choice.threads;
  const std::string& threads_from = choice.from;
  omp_set_num_threads(threads);
  set_wait_policy(choose_wait_policy(sharing, threads));
  inferred_ = {w.size(), layout.dp(), plan_.micro_batches, threads, threads_from};
  // The whole config is a hundred lines: a training run's directory keeps it (config.toml), and
  // the screen gets it only when asked for. An evaluation writes no directory: print-config shows it.
  if (config.logging.verbose)
    log::info("resolved config (inferred values marked):\n" + to_toml(with_inferred_values(config, inferred_)));
  else if (purpose_ == RunPurpose::kTrain)
    log::info("resolved config: " + config.logging.dir + "/config.toml (every key, inferred values marked; "
              "logging.verbose prints it here)");
  else
    log::info("resolved config: `trainer print-config` with the same arguments prints it (every key, inferred "
              "values marked; logging.verbose prints it here)");

  // Under context parallelism each rank's stage sees its own share of every sequence.
  const int B = config.parallel.micro_batch_size, T = local_seq_len(), m = plan_.micro_batches;
  const StageSpec spec = plan_.stage_of(world_rank);
  owns_loss_ = spec.has_head && me_.tp == 0;
  const int slots = PipelineExecutor::slots_needed(plan_.schedule, layout.pp(), me_.pp, m, plan_.virtual_stages);
  backend_ = make_backend(tc.device, tc.dtype, local_rank(hosts, world_rank));
  if (tc.device != "cpu") connect_gpus(hosts);
  // ZeRO 3 (with data parallelism to shard over): the flat buffer's pages come and go by block.
  const bool sharded =
      config.parallel.zero_stage == 3 && plan_.shard_ranks() > 1 && config.parallel.dp_sync == "allreduce";
  const StageShape shape{B,
                         T,
                         slots,
                         recompute_from_name(tc.recompute),
                         tc.recompute_layers,
                         sharded,
                         config.parallel.sequence_parallel,
                         plan_.schedule == ScheduleKind::kZeroBubble,
                         layout.cp(),
                         me_.cp,
                         document_eos_ >= 0};
  stage_ = std::make_unique<DecoderStage>(config.model, spec, shape, *backend_,
                                          layout.tp() > 1 ? groups_.tp.get() : nullptr,
                                          layout.cp() > 1 ? groups_.cp.get() : nullptr, lora_spec(config));
  if (moe_pipeline_) static_cast<DecoderStage&>(*stage_).set_moe_pipeline(moe_pipeline_.get());
  if (expert_group_) static_cast<DecoderStage&>(*stage_).set_expert_group(expert_group_.get());
  if (layout.cp() > 1) {
    whole_tokens_.resize(size_t(B) * size_t(tc.seq_len));
    whole_targets_.resize(whole_tokens_.size());
  }
  initialize_parameters(*stage_, tc.seed);

  const size_t bucket_elems = static_cast<size_t>(config.parallel.bucket_mb * 1024 * 1024 / sizeof(float));
  stage_->set_gradient_range_limit(bucket_elems);
  // The ranks holding these parameters: data-parallel replicas and, inside each, the
  // context-parallel ranks (their gradients are partial sums over the sequence too).
  Communicator* dp = layout.replicas() > 1 ? groups_.dp.get() : nullptr;
  Communicator* embedding = layout.pp() > 1 ? groups_.embedding.get() : nullptr;
  const size_t n_params = stage_->parameters().numel;
  if (config.parallel.dp_sync == "parameter-server") {
    std::optional<EmbeddingRows> rows;
    if (config.parallel.ps_sparse_embedding && stage_->table().contains("wte.weight")) {
      const LocalParam& wte = stage_->table().at("wte.weight");
      FEAST_CHECK(wte.spec->split == TpSplit::kVocabRows && wte.shape.size() == 2,
                  "the sparse parameter server expects wte.weight as vocabulary-parallel rows");
      rows = EmbeddingRows{wte.offset, wte.shape[0], wte.shape[1], int64_t{wte.tp_rank} * wte.shape[0]};
    }
    auto ps = std::make_unique<ParameterServer>(*backend_, n_params, stage_->gradient_ranges(), bucket_elems, dp,
                                                embedding, rows);
    ps_ = ps.get();
    sync_ = std::move(ps);
  } else {
    sync_ = std::make_unique<GradientSync>(*backend_, n_params, stage_->gradient_ranges(), config.parallel.zero_stage,
                                           bucket_elems, dp, embedding,
                                           config.parallel.grad_reduce_dtype == "bf16" ? DType::kBFloat16
                                                                                        : DType::kFloat32,
                                           expert_replicas_.get());
  }
  stage_->set_gradient_sink(&sync_->sink());
  AdamWConfig oc;
  oc.beta1 = tc.beta1;
  oc.beta2 = tc.beta2;
  oc.eps = tc.eps;
  oc.weight_decay = tc.weight_decay;
  oc.grad_clip = tc.grad_clip;
  const ShardRange opt_range = sync_->optimizer_range();
  // Offloaded state is updated by a CPU backend: the compute backend itself on the CPU, one of
  // its own next to a GPU.
  Backend* host = nullptr;
  if (config.parallel.offload_optimizer) {
    if (!backend_->device().is_cpu()) host_backend_ = make_backend("cpu", "fp32");
    host = backend_->device().is_cpu() ? backend_.get() : host_backend_.get();
  }
  optimizer_ = std::make_unique<AdamW>(*backend_, stage_->table(), stage_->parameters(), opt_range.begin, opt_range.end,
                                       oc, MasterWeights::kShareWhenFloat32, host);
  if (sharded) {
    sharded_ = std::make_unique<ShardedParameters>(*backend_, stage_->parameters(), sync_->shard(),
                                                   stage_->parameter_units(),
                                                   expert_replicas_ ? *expert_replicas_ : *groups_.dp);
    stage_->set_parameter_residency(sharded_.get());
    sharded_->release_all();  // initialised whole; from now on only the shard
    if (!sharded_->pages_given_back())
      log::info("ZeRO 3: " + backend_->name() + " cannot give parameter pages back: each rank keeps its whole "
                "stage's parameters (the gradients and the optimizer state are sharded, as under ZeRO 2)");
  }
  executor_ = std::make_unique<PipelineExecutor>(*stage_, layout.pp() > 1 ? groups_.pp.get() : nullptr,
                                                 plan_.schedule, m, B, T, plan_.virtual_stages);
  state_.seed = tc.seed;
  state_.model = stage_.get();
  state_.optimizer = optimizer_.get();

  memory_of_ranks_ = gather_memory(*groups_.world, memory_bytes());
  report_start();
  if (ps_) report_parameter_server();
}

TrainingRun::~TrainingRun() = default;

void TrainingRun::connect_gpus(const std::vector<std::string>& hosts) {
  Communicator& world = *groups_.world;
  if (world.size() > 1) {  // how this job's GPUs are wired, next to the rank grid
    const std::vector<GpuUuid> uuids = gather_gpu_uuids(world);
    std::string why;
    const HostGpuLinks links = gather_gpu_links(world, hosts, uuids, &why);
    const std::string report = describe_gpu_links(plan_.layout, hosts, links, why);
    if (!report.empty()) log::info(report);
  }
  GpuTransportRequest request;
  request.backend = config_.parallel.backend;
  request.stream = backend_->stream().native_handle();
  request.timeout = std::chrono::milliseconds(int64_t(config_.parallel.timeout_s * 1000));
  request.log_dir = config_.logging.dir;
  request.dp_stays_on_mpi = config_.parallel.dp_sync == "parameter-server";
  request.pp_stays_on_mpi = plan_.schedule == ScheduleKind::kInterleaved;
  connect_gpu_groups(groups_, request);
  // The experts' exchanges carry device rows: NCCL when parallel.backend asks for it, else MPI
  // through host memory.
  if (expert_group_) expert_group_ = connect_gpu_world(std::move(expert_group_), request);
  if (expert_replicas_ && expert_replicas_->size() > 1)
    expert_replicas_ = connect_gpu_world(std::move(expert_replicas_), request);
}

void TrainingRun::import_initial_weights() {
  const std::string& folder = config_.model.init_from;
  std::string error;
  Timer timer;
  // LoRA imports into the frozen base; the adapters are not the folder's.
  const bool lora = stage_->frozen_table() != nullptr;
  const LocalTable& table = lora ? *stage_->frozen_table() : stage_->table();
  // Under ZeRO 3 each rank reads only what it keeps: its shard.
  const TensorView params = lora ? stage_->frozen_parameters() : stage_->parameters();
  std::vector<FlatRange> kept = {{0, params.numel}};
  if (sharded_) kept = {{sync_->shard().begin, sync_->shard().end}};
  std::vector<float> host;  // a GPU's weights in float32, before they are rounded to the compute dtype
  try {
    const SafetensorsModel model(folder);
    if (lora && world().rank() == 0) base_fingerprint_ = weights_fingerprint(model);
    if (params.device == kCpu && params.dtype == DType::kFloat32) {
      import_hf_weights(model, config_.model, table, static_cast<float*>(params.data), &kept);
    } else {  // a GPU's parameters: read into host memory, then copy (and round) into place a chunk at a time
      host.assign(params.numel, 0.0f);
      import_hf_weights(model, config_.model, table, host.data(), &kept);
      for (const FlatRange& r : kept)
        cast_across(*backend_, params.slice(r.begin, r.size()), host_view(host.data() + r.begin, r.size()));
    }
    // QLoRA: the block products' weights, each read whole and quantized (model/quantized_base.h).
    if (QuantizedBase* apart = stage_->stored_apart()) apart->load(hf_logical_tensors(model, config_.model));
  } catch (const DataError& e) {
    error = std::string(e.what()) + " [model.init_from at " + config_.where("model.init_from") + "]";
  } catch (const std::exception& e) {  // any failure on one rank ends every rank, not a hang
    error = folder + ": importing the weights failed: " + e.what();
  }
  agree_on_error(*groups_.world, error);
  if (lora) base_fingerprint_ = broadcast_string(*groups_.world, base_fingerprint_, 0);
  // The master weights at the precision the files had, not from the rounded compute copy (the
  // optimizer's range lies inside what was read). A frozen base has none.
  if (optimizer_ && !lora)
    !host.empty() ? optimizer_->load_master(host_view(host.data(), host.size())) : optimizer_->reload_master_from_params();
  char line[64];
  std::snprintf(line, sizeof line, " in %.2f s", timer.seconds());
  log::info("model: weights from " + folder + line);
}

void TrainingRun::import_initial_adapters() {
  const std::string& folder = config_.lora.init_from;
  std::string error;
  const TensorView params = stage_->parameters();
  std::vector<float> host(params.numel);
  try {
    import_peft_adapter(folder, config_.model, lora_spec(config_), stage_->table(), host.data());
    cast_across(*backend_, params, host_view(host.data(), host.size()));
  } catch (const DataError& e) {
    error = std::string(e.what()) + " [lora.init_from at " + config_.where("lora.init_from") + "]";
  } catch (const std::exception& e) {
    error = folder + ": importing the LoRA adapter failed: " + e.what();
  }
  agree_on_error(*groups_.world, error);
  if (optimizer_) optimizer_->load_master(host_view(host.data(), host.size()));
  log::info("lora: adapters from " + folder);
}

void TrainingRun::open_data() {
  const TrainingConfig& tc = config_.training;
  if (purpose_ == RunPurpose::kTrain) {
    train_data_.emplace(open_split(config_, "data.train", config_.data.train, Split::kTrain));
    document_eos_ = document_eos(config_, *train_data_, "data.train");
    sampler_.emplace(*train_data_, tc.seed, tc.seq_len, document_eos_);
  }
  if (!config_.data.val.empty()) {
    val_data_.emplace(open_split(config_, "data.val", config_.data.val, Split::kVal));
    if (!train_data_) document_eos_ = document_eos(config_, *val_data_, "data.val");
    // A shard in both splits would be trained on and then flatter the validation loss.
    for (size_t i = 0; train_data_ && i < train_data_->num_shards(); ++i)
      for (size_t j = 0; j < val_data_->num_shards(); ++j) {
        std::error_code ec;
        if (std::filesystem::equivalent(train_data_->shard(i).path(), val_data_->shard(j).path(), ec))
          throw DataError("data.train and data.val share the shard " + val_data_->shard(j).path() +
                          ": the model would be validated on tokens it trained on; give data.train the "
                          "training shards only (data.train at " + config_.where("data.train") +
                          ", data.val at " + config_.where("data.val") + ")");
      }
    val_sampler_.emplace(*val_data_, tc.seq_len, document_eos_);
  }
  const Dataset* data = train_data_ ? &*train_data_ : val_data_ ? &*val_data_ : nullptr;
  if (document_eos_ >= 0)
    log::info(std::string("data: document masks: attention and positions restart at each document, ") +
              (data && data->has_document_starts() ? "where the packed data records its samples start"
                                                   : "after each end-of-text token (id " +
                                                         std::to_string(document_eos_) + ")") +
              "; a document's first token is not counted as a target");
  if (data && data->packed_window())
    log::info("data: packed windows of " + std::to_string(*data->packed_window()) + " tokens (" + data->meta_path() +
              ")" + (document_eos_ < 0 ? "; data.document_mask = false lets their samples attend to each other" : ""));
}

MemoryBytes TrainingRun::memory_bytes() const {
  // LoRA's frozen base counts with the parameters: it has no gradients or optimizer state.
  const double frozen = double(stage_->frozen_bytes());
  const double parameters =
      frozen + (sharded_ ? double(sharded_->working_set_bytes()) : double(stage_->parameters().bytes()));
  const ActivationBytes a = stage_->activation_bytes();
  MemoryBytes m;
  m.parameters = parameters;
  m.gradients = double(sync_->gradient_bytes());
  m.optimizer = double(optimizer_->state_bytes());
  m.activations = double(a.total() - a.scratch);
  m.workspace = double(a.scratch);
  m.communication = double(sync_->communication_bytes());
  m.activations_per_micro_batch = double(a.per_slot);
  m.offloaded = double(optimizer_->offloaded_bytes());
  return m;
}

MemoryBytes TrainingRun::memory_high_water() const {
  MemoryBytes m = memory_bytes();
  if (sharded_) m.parameters = double(sharded_->peak_bytes());
  m.device_peak = double(backend_->peak_memory_bytes());
  return m;
}

DpTraffic TrainingRun::dp_bytes_last_step() const { return ps_ ? ps_->traffic_last_step() : DpTraffic{}; }

DpTraffic TrainingRun::dp_bytes_dense_step() const {
  return ps_ ? ps_->dense_traffic(stage_->parameters().dtype) : DpTraffic{};
}

void TrainingRun::report_parameter_server() {
  // The busiest worker's dense traffic (ranks differ by stage), and the token embedding's share
  // of it, which the sparse server moves only for the rows a batch reads.
  const DpTraffic dense = dp_bytes_dense_step();
  double embedding = 0;
  if (stage_->table().contains("wte.weight") && plan_.layout.dp() > 1) {
    const LocalParam& wte = stage_->table().at("wte.weight");
    const ShardRange mine = sync_->shard();
    const size_t lo = std::max(mine.begin, wte.offset), hi = std::min(mine.end, wte.offset + wte.numel);
    embedding = double(wte.numel - (lo < hi ? hi - lo : 0)) * sizeof(float);  // the part other servers hold
  }
  double most[3] = {dense.push_bytes, dense.pull_bytes, embedding};
  groups_.world->allreduce(most, 3, DType::kFloat64, {ReduceOp::kMax})->wait();
  const int dp = plan_.layout.dp();
  std::string line = "parameter server: each worker pushes " + mib(most[0]) + " MiB and pulls " + mib(most[1]) +
                     " MiB per step (dense, the busiest rank; " +
                     (dp > 1 ? "each server receives the pushes of " + count_of(dp - 1, "other worker") +
                                   " for its shard of 1/" + std::to_string(dp) + " of the stage)"
                             : "dp = 1: no traffic)");
  if (config_.parallel.ps_sparse_embedding)
    line += "; sparse embedding: of these, the token embedding's " + mib(most[2]) +
            " MiB each way move only for the rows a batch reads";
  log::info(line);
}

BatchFill TrainingRun::context_share(BatchFill whole) {
  const int cp = plan_.layout.cp();
  if (cp == 1) return whole;
  // Document masks are refused under context parallelism: no positions to share.
  return [this, whole = std::move(whole), cp](int k, int32_t* x, int32_t* y, int32_t*) {
    const int B = config_.parallel.micro_batch_size, T = config_.training.seq_len;
    whole(k, whole_tokens_.data(), whole_targets_.data(), nullptr);
    take_context_share(whole_tokens_.data(), x, B, T, me_.cp, cp);
    take_context_share(whole_targets_.data(), y, B, T, me_.cp, cp);
  };
}

std::vector<int32_t> TrainingRun::step_tokens() const {
  // All of this rank's micro-batches of the step: the rows the executor's fill gives them.
  const int B = config_.parallel.micro_batch_size, T = config_.training.seq_len, m = plan_.micro_batches;
  std::vector<int32_t> tokens(size_t(m) * size_t(B) * size_t(T)), targets(tokens.size());
  sampler_->fill(state_.data_step(), int64_t{me_.dp} * m * B, m * B, tokens.data(), targets.data());
  return tokens;
}

int64_t TrainingRun::tokens_per_step() const {
  return int64_t{plan_.layout.dp()} * plan_.micro_batches * config_.parallel.micro_batch_size *
         config_.training.seq_len;
}

void TrainingRun::report_start() {
  const ParallelLayout& layout = plan_.layout;
  const int B = config_.parallel.micro_batch_size, T = config_.training.seq_len, m = plan_.micro_batches;
  log::info("data: " +
            (train_data_ ? "train " + count_of(train_data_->total_tokens(), "token") + " in " +
                               std::to_string(train_data_->num_shards()) + " shard(s)"
                         : std::string("no training data (evaluation)")) +
            (val_data_ ? ", val " + count_of(val_data_->total_tokens(), "token") : ", no validation"));
  log::info("model: " + config_.model.arch + ", " + count_of(config_.model.n_layer, "layer") + " over " +
            count_of(layout.pp(), "stage") + " " + format_list(plan_.stage_layers) + ", tp " +
            std::to_string(layout.tp()) + ", dp " + std::to_string(layout.dp()) +
            (layout.cp() > 1 ? ", cp " + std::to_string(layout.cp()) + " (each rank " +
                                   count_of(local_seq_len(), "token") + " of every sequence)"
                             : std::string()) +
            ", " + sync_->describe() + ", " +
            config_.parallel.schedule +
            (plan_.virtual_stages > 1 ? " (" + std::to_string(plan_.virtual_stages) + " chunks per stage)" : "") +
            "; global batch " +
            count_of(tokens_per_step(), "token") + "/step = dp " + std::to_string(layout.dp()) + " x " +
            count_of(m, "micro-batch", "micro-batches") + " x " + count_of(B, "sequence") + " x " +
            count_of(T, "token") + "; " + count_of(omp_get_max_threads(), "thread") + " per rank; " +
            (groups_.world->size() == 1 ? ""
             : wait_policy() == WaitPolicy::kSpin ? "communication waits spin (a core per thread); "
                                                  : "communication waits back off (ranks share cores); ") +
            backend_->name() + " backend");
  if (stage_->frozen_table()) {
    // The frozen model: all of it, whichever of its tensors are stored apart.
    const double trainable = double(stage_->table().logical().total_numel()),
                 base = double(decoder_param_table(config_.model).total_numel());
    const LoraSpec lora = lora_spec(config_);
    std::string targets;
    for (const std::string& t : lora.targets) targets += (targets.empty() ? "" : ", ") + t;
    char scale[48];
    std::snprintf(scale, sizeof scale, ", scale alpha/r = %g, targets [", double(lora.scale()));
    char share[48];
    std::snprintf(share, sizeof share, " (%.3g%% of %.4g M)", 100.0 * trainable / (trainable + base), (trainable + base) / 1e6);
    log::info("lora: rank " + std::to_string(lora.rank) + scale + targets + "]: " +
              count_of(int64_t(trainable), "trainable parameter") + share +
              "; the model's " + count_of(int64_t(base), "parameter") +
              " are frozen (no gradients, no optimizer state, not in checkpoints)");
    if (const QuantizedBase* apart = stage_->stored_apart()) {
      const size_t numel = apart->table().total_numel();
      char line[256];
      std::snprintf(line, sizeof line,
                    "lora: the base's block weights in %s%s: %.4g M on this rank in %.3f bytes each "
                    "(%.4g MB), turned back into %s where each product runs",
                    config_.lora.base_dtype.c_str(), config_.lora.double_quant ? " (double-quantized scales)" : "",
                    double(numel) / 1e6, double(apart->bytes()) / double(std::max<size_t>(numel, 1)),
                    double(apart->bytes()) / 1e6, dtype_name(backend_->compute_dtype()));
      log::info(line);
    }
  }
  // A validation split of a few windows gives a val_loss of a few examples: said, as it is rarely meant.
  constexpr int64_t kFewWindows = 32;
  if (val_sampler_ && val_sampler_->num_windows() < kFewWindows) {
    log::info("data: warning: data.val holds only " + count_of(val_sampler_->num_windows(), "window") + " of " +
              std::to_string(T + 1) + " tokens (" + count_of(val_data_->total_tokens(), "token") +
              "): val_loss will measure that few examples and move with each of them; give data.val more data "
              "(prepare-data --val-fraction) or leave it out");
  } else if (val_sampler_ && config_.training.eval_interval > 0 && config_.training.eval_batches > 0) {
    const int64_t needed = int64_t{config_.training.eval_batches} * layout.dp() * m * B;
    if (val_sampler_->num_windows() < needed)
      log::info("data: warning: data.val holds " + count_of(val_sampler_->num_windows(), "window") + " of " +
                std::to_string(T + 1) + " tokens, but an evaluation reads " + std::to_string(needed) +
                " (training.eval_batches x the global batch): windows are reused, so val_loss averages repeats");
  }
  for (const std::string& line : format_memory_table(memory_of_ranks_, config_.logging.verbose)) log::info(line);
}

RankState TrainingRun::rank_state() {
  RankState st;
  st.table = &stage_->table();
  st.params = stage_->parameters();
  st.optimizer = optimizer_->tensor_states();
  // The share ZeRO gives this rank (under expert parallelism the ep ranks of a group have the
  // same one, and each saves its own experts and the first also the dense tensors: counts_in_norm).
  const ShardRange share = sync_->shard();
  st.share_begin = share.begin;
  st.share_end = share.end;
  if (st.params.device == kCpu && st.params.dtype == DType::kFloat32) return st;

  // On a GPU: host float32 copies (parameters cast on the device first, a chunk at a time, so a
  // save near the memory limit does not need a float32 copy of the whole stage).
  host_params_.assign(st.params.numel, 0.0f);
  {
    // Under ZeRO 3 only the share is in memory (and all a save writes); a load holds every page
    // first (rank_state_to_load).
    const bool whole = !sharded_ || sharded_->holds_all();
    const size_t from = whole ? 0 : st.share_begin, to = whole ? st.params.numel : st.share_end;
    cast_across(*backend_, host_view(host_params_.data() + from, to - from), st.params.slice(from, to - from));
  }
  st.params = host_view(host_params_.data(), host_params_.size());
  host_optimizer_.assign(3 * st.optimizer.size(), {});
  for (size_t i = 0; i < st.optimizer.size(); ++i) {
    TensorView* views[] = {&st.optimizer[i].master, &st.optimizer[i].exp_avg, &st.optimizer[i].exp_avg_sq};
    for (size_t k = 0; k < 3; ++k) {
      std::vector<float>& host = host_optimizer_[3 * i + k];
      host.resize(views[k]->numel);
      backend_->copy(host_view(host.data(), host.size()), *views[k]);
      *views[k] = host_view(host.data(), host.size());
    }
  }
  return st;
}

RankState TrainingRun::rank_state_to_load() {
  if (sharded_) sharded_->hold_all();
  return rank_state();
}

void TrainingRun::gather_parameters() {
  if (sharded_) sharded_->gather_all();
}

void TrainingRun::rank_state_loaded() {
  const TensorView params = stage_->parameters();
  if (params.device == kCpu && params.dtype == DType::kFloat32) {
    if (sharded_) sharded_->release_all();
    return;
  }
  FEAST_CHECK(host_params_.size() == params.numel, "rank_state_loaded() without rank_state()");
  cast_across(*backend_, params, host_view(host_params_.data(), host_params_.size()));
  const std::vector<AdamW::TensorState> states = optimizer_->tensor_states();
  for (size_t i = 0; i < states.size(); ++i) {
    const TensorView views[] = {states[i].master, states[i].exp_avg, states[i].exp_avg_sq};
    for (size_t k = 0; k < 3; ++k) {
      const std::vector<float>& host = host_optimizer_[3 * i + k];
      backend_->copy(views[k], host_view(host.data(), host.size()));
    }
  }
  if (sharded_) sharded_->release_all();
}

StepResult TrainingRun::step(const StopVote& vote) {
  const ParallelLayout& layout = plan_.layout;
  const int B = config_.parallel.micro_batch_size, m = plan_.micro_batches;
  const int64_t step = state_.step;
  Communicator& world = *groups_.world;
  Timer timer;
  sync_->begin_step();
  if (sharded_) sharded_->begin_step();
  double dp_seconds = 0, data_seconds = 0;
  if (ps_ && ps_->sparse()) {  // the embedding rows this step's batch reads, before its forward
    Timer fill;
    const std::vector<int32_t> tokens = step_tokens();
    data_seconds += fill.seconds();
    Timer pull;
    ps_->pull_rows(tokens, stage_->parameters());
    dp_seconds += pull.seconds();
  }
  const BatchFill fill = context_share([&](int k, int32_t* x, int32_t* y, int32_t* positions) {
    sampler_->fill(state_.data_step(), (int64_t{me_.dp} * m + k) * B, B, x, y, positions);
  });
  // The loss is the mean over the step's counted targets (all of them, unless a loss mask leaves
  // prompt tokens out), as Hugging Face's mean over labels != -100: every rank counts the whole
  // global batch from the masks alone, so the scale is the same at every layout.
  const int64_t global_rows = int64_t{layout.dp()} * m * B;
  const int64_t counted = std::max<int64_t>(1, sampler_->counted_targets(state_.data_step(), 0, int(global_rows)));
  const float loss_scale = float(1.0 / double(counted));
  const double local_loss =
      executor_->train(fill, sync_->sink(), loss_scale, state_.data_step(), int64_t{me_.dp} * m * B,
                       int64_t{layout.dp()} * m);
  sync_->progress();  // before the cool-down's barrier: reductions that finished meanwhile are seen now
  const double backward_waits = sync_->take_wait_seconds();  // ZeRO 2 waiting inside the backward
  // 1F1B's cool-down: the later stages finish their backwards before the first stage does. That
  // wait is the pipeline's idle, measured here, not in whichever collective comes next.
  double cooldown = 0;
  if (layout.pp() > 1) {
    Timer wait;
    groups_.pp->barrier();
    cooldown = wait.seconds();
  }
  Timer dp_timer;
  sync_->finish_step();
  sync_->take_wait_seconds();  // finish_step's waits are in dp_timer
  dp_seconds += dp_timer.seconds() + backward_waits;
  Timer norm_timer;
  // Offloaded: the gradients leave for the host while the norm is reduced.
  optimizer_->start_gradient_copies(sync_->optimizer_grads());
  // One reduction for the loss (owned by one rank), the squared gradient norm (each logical
  // element counted once over tp, pp and dp) and the ranks' votes to stop after this step. The
  // reduction itself is the step's "other" time; the norm and the update are the optimizer's.
  const ShardRange shard = sync_->shard();
  const double my_loss = owns_loss_ ? local_loss : 0.0;
  const double my_squares =
      counted_sum_of_squares(*backend_, stage_->table(), sync_->shard_grads(), shard.begin, shard.end);
  double opt_seconds = norm_timer.seconds();
  // A mixture of experts' step report rides along in the same reduction.
  std::vector<double> reduced = {my_loss, my_squares, vote.interrupt ? 1.0 : 0.0, vote.terminate ? 1.0 : 0.0,
                                 vote.time_limit ? 1.0 : 0.0};
  const bool moe = config_.model.moe.enabled();
  if (moe) {
    const std::vector<double> mine = moe_step_sums();
    reduced.insert(reduced.end(), mine.begin(), mine.end());
  }
  world.allreduce(reduced.data(), reduced.size(), DType::kFloat64)->wait();
  StepResult r;
  if (moe) r.moe = moe_step_report(reduced.data() + 5);
  // The stages return each micro-batch's loss summed over its B T targets and divided by B T
  // (T this rank's share of a sequence; the cp ranks' sums add up to the sequences').
  const double tokens_per_micro_batch = double(B) * local_seq_len();
  r.loss = reduced[0] * tokens_per_micro_batch / double(counted);
  r.grad_norm = std::sqrt(reduced[1]);
  r.lr = state_.learning_rate(config_.training);
  r.stop = {reduced[2] > 0, reduced[3] > 0, reduced[4] > 0};
  r.skipped = !std::isfinite(r.loss) || !std::isfinite(r.grad_norm);
  if (r.skipped) {
    optimizer_->discard_gradient_copies();
    handle_nonfinite(r, std::isfinite(my_loss) && std::isfinite(my_squares));
  }
  Timer opt_timer;
  if (!r.skipped) optimizer_->step(sync_->optimizer_grads(), step + 1, r.lr, r.grad_norm);
  opt_seconds += opt_timer.seconds();
  if (!r.skipped) {  // ZeRO's all-gather of the updated shards, or the workers' pull
    Timer share;
    sync_->share_update(stage_->parameters());
    dp_seconds += share.seconds();
  }
  // A sparse server's workers hold stale embedding rows; the run's last step leaves every copy
  // whole for what reads the weights after training (hooks, exports).
  const bool last_step = step + 1 >= config_.training.steps || r.stop.any() ||
                         (config_.training.exit_at_step > 0 && step + 1 >= config_.training.exit_at_step);
  if (ps_ && last_step) {
    Timer pull;
    ps_->pull_all_rows(stage_->parameters());
    dp_seconds += pull.seconds();
  }
  // ZeRO 3: the gathers the passes waited for are data-parallel time, not compute; the last
  // step leaves every unit whole (for hooks, evaluation, export).
  ReductionTimes gathers;
  if (sharded_) {
    gathers = sharded_->gather_times();
    Timer gather;
    if (last_step) sharded_->gather_all();
    dp_seconds += gather.seconds();
  }
  StageTimes st = executor_->take_times();
  st.compute -= backward_waits;  // counted as data-parallel communication
  st.compute -= gathers.exposed;
  dp_seconds += gathers.exposed;
  st.data += data_seconds;
  st.pp_wait += cooldown;
  r.timing = {timer.seconds(), st,     dp_seconds, opt_seconds, sync_->reduction_times(),
              gathers,         r.skipped ? OffloadTimes{} : optimizer_->offload_times()};
  state_.step = step + 1;
  state_.tokens_seen += tokens_per_step();
  return r;
}

std::vector<double> TrainingRun::moe_step_sums() {
  const ModelConfig& mc = config_.model;
  const int E = mc.moe.n_experts, L = mc.moe_layers();
  const MoeStepTotals mine = stage_->take_moe_step();
  // Every sum once: the tensor-parallel ranks of a stage saw the same routing (its rank 0
  // reports it), the load-balancing loss only on the last stage; each stage's blocks in their
  // place among the model's MoE blocks.
  std::vector<double> v(3 + size_t(L) * size_t(E), 0.0);
  if (me_.tp == 0 && me_.cp == 0) {
    v[0] = mine.aux_loss;
    v[1] = mine.z_loss;
    v[2] = mine.dropped;
    const StageSpec spec = plan_.stage_of(groups_.world->rank());
    int before = 0;
    for (int l = 0; l < spec.chunks.front().first; ++l) before += mc.moe.is_moe_layer(l) ? 1 : 0;
    for (size_t i = 0; i < mine.load.size(); ++i) v[3 + size_t(before) * size_t(E) + i] = mine.load[i];
  }
  return v;
}

MoeStepReport TrainingRun::moe_step_report(const double* v) const {
  const int E = config_.model.moe.n_experts, L = config_.model.moe_layers();
  MoeStepReport r;
  r.aux_loss = v[0];
  r.z_loss = v[1];
  r.dropped = v[2];
  for (int l = 0; l < L; ++l) r.load.emplace_back(v + 3 + long(l) * E, v + 3 + long(l + 1) * E);
  return r;
}

void TrainingRun::handle_nonfinite(const StepResult& r, bool mine_finite) {
  // Which rank's own contribution went bad first: the lowest one (a rare path, so one more
  // reduction costs nothing that matters).
  const int first = lowest_rank_where(*groups_.world, !mine_finite);
  char what[160];
  std::snprintf(what, sizeof what, "step %lld: loss %g, gradient norm %g: not finite (first seen on rank %d)",
                static_cast<long long>(state_.step + 1), r.loss, r.grad_norm, first);
  if (state_.skipped_steps < config_.training.skip_nonfinite) {
    ++state_.skipped_steps;
    log::info(std::string(what) + "; update skipped (" + std::to_string(state_.skipped_steps) + " of " +
              std::to_string(config_.training.skip_nonfinite) + " allowed by training.skip_nonfinite)");
    return;
  }
  throw AgreedError(std::string(what) + "; no checkpoint is written from this state. Lower training.lr, raise " +
                        "training.warmup_steps or allow skipped steps with training.skip_nonfinite",
                    groups_.world->rank() == 0);
}

int64_t TrainingRun::validation_windows() const {
  if (!val_sampler_) return 0;
  const int64_t global = int64_t{plan_.layout.dp()} * plan_.micro_batches * config_.parallel.micro_batch_size;
  const int eval_batches = config_.training.eval_batches;
  return eval_batches > 0 ? eval_batches * global : val_sampler_->num_windows();
}

std::optional<double> TrainingRun::validate() {
  if (!val_sampler_) return std::nullopt;
  if (ps_) ps_->pull_all_rows(stage_->parameters());  // validation batches read any row
  const ParallelLayout& layout = plan_.layout;
  const int B = config_.parallel.micro_batch_size, m = plan_.micro_batches, T = config_.training.seq_len;
  const int local_T = local_seq_len();
  // Batches of the global batch size, their rows dealt to the replicas as a training step's are:
  // the same tokens at every layout. eval_batches = 0 scores every window once; the rows of the
  // last batch past the end get no targets.
  const int64_t global = int64_t{layout.dp()} * m * B, windows = validation_windows();
  const int64_t batches = (windows + global - 1) / global;
  const BatchFill val_fill = context_share([&](int k, int32_t* x, int32_t* y, int32_t* positions) {
    const int64_t batch = k / m, micro = k % m;
    const int64_t first = batch * global + (int64_t{me_.dp} * m + micro) * B;
    val_sampler_->fill(first, B, x, y, positions);
    for (int64_t row = std::max<int64_t>(0, windows - first); row < B; ++row)
      std::fill(y + row * T, y + (row + 1) * T, -1);
  });
  double val = executor_->evaluate(int(batches * m), val_fill);
  val = owns_loss_ ? val : 0.0;
  groups_.world->allreduce(&val, 1, DType::kFloat64)->wait();
  // The windows are the same at every evaluation, so their targets are counted (from the masks)
  // once.
  if (!val_counted_) {
    int64_t counted = 0;
    for (int64_t first = 0; first < windows; first += int64_t{1} << 30)
      counted += val_sampler_->counted_targets(first, int(std::min<int64_t>(windows - first, int64_t{1} << 30)));
    val_counted_ = std::max<int64_t>(counted, 1);
  }
  return val * double(B) * local_T / double(*val_counted_);
}

std::vector<std::pair<std::string, double>> TrainingRun::gradient_norms_per_tensor() {
  const LocalTable& table = stage_->table();
  const std::vector<ParamSpec>& specs = table.logical().specs();
  std::vector<double> squares(specs.size(), 0.0);
  const ShardRange shard = sync_->shard();
  const std::vector<double> mine = counted_squares_per_tensor(*backend_, table, sync_->shard_grads(), shard.begin,
                                                              shard.end);
  for (size_t i = 0; i < mine.size(); ++i) squares[size_t(table.params()[i].logical - specs.data())] += mine[i];
  groups_.world->allreduce(squares.data(), squares.size(), DType::kFloat64)->wait();
  std::vector<std::pair<std::string, double>> out;
  for (size_t i = 0; i < squares.size(); ++i)
    if (specs[i].tied_to < 0) out.emplace_back(specs[i].name, std::sqrt(squares[i]));
  return out;
}

}  // namespace feast
