// Tests of the config parser: defaults, every class of error message, --set overrides, origins,
// the Llama family's keys and the key list. The to_toml round trip, config files, init_from and
// the key reference in docs/ are tested in config_files_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "config/config.h"
#include "tests/config/config_test_helpers.h"

namespace feast {
namespace {

using namespace ::feast::testing;  // config_test_helpers.h

// The ConfigError message of parsing `text` as "demo.toml" with `overrides`; fails the test
// when parsing succeeds.
std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    parse_config(text, "demo.toml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError for:\n" << text;
  return "";
}

TEST(Config, Defaults) {
  Config c = parse_config("", "empty.toml", {});
  EXPECT_EQ(c.model.arch, "gpt2");
  EXPECT_EQ(c.model.n_layer, 4);
  EXPECT_EQ(c.training.steps, 100);
  EXPECT_EQ(c.training.seed, 1337u);
  EXPECT_EQ(c.training.device, "cpu");
  EXPECT_DOUBLE_EQ(c.training.lr, 1e-3);
  EXPECT_EQ(c.training.lr_schedule, "cosine");
  EXPECT_EQ(c.parallel.dp, 0);
  EXPECT_EQ(c.logging.dir, "");  // a new directory per run, settled at start
  EXPECT_EQ(c.checkpoint.dir, "");  // follows the settled logging.dir
  EXPECT_EQ(c.where("training.steps"), "default");
  // Every key has an origin, even when nothing set it.
  EXPECT_EQ(c.origin.size(), config_keys().size());
}

TEST(Config, ParsesEverySectionAndIntegerForFloat) {
  Config c = parse(
      "[model]\nn_layer = 2\nn_head = 2\nn_embd = 64\n"
      "[parallel]\nmicro_batch_size = 3\n"
      "[training]\nsteps = 7\nlr = 1\nmin_lr = 0\ndevice = \"cuda\"\n"
      "[data]\ntrain = \"a/train_*.bin\"\nval = \"a/val_*.bin\"\n"
      "[checkpoint]\nkeep = 5\n"
      "[logging]\ninterval = 2\n");
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_EQ(c.model.n_embd, 64);
  EXPECT_EQ(c.parallel.micro_batch_size, 3);
  EXPECT_EQ(c.training.steps, 7);
  EXPECT_DOUBLE_EQ(c.training.lr, 1.0);
  EXPECT_EQ(c.training.device, "cuda");
  EXPECT_EQ(c.data.train, "a/train_*.bin");
  EXPECT_EQ(c.data.val, "a/val_*.bin");
  EXPECT_EQ(c.checkpoint.keep, 5);
  EXPECT_EQ(c.logging.interval, 2);
}

TEST(Config, DottedKeysAndInlineTables) {
  Config c = parse("training.steps = 9\nmodel = { n_layer = 3 }\n");
  EXPECT_EQ(c.training.steps, 9);
  EXPECT_EQ(c.model.n_layer, 3);
}

TEST(ConfigErrors, SyntaxErrorHasLineAndColumn) {
  std::string e = error_of("[training]\nsteps = = 3\n");
  EXPECT_NE(e.find("demo.toml:2:"), std::string::npos) << e;
  EXPECT_NE(e.find("TOML syntax error"), std::string::npos) << e;
}

TEST(ConfigErrors, UnknownKeySuggestsNearest) {
  std::string e = error_of("[training]\nsteps = 3\n\nstpes = 300\n");
  EXPECT_EQ(e, "demo.toml:4: unknown key 'training.stpes'; did you mean 'training.steps'?");
}

TEST(ConfigErrors, KeyInWrongSectionSuggestsItsSection) {
  std::string e = error_of("[training]\nn_layer = 3\n");
  EXPECT_NE(e.find("demo.toml:2: unknown key 'training.n_layer'"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'model.n_layer'?"), std::string::npos) << e;
}

TEST(ConfigErrors, UnknownKeyWithoutCloseMatchListsSection) {
  std::string e = error_of("[logging]\nwandb_project = \"x\"\n");
  EXPECT_NE(e.find("unknown key 'logging.wandb_project'"), std::string::npos) << e;
  EXPECT_NE(e.find("valid keys in [logging]: dir, interval"), std::string::npos) << e;
}

TEST(ConfigErrors, UnknownSection) {
  std::string e = error_of("\n[trainig]\nsteps = 3\n");
  EXPECT_EQ(e, "demo.toml:2: unknown section '[trainig]'; did you mean '[training]'?");
  e = error_of("[optimizer]\nlr = 3\n");
  EXPECT_NE(e.find("unknown section '[optimizer]'; valid sections: model, parallel"),
            std::string::npos)
      << e;
}

TEST(ConfigErrors, TopLevelKeySuggestsItsSection) {
  std::string e = error_of("steps = 3\n");
  EXPECT_EQ(e, "demo.toml:1: unknown key 'steps' outside any section; did you mean "
               "'training.steps'?");
}

TEST(ConfigErrors, WrongType) {
  std::string e = error_of("[training]\n\nsteps = \"300\"\n");
  EXPECT_EQ(e, "demo.toml:3: wrong type for training.steps: expected integer, got string \"300\"");
  e = error_of("[training]\nsteps = 3.5\n");
  EXPECT_NE(e.find("expected integer, got float 3.5"), std::string::npos) << e;
  e = error_of("[training]\nlr = \"fast\"\n");
  EXPECT_NE(e.find("training.lr: expected float, got string"), std::string::npos) << e;
  e = error_of("[training]\ndevice = 1\n");
  EXPECT_NE(e.find("training.device: expected string, got integer 1"), std::string::npos) << e;
  e = error_of("[training]\nsteps = true\n");
  EXPECT_NE(e.find("got boolean true"), std::string::npos) << e;
}

TEST(ConfigErrors, TableWhereScalarExpected) {
  std::string e = error_of("[training.steps]\nx = 1\n");
  EXPECT_NE(e.find("wrong type for training.steps: expected integer, got table"),
            std::string::npos)
      << e;
  e = error_of("[training]\nseq_len = [64]\n");
  EXPECT_NE(e.find("expected integer, got array"), std::string::npos) << e;
}

TEST(ConfigErrors, ScalarWhereSectionExpected) {
  std::string e = error_of("training = 5\n");
  EXPECT_EQ(e, "demo.toml:1: 'training' must be a section ([training]), got integer 5");
  e = error_of("[[model]]\nn_layer = 1\n");
  EXPECT_NE(e.find("'model' must be a section ([model]), got array"), std::string::npos) << e;
}

TEST(ConfigErrors, OutOfRange) {
  struct Case {
    std::string text, expected;
  };
  const std::vector<Case> cases = {
      {"[training]\nsteps = 0", "demo.toml:2: training.steps = 0 is not allowed; expected >= 1"},
      {"[parallel]\ntimeout_s = 1e10", "parallel.timeout_s = 1e+10 is not allowed; expected in [1, 604800]"},
      {"[parallel]\ntimeout_s = 1e-9", "expected in [1, 604800]"},
      {"[training]\nthreads = 100000", "training.threads = 100000 is not allowed; expected in [0, 1024]"},
      {"[training]\nseed = -1", "training.seed = -1 is not allowed; expected >= 0"},
      {"[model]\nn_layer = 0", "model.n_layer = 0 is not allowed; expected >= 1"},
      {"[model]\nn_head = -2", "model.n_head = -2 is not allowed; expected >= 1"},
      {"[model]\nvocab_size = 1", "expected in [2, 2147483647]"},
      {"[model]\nmax_seq_len = 0", "model.max_seq_len = 0"},
      {"[model]\ninit_std = 0", "model.init_std = 0 is not allowed; expected > 0"},
      {"[model]\narch = \"bert\"", "model.arch = \"bert\" is not allowed; expected one of \"gpt2\", \"llama\""},
      {"[model]\nn_kv_head = -1", "model.n_kv_head = -1 is not allowed; expected >= 0"},
      {"[model]\nnorm_eps = 0", "model.norm_eps = 0 is not allowed; expected > 0"},
      {"[model]\nrope_theta = 0", "model.rope_theta = 0 is not allowed; expected > 0"},
      {"[model]\nqkv_bias = 1", "wrong type for model.qkv_bias: expected boolean, got integer 1"},
      {"[model]\ntie_embeddings = \"yes\"", "wrong type for model.tie_embeddings: expected boolean"},
      {"[training]\nseq_len = 0", "training.seq_len = 0"},
      {"[training]\nlr = 0", "training.lr = 0 is not allowed; expected > 0"},
      {"[training]\nlr = -1e-3", "training.lr = -0.001 is not allowed; expected > 0"},
      {"[training]\nlr = nan", "expected a finite number > 0"},
      {"[training]\nmin_lr = -1.0", "training.min_lr = -1.0 is not allowed; expected >= 0"},
      {"[training]\nwarmup_steps = -1", "training.warmup_steps = -1"},
      {"[training]\nlr_schedule = \"step\"",
       "expected one of \"cosine\", \"linear\", \"constant\""},
      {"[training]\ndevice = \"gpu\"",
       "training.device = \"gpu\" is not allowed; expected one of \"cpu\", \"cuda\""},
      {"[training]\nweight_decay = -0.1", "training.weight_decay = -0.1"},
      {"[training]\nbeta1 = 1.0", "training.beta1 = 1.0 is not allowed; expected in [0, 1)"},
      {"[training]\nbeta2 = -0.5", "training.beta2 = -0.5 is not allowed; expected in [0, 1)"},
      {"[training]\neps = 0.0", "training.eps = 0.0 is not allowed; expected > 0"},
      {"[training]\ngrad_clip = -1", "training.grad_clip = -1"},
      {"[training]\neval_interval = -5", "training.eval_interval = -5"},
      {"[training]\neval_batches = -1", "training.eval_batches = -1"},
      {"[training]\nthreads = -1", "training.threads = -1"},
      {"[parallel]\ntp = 0", "parallel.tp = 0 is not allowed; expected >= 1"},
      {"[parallel]\npp = 0", "parallel.pp = 0"},
      {"[parallel]\ndp = -1", "parallel.dp = -1 is not allowed; expected >= 0"},
      {"[parallel]\nmicro_batch_size = 0", "parallel.micro_batch_size = 0"},
      {"[parallel]\nnum_micro_batches = 0", "parallel.num_micro_batches = 0"},
      {"[checkpoint]\ninterval = -1", "checkpoint.interval = -1"},
      {"[checkpoint]\nkeep = 0", "checkpoint.keep = 0"},
      {"[checkpoint]\nresume = \"\"", "checkpoint.resume = \"\" is not allowed; expected a non-empty"},
      {"[logging]\ninterval = 0", "logging.interval = 0"},
      {"[data]\ntrain = \"\"", "data.train = \"\" is not allowed; expected a non-empty string"},
      {"[training]\nrecompute = \"partial\"",
       "training.recompute = \"partial\" is not allowed; expected one of \"none\", \"selective\", \"full\""},
      {"[training]\nrecompute_layers = -1", "training.recompute_layers = -1 is not allowed; expected >= 0"},
      {"[parallel]\nzero_stage = 4", "parallel.zero_stage = 4 is not allowed; expected in [0, 3]"},
  };
  for (const Case& c : cases) {
    std::string e = error_of(c.text + "\n");
    EXPECT_NE(e.find(c.expected), std::string::npos) << c.text << "\n  -> " << e;
    EXPECT_NE(e.find("demo.toml:2: "), std::string::npos) << c.text << "\n  -> " << e;
  }
}

TEST(ConfigErrors, IntegerOverflowIsAnErrorNotAWrap) {
  std::string e = error_of("[model]\nn_layer = 1000000000000\n");
  EXPECT_EQ(e, "demo.toml:2: model.n_layer = 1000000000000 does not fit in a 32-bit integer "
               "(max 2147483647)");
  e = error_of("[model]\nn_layer = -4294967295\n");
  EXPECT_NE(e.find("does not fit in a 32-bit integer"), std::string::npos) << e;
  // Beyond int64 toml++ itself refuses the number.
  e = error_of("[training]\nsteps = 99999999999999999999\n");
  EXPECT_NE(e.find("demo.toml:2:"), std::string::npos) << e;
  EXPECT_NE(e.find("TOML syntax error"), std::string::npos) << e;
}

TEST(ConfigErrors, CrossKeyChecksNameBothKeys) {
  struct Case {
    std::string text, expected;
  };
  const std::vector<Case> cases = {
      {"[model]\nn_head = 3\nn_embd = 128\n",
       "demo.toml:3: model.n_embd = 128 must be divisible by model.n_head = 3 (demo.toml:2)"},
      {"[training]\nseq_len = 512\n",
       "demo.toml:2: training.seq_len = 512 must be <= model.max_seq_len = 256 (default)"},
      {"[training]\nrecompute_layers = 2\n",
       "demo.toml:2: training.recompute_layers = 2 names blocks that recompute, but training.recompute = \"none\" "
       "(default); set training.recompute = \"selective\" or \"full\", or remove training.recompute_layers"},
      {"[parallel]\nsequence_parallel = true\n",
       "demo.toml:2: parallel.sequence_parallel = true splits tokens over the tensor-parallel ranks, but "
       "parallel.tp = 1 (default); set parallel.tp to 2 or more, or remove parallel.sequence_parallel"},
      {"[parallel]\ntp = 4\nsequence_parallel = true\n[training]\nseq_len = 30\n",
       "demo.toml:3: parallel.sequence_parallel = true splits each sequence over parallel.tp = 4 ranks "
       "(demo.toml:2), which does not divide training.seq_len = 30 (demo.toml:5); choose a seq_len that "
       "tp divides, or remove parallel.sequence_parallel"},
      {"[parallel]\nschedule = \"zero-bubble\"\n[training]\nrecompute = \"full\"\n",
       "demo.toml:2: parallel.schedule = \"zero-bubble\" runs each block's weight gradients after its input "
       "gradients, from what its forward kept, but training.recompute = \"full\" (demo.toml:4) keeps less; use "
       "parallel.schedule = \"1f1b\" with recomputation, or training.recompute = \"none\" with zero-bubble"},
      {"[parallel]\nschedule = \"interleaved-1f1b\"\n",
       "demo.toml:2: parallel.schedule = \"interleaved-1f1b\" needs parallel.virtual_stages >= 2 model chunks per "
       "stage, but it is 1 (default); set it, or use parallel.schedule = \"1f1b\""},
      {"[parallel]\nvirtual_stages = 2\n",
       "demo.toml:2: parallel.virtual_stages = 2 applies to parallel.schedule = \"interleaved-1f1b\", but the "
       "schedule is \"1f1b\" (default); set the schedule, or remove parallel.virtual_stages"},
      {"[parallel]\nschedule = \"interleaved-1f1b\"\nvirtual_stages = 2\n",
       "demo.toml:2: parallel.schedule = \"interleaved-1f1b\" interleaves chunks of layers over pipeline stages "
       "and needs parallel.pp >= 2 (default); use parallel.schedule = \"1f1b\" at pp = 1"},
      {"[parallel]\npp = 2\nzero_stage = 3\nschedule = \"interleaved-1f1b\"\nvirtual_stages = 2\n",
       "demo.toml:3: parallel.zero_stage = 3 gathers each block's parameters in the order a contiguous stage runs "
       "them; parallel.schedule = \"interleaved-1f1b\" (demo.toml:4) is not supported with it; use zero_stage 1 "
       "or 2, or schedule \"1f1b\""},
      {"[parallel]\ncp = 3\n[training]\nseq_len = 64\n",
       "demo.toml:2: parallel.cp = 3 splits each sequence into 2 * cp = 6 equal chunks, which does not divide "
       "training.seq_len = 64 (demo.toml:4); choose a seq_len that 2 * cp divides, or another parallel.cp"},
      {"[parallel]\ntp = 4\ncp = 4\nsequence_parallel = true\n[training]\nseq_len = 8\n",
       "demo.toml:4: parallel.sequence_parallel = true splits each context-parallel rank's share of a sequence "
       "over parallel.tp = 4 ranks (demo.toml:2), which does not divide training.seq_len / parallel.cp = 2 "
       "(demo.toml:6); choose a seq_len that tp * cp divides, or remove parallel.sequence_parallel"},
      {"[model]\nn_embd = 1024\nn_head = 2\n[parallel]\ncp = 2\n[training]\ndevice = \"cuda\"\n",
       "demo.toml:5: parallel.cp = 2 on training.device = \"cuda\" runs attention through ring kernels that take "
       "head sizes up to 256, but model.n_embd / model.n_head = 512; set parallel.cp = 1 or use more heads"},
      {"[parallel]\ncp = 2\ndp_sync = \"parameter-server\"\nzero_stage = 0\n",
       "demo.toml:2: parallel.cp = 2 needs parallel.dp_sync = \"allreduce\" (demo.toml:3): the parameter "
       "server serves data-parallel replicas only; set parallel.cp = 1 or parallel.dp_sync = \"allreduce\""},
      {"[training]\nlr = 1e-4\nmin_lr = 1e-3\n",
       "demo.toml:3: training.min_lr = 0.001 must be <= training.lr = 1e-4 (demo.toml:2)"},
  };
  for (const Case& c : cases) EXPECT_EQ(error_of(c.text), c.expected) << c.text;
}

// [lora]: targets the family lacks, a dropout not implemented, keys without a rank, and what LoRA
// cannot run with, each refused naming the key and its line.
TEST(ConfigErrors, LoraKeys) {
  struct Case {
    std::string text, expected;
  };
  const std::vector<Case> cases = {
      {"[lora]\nrank = 8\ntargets = [\"q\", \"gate\"]\n",
       "demo.toml:3: lora.targets names \"q\", which a gpt2 model does not have; its products are qkv, proj, fc, "
       "fc_proj"},
      {"[model]\narch = \"llama\"\n[lora]\nrank = 8\ntargets = [\"qkv\"]\n",
       "demo.toml:5: lora.targets names \"qkv\", which a llama model does not have; its products are q, k, v, o, "
       "gate, up, down"},
      {"[lora]\nrank = 8\ntargets = [\"qkv\", \"qkv\"]\n", "demo.toml:3: lora.targets names \"qkv\" twice"},
      {"[lora]\nrank = 8\ndropout = 0.05\n[parallel]\ncp = 2\n",
       "demo.toml:3: lora.dropout = 0.05 draws its masks by each token's place in its sequence, which parallel.cp = 2 "
       "(demo.toml:5) splits over ranks; set parallel.cp = 1 or lora.dropout = 0"},
      {"[lora]\nrank = 8\ndropout = 1.0\n", "lora.dropout"},
      {"[lora]\ntargets = [\"qkv\"]\n",
       "demo.toml:2: lora.targets is set but lora.rank = 0 (default): no adapters; set lora.rank (for example 8) "
       "to fine-tune with LoRA, or remove lora.targets"},
      {"[lora]\nrank = 8\n[parallel]\nzero_stage = 3\n",
       "demo.toml:4: parallel.zero_stage = 3 cannot run with LoRA (lora.rank = 8, demo.toml:2): the "
       "adapters are small and the frozen base is not sharded; use zero_stage 1 or 2"},
      {"[lora]\nrank = 8\n[parallel]\npp = 2\nschedule = \"zero-bubble\"\n",
       "demo.toml:5: parallel.schedule = \"zero-bubble\" cannot run with LoRA (lora.rank = 8, "
       "demo.toml:2): its split backward has no adapter path; use \"1f1b\" or \"interleaved-1f1b\""},
      {"[lora]\nrank = 8\ntargets = \"q\"\n", "lora.targets"},
      // QLoRA: a quantized base needs adapters; double quantization needs nf4; the formats.
      {"[lora]\nbase_dtype = \"nf4\"\n",
       "demo.toml:2: lora.base_dtype = \"nf4\" stores a frozen base, but lora.rank = 0 (default) trains every "
       "weight (full fine-tuning), which cannot be kept in nf4; set lora.rank (for example 8) to train adapters "
       "over a frozen base, or remove lora.base_dtype"},
      {"[lora]\nrank = 8\ndouble_quant = true\n",
       "demo.toml:3: lora.double_quant = true quantizes the scales of an nf4 base, but lora.base_dtype = \"auto\" "
       "(default); set lora.base_dtype = \"nf4\" or remove lora.double_quant"},
      {"[lora]\nrank = 8\nbase_dtype = \"int4\"\n", "lora.base_dtype"},
  };
  for (const Case& c : cases) {
    const std::string e = error_of(c.text + kData);
    EXPECT_NE(e.find(c.expected), std::string::npos) << c.text << "\n  -> " << e;
  }
  // The family's default targets, as PEFT's.
  EXPECT_EQ(lora_spec(parse(kData + "[lora]\nrank = 8\n")).targets, std::vector<std::string>{"qkv"});
  EXPECT_EQ(lora_spec(parse(kData + "[model]\narch = \"llama\"\n[lora]\nrank = 8\n")).targets,
            (std::vector<std::string>{"q", "v"}));
}

// [model.moe]: top_k beyond the experts, no block left MoE, keys of a dense model, another family,
// and what MoE blocks cannot run with, each refused naming the keys and their lines.
TEST(ConfigErrors, MoeKeys) {
  const std::string llama = "[model]\narch = \"llama\"\n[model.moe]\nn_experts = 4\n";
  struct Case {
    std::string text, expected;
  };
  const std::vector<Case> cases = {
      {llama + "top_k = 5\n", 
       "demo.toml:5: model.moe.top_k = 5 experts per token, but model.moe.n_experts = 4 (demo.toml:4); choose top_k <= "
       "n_experts"},
      {llama + "every = 5\n", 
       "demo.toml:5: model.moe.every = 5 makes block l MoE when (l + 1) % every == 0, and none of the "
       "model.n_layer = 4 blocks is; choose every <= n_layer"},
      {"[model]\narch = \"llama\"\n[model.moe]\ntop_k = 1\n", 
       "demo.toml:4: model.moe.top_k = 1 configures mixture-of-experts blocks, but model.moe.n_experts = 0 "
       "(default): the model is dense; set model.moe.n_experts or remove model.moe.top_k"},
      {"[model.moe]\nn_experts = 4\n", 
       "demo.toml:2: model.moe.n_experts = 4 applies to model.arch = \"llama\", but model.arch = \"gpt2\" "
       "(default); remove it or set model.arch = \"llama\""},
      {llama + "shared_expert_gate = true\n", 
       "demo.toml:5: model.moe.shared_expert_gate = true gates the shared experts, but "
       "model.moe.n_shared_experts = 0 (default); set n_shared_experts or remove shared_expert_gate"},
      {llama + "[lora]\nrank = 8\n", 
       "demo.toml:6: LoRA (lora.rank = 8) cannot run with mixture-of-experts blocks (model.moe.n_experts = 4, "
       "demo.toml:4): fine-tune every weight (lora.rank = 0)"},
      {llama + "[parallel]\ntp = 2\nsequence_parallel = true\n", 
       "demo.toml:7: parallel.sequence_parallel = true cannot run with mixture-of-experts blocks "
       "(model.moe.n_experts = 4, demo.toml:4): the router needs every token of the micro-batch on each "
       "tensor-parallel rank; remove it"},
      {llama + "[parallel]\ncp = 2\n", 
       "demo.toml:6: parallel.cp = 2 cannot run with mixture-of-experts blocks (model.moe.n_experts = 4, "
       "demo.toml:4): the load-balancing loss is over whole micro-batches; set parallel.cp = 1"},
      {llama + "[parallel]\nep = 3\n",
       "demo.toml:6: parallel.ep = 3 does not divide model.moe.n_experts = 4 (demo.toml:4): every expert-parallel "
       "rank runs as many experts; choose an ep that divides n_experts"},
      {llama + "[parallel]\nep = 2\ndp_sync = \"parameter-server\"\n",
       "demo.toml:7: parallel.dp_sync = \"parameter-server\" serves every data-parallel replica the same tensors, "
       "but parallel.ep = 2 (demo.toml:6) gives each rank of an ep group its own experts; use parallel.dp_sync = "
       "\"allreduce\" or parallel.ep = 1"},
      {"[parallel]\nep = 2\n",
       "demo.toml:2: parallel.ep = 2 divides a mixture of experts' experts over ranks, but model.moe.n_experts = 0 "
       "(default): the model is dense; remove parallel.ep or set model.moe.n_experts"},
      {llama + "[parallel]\npp = 2\nschedule = \"zero-bubble\"\n", 
       "demo.toml:7: parallel.schedule = \"zero-bubble\" cannot run with mixture-of-experts blocks "
       "(model.moe.n_experts = 4, demo.toml:4): its blocks run whole backwards in one chunk per stage; use "
       "\"1f1b\" or \"gpipe\""},
  };
  for (const Case& c : cases) EXPECT_EQ(error_of(c.text), c.expected) << c.text;
}

TEST(ConfigErrors, DocumentMaskKeys) {
  // Ring attention has no document boundaries; the end-of-text id must be a token of the model.
  EXPECT_EQ(error_of("[data]\ntrain = \"t.bin\"\ndocument_mask = true\n[parallel]\ncp = 2\n"),
            "demo.toml:3: data.document_mask = true needs every document's keys on one rank, but parallel.cp = 2 "
            "(demo.toml:5) splits each sequence over ranks whose ring attention has no document boundaries; set "
            "parallel.cp = 1 or data.document_mask = false");
  EXPECT_EQ(error_of("[data]\ntrain = \"t.bin\"\neos_id = 256\n"),
            "demo.toml:3: data.eos_id = 256 must be < model.vocab_size = 256 (default)");
  EXPECT_NE(error_of("[data]\ntrain = \"t.bin\"\neos_id = -2\n").find("data.eos_id"), std::string::npos);
  const Config c = parse(kData, {"data.document_mask=true", "data.eos_id=10"});
  EXPECT_TRUE(c.data.document_mask);
  EXPECT_EQ(c.data.eos_id, 10);
}

// A default that no longer fits follows the key it depends on; a value someone wrote does not.
TEST(ConfigDefaults, SeqLenFollowsAShorterContext) {
  const Config c = parse("[model]\nmax_seq_len = 32\n");
  EXPECT_EQ(c.training.seq_len, 32);
  EXPECT_EQ(c.where("training.seq_len"), "inferred: model.max_seq_len is below the default");
  EXPECT_EQ(parse("[model]\nmax_seq_len = 100\n").training.seq_len, Config().training.seq_len);
  EXPECT_EQ(error_of("[model]\nmax_seq_len = 32\n[training]\nseq_len = 64\n"),
            "demo.toml:4: training.seq_len = 64 must be <= model.max_seq_len = 32 (demo.toml:2)");
}

TEST(ConfigOverrides, IntFloatAndStrings) {
  Config c = parse(kData, {"training.steps=42", "training.lr=3e-4", "training.device=cuda",
                           "data.train=data/x/train_*.bin", "data.val=\"with space.bin\"",
                           "model.init_std = 1"});
  EXPECT_EQ(c.training.steps, 42);
  EXPECT_DOUBLE_EQ(c.training.lr, 3e-4);
  EXPECT_EQ(c.training.device, "cuda");
  EXPECT_EQ(c.data.train, "data/x/train_*.bin");
  EXPECT_EQ(c.data.val, "with space.bin");
  EXPECT_DOUBLE_EQ(c.model.init_std, 1.0);
}

TEST(ConfigOverrides, ApplyAfterTheFileInOrder) {
  Config c = parse("[training]\nsteps = 5\n", {"training.steps=6", "training.steps=7"});
  EXPECT_EQ(c.training.steps, 7);
  // A cross-key rule sees the final values: the override fixes what the file alone breaks.
  c = parse("[training]\nseq_len = 512\n", {"model.max_seq_len=1024"});
  EXPECT_EQ(c.training.seq_len, 512);
}

TEST(ConfigOverrides, Errors) {
  EXPECT_EQ(error_of("", {"training.steps=abc"}),
            "--set training.steps=abc: wrong type for training.steps: expected integer, got "
            "string \"abc\"");
  EXPECT_EQ(error_of("", {"training.stpes=3"}),
            "--set training.stpes=3: unknown key 'training.stpes'; did you mean "
            "'training.steps'?");
  EXPECT_EQ(error_of("", {"training.steps"}),
            "--set 'training.steps': expected section.key=value, e.g. --set training.steps=100");
  EXPECT_NE(error_of("", {"steps=3"}).find("--set 'steps=3': expected section.key=value"),
            std::string::npos);
  EXPECT_NE(error_of("", {"training.steps=0"}).find("--set training.steps=0: training.steps = 0 "
                                                    "is not allowed; expected >= 1"),
            std::string::npos);
  EXPECT_NE(error_of("", {"data.val=\"unterminated"}).find("bad TOML value"), std::string::npos);
  // A number TOML cannot hold is that, not a string.
  for (const char* set : {"training.lr=1e400", "training.seed=18446744073709551615"}) {
    const std::string e = error_of("", {set});
    EXPECT_NE(e.find("bad TOML value for training."), std::string::npos) << e;
    EXPECT_EQ(e.find("got string"), std::string::npos) << e;
  }
  EXPECT_NE(error_of("", {"data.val="}).find("missing value"), std::string::npos);
  EXPECT_NE(error_of("", {"training.seed=1\nmodel.n_layer = 2"}).find("single TOML value"),
            std::string::npos);
  // The cross-key message points at --set when the override caused it.
  EXPECT_EQ(error_of("", {"training.seq_len=300"}),
            "--set: training.seq_len = 300 must be <= model.max_seq_len = 256 (default)");
}

TEST(ConfigOrigins, FileLineSetAndDefault) {
  Config c = parse("# comment\n[training]\nsteps = 5\nseed = 3\n", {"training.seed=4"});
  EXPECT_EQ(c.where("training.steps"), "demo.toml:3");
  EXPECT_EQ(c.where("training.seed"), "--set");
  EXPECT_EQ(c.where("training.lr"), "default");
  EXPECT_EQ(c.origin.at("training.steps"), "demo.toml:3");
}

TEST(ConfigLlama, KeysAndTheRopeScalingTable) {
  Config c = parse(
      "[model]\narch = \"llama\"\nn_head = 8\nn_kv_head = 2\nqkv_bias = true\n"
      "[model.rope_scaling]\nrope_type = \"llama3\"\nfactor = 8.0\n",
      {"model.rope_scaling.original_max_position_embeddings=8192", "model.rope_theta=5e5"});
  EXPECT_TRUE(c.model.is_llama());
  EXPECT_EQ(c.model.kv_heads(), 2);
  EXPECT_TRUE(c.model.qkv_bias);
  EXPECT_EQ(c.model.rope_scaling.rope_type, "llama3");
  EXPECT_EQ(c.model.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.model.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.model.rope_theta, 5e5);
  EXPECT_EQ(c.where("model.rope_scaling.factor"), "demo.toml:8");
  EXPECT_EQ(c.where("model.rope_scaling.original_max_position_embeddings"), "--set");
  // The families' defaults: Llama unties its head and uses Meta's MLP width, GPT-2 ties and 4 C.
  EXPECT_FALSE(c.model.tied());
  EXPECT_EQ(c.model.mlp_width(), (8 * 128 / 3 + 255) / 256 * 256);
  const Config g = parse("[model]\nn_embd = 64\n");
  EXPECT_TRUE(g.model.tied());
  EXPECT_EQ(g.model.mlp_width(), 256);
  EXPECT_EQ(g.model.kv_heads(), g.model.n_head);
}

TEST(ConfigLlama, FamilyErrorsNameTheKeys) {
  std::string e = error_of("[model]\narch = \"gpt2\"\nn_kv_head = 2\n");
  EXPECT_NE(e.find("demo.toml:3: model.n_kv_head = 2 applies to model.arch = \"llama\", but model.arch = \"gpt2\" "
                   "(demo.toml:2)"),
            std::string::npos)
      << e;
  e = error_of("[model.rope_scaling]\nrope_type = \"llama3\"\n");
  EXPECT_NE(e.find("model.rope_scaling.rope_type = \"llama3\" applies to model.arch = \"llama\""), std::string::npos) << e;
  e = error_of("[model]\narch = \"llama\"\nn_head = 4\nn_kv_head = 3\n");
  EXPECT_NE(e.find("model.n_kv_head = 3 must be a divisor of model.n_head = 4"), std::string::npos) << e;
  e = error_of("[model]\narch = \"llama\"\nn_head = 4\nn_embd = 12\n");
  EXPECT_NE(e.find("rotary embeddings need an even head size"), std::string::npos) << e;
  e = error_of("[model]\narch = \"llama\"\n[model.rope_scaling]\nrope_type = \"llama3\"\nlow_freq_factor = 4.0\n");
  EXPECT_NE(e.find("model.rope_scaling.low_freq_factor = 4.0 must be < model.rope_scaling.high_freq_factor = 4.0"),
            std::string::npos)
      << e;
  e = error_of("[model]\nrope_scaling = 3\n");
  EXPECT_NE(e.find("'model.rope_scaling' must be a section ([model.rope_scaling]), got integer 3"), std::string::npos)
      << e;
  e = error_of("[model.rope_scaling]\nfactr = 2.0\n");
  EXPECT_NE(e.find("unknown key 'model.rope_scaling.factr'; did you mean 'model.rope_scaling.factor'?"),
            std::string::npos)
      << e;
}

TEST(ConfigLlama, TheTieInUseIsPrintedAndMarkedInferred) {
  const std::string text = to_toml(parse(kData + "[model]\narch = \"llama\"\n"));
  EXPECT_NE(text.find("tie_embeddings = false"), std::string::npos) << text;
  EXPECT_NE(text.find("[inferred from model.arch]"), std::string::npos) << text;
  EXPECT_FALSE(parse_config(text, "resolved.toml", {}).model.tied());
  EXPECT_NE(to_toml(parse(kData)).find("tie_embeddings = true"), std::string::npos);
}

TEST(ConfigKeys, EveryKeyIsSectionDotName) {
  const std::vector<std::string> keys = config_keys();
  EXPECT_GE(keys.size(), 40u);
  for (const std::string& k : keys) {
    EXPECT_NE(k.find('.'), std::string::npos) << k;
    EXPECT_EQ(std::count(keys.begin(), keys.end(), k), 1) << k << " listed twice";
  }
  EXPECT_NE(std::find(keys.begin(), keys.end(), "parallel.micro_batch_size"), keys.end());
}

}  // namespace
}  // namespace feast
