// Tests of the config parser: defaults, every class of error message, --set overrides, origins,
// the to_toml round trip, the shipped configs in configs/ and the key reference in docs/.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "config/config.h"

namespace feast {
namespace {

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

Config parse(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return parse_config(text, "demo.toml", overrides);
}

const std::string kData = "[data]\ntrain = \"t.bin\"\n";

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
  std::string e = error_of("[model]\nn_head = 3\nn_embd = 128\n");
  EXPECT_EQ(e, "demo.toml:3: model.n_embd = 128 must be divisible by model.n_head = 3 "
               "(demo.toml:2)");
  e = error_of("[training]\nseq_len = 512\n");
  EXPECT_EQ(e, "demo.toml:2: training.seq_len = 512 must be <= model.max_seq_len = 256 (default)");
  e = error_of("[training]\nlr = 1e-4\nmin_lr = 1e-3\n");
  EXPECT_EQ(e, "demo.toml:3: training.min_lr = 0.001 must be <= training.lr = 1e-4 "
               "(demo.toml:2)");
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

// A config with every key away from its default, so that a key missing from the round trip
// shows up as a difference.
Config unusual_config() {
  Config c;
  c.model.arch = "llama";
  c.model.n_kv_head = 1;
  c.model.intermediate_size = 200;
  c.model.norm_eps = 1e-6;
  c.model.rope_theta = 500000.0;
  c.model.qkv_bias = true;
  c.model.tie_embeddings = true;
  c.model.rope_scaling.rope_type = "llama3";
  c.model.rope_scaling.factor = 32.0;
  c.model.rope_scaling.low_freq_factor = 0.5;
  c.model.rope_scaling.high_freq_factor = 2.5;
  c.model.rope_scaling.original_max_position_embeddings = 4096;
  c.model.n_layer = 7;
  c.model.n_head = 3;
  c.model.n_embd = 96;
  c.model.vocab_size = 50257;
  c.model.max_seq_len = 333;
  c.model.init_std = 0.1 + 0.2;  // not exactly 0.3: the shortest text must still read back
  c.parallel.tp = 2;
  c.parallel.pp = 3;
  c.parallel.dp = 5;
  c.parallel.micro_batch_size = 6;
  c.parallel.num_micro_batches = 7;
  c.training.steps = 1234567890123;
  c.training.seed = 9223372036854775807u;
  c.training.device = "cuda";
  c.training.seq_len = 300;
  c.training.lr = 6e-4;
  c.training.min_lr = 1.0 / 3.0 * 1e-4;
  c.training.warmup_steps = 11;
  c.training.lr_schedule = "linear";
  c.training.weight_decay = 0.0;
  c.training.beta1 = 0.8;
  c.training.beta2 = 0.999;
  c.training.eps = 1e-12;
  c.training.grad_clip = 0.5;
  c.training.eval_interval = 13;
  c.training.eval_batches = 14;
  c.training.threads = 15;
  // Absolute: to_toml writes paths absolute (a relative one would read back relative to the file).
  c.data.train = "/path with \"quotes\" and \\ backslash/train_*.bin";
  c.data.val = "";
  c.checkpoint.dir = "/ck\tpt";
  c.checkpoint.interval = 16;
  c.checkpoint.keep = 17;
  c.logging.dir = "/runs/ünïcode";
  c.logging.interval = 18;
  return c;
}

void expect_same(const Config& a, const Config& b) {
  EXPECT_EQ(a.model.arch, b.model.arch);
  EXPECT_EQ(a.model.n_kv_head, b.model.n_kv_head);
  EXPECT_EQ(a.model.intermediate_size, b.model.intermediate_size);
  EXPECT_EQ(a.model.norm_eps, b.model.norm_eps);
  EXPECT_EQ(a.model.rope_theta, b.model.rope_theta);
  EXPECT_EQ(a.model.qkv_bias, b.model.qkv_bias);
  EXPECT_EQ(a.model.tied(), b.model.tied());
  EXPECT_EQ(a.model.rope_scaling.rope_type, b.model.rope_scaling.rope_type);
  EXPECT_EQ(a.model.rope_scaling.factor, b.model.rope_scaling.factor);
  EXPECT_EQ(a.model.rope_scaling.low_freq_factor, b.model.rope_scaling.low_freq_factor);
  EXPECT_EQ(a.model.rope_scaling.high_freq_factor, b.model.rope_scaling.high_freq_factor);
  EXPECT_EQ(a.model.rope_scaling.original_max_position_embeddings,
            b.model.rope_scaling.original_max_position_embeddings);
  EXPECT_EQ(a.model.n_layer, b.model.n_layer);
  EXPECT_EQ(a.model.n_head, b.model.n_head);
  EXPECT_EQ(a.model.n_embd, b.model.n_embd);
  EXPECT_EQ(a.model.vocab_size, b.model.vocab_size);
  EXPECT_EQ(a.model.max_seq_len, b.model.max_seq_len);
  EXPECT_EQ(a.model.init_std, b.model.init_std);
  EXPECT_EQ(a.parallel.tp, b.parallel.tp);
  EXPECT_EQ(a.parallel.pp, b.parallel.pp);
  EXPECT_EQ(a.parallel.dp, b.parallel.dp);
  EXPECT_EQ(a.parallel.micro_batch_size, b.parallel.micro_batch_size);
  EXPECT_EQ(a.parallel.num_micro_batches, b.parallel.num_micro_batches);
  EXPECT_EQ(a.training.steps, b.training.steps);
  EXPECT_EQ(a.training.seed, b.training.seed);
  EXPECT_EQ(a.training.device, b.training.device);
  EXPECT_EQ(a.training.seq_len, b.training.seq_len);
  EXPECT_EQ(a.training.lr, b.training.lr);
  EXPECT_EQ(a.training.min_lr, b.training.min_lr);
  EXPECT_EQ(a.training.warmup_steps, b.training.warmup_steps);
  EXPECT_EQ(a.training.lr_schedule, b.training.lr_schedule);
  EXPECT_EQ(a.training.weight_decay, b.training.weight_decay);
  EXPECT_EQ(a.training.beta1, b.training.beta1);
  EXPECT_EQ(a.training.beta2, b.training.beta2);
  EXPECT_EQ(a.training.eps, b.training.eps);
  EXPECT_EQ(a.training.grad_clip, b.training.grad_clip);
  EXPECT_EQ(a.training.eval_interval, b.training.eval_interval);
  EXPECT_EQ(a.training.eval_batches, b.training.eval_batches);
  EXPECT_EQ(a.training.threads, b.training.threads);
  EXPECT_EQ(a.data.train, b.data.train);
  EXPECT_EQ(a.data.val, b.data.val);
  EXPECT_EQ(a.checkpoint.dir, b.checkpoint.dir);
  EXPECT_EQ(a.checkpoint.interval, b.checkpoint.interval);
  EXPECT_EQ(a.checkpoint.keep, b.checkpoint.keep);
  EXPECT_EQ(a.logging.dir, b.logging.dir);
  EXPECT_EQ(a.logging.interval, b.logging.interval);
}

TEST(ConfigToToml, RoundTripsEveryKey) {
  const Config original = unusual_config();
  const std::string text = to_toml(original);
  Config back = parse_config(text, "resolved.toml", {});
  expect_same(original, back);
  // Printing what was read back and reading it again changes nothing: to_toml is a fixed point.
  const std::string again = to_toml(back);
  EXPECT_EQ(to_toml(parse_config(again, "resolved.toml", {})), again);
}

TEST(ConfigToToml, WritesEverySectionAndKey) {
  const std::string text = to_toml(parse(kData));
  for (const char* section : {"[model]", "[model.rope_scaling]", "[parallel]", "[training]", "[data]",
                              "[checkpoint]", "[logging]"}) {
    EXPECT_NE(text.find(section), std::string::npos) << section;
  }
  for (const std::string& key : config_keys()) {
    const std::string name = key.substr(key.rfind('.') + 1);
    EXPECT_NE(text.find("\n" + name + " = "), std::string::npos) << key;
  }
  // Values that came from somewhere other than the defaults say where.
  // Paths are written absolute, so the printed config reads back the same wherever it is kept.
  EXPECT_NE(text.find("train = \"" + std::filesystem::absolute("t.bin").string() + "\""), std::string::npos) << text;
  EXPECT_NE(text.find("[demo.toml:2]"), std::string::npos) << text;
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

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ConfigFiles, PathsInAFileAreRelativeToItAndSetValuesToTheCurrentDirectory) {
  const std::string dir = ::testing::TempDir() + "feast_paths_config/sub";
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(dir + "/run.toml");
    out << "[data]\ntrain = \"../data/train_*.bin\"\nval = \"/abs/val.bin\"\n"
           "[logging]\ndir = \"runs/x\"\n[checkpoint]\nresume = \"ckpt/step_00000010.h5\"\n";
  }
  const Config c = load_config(dir + "/run.toml", {});
  const std::string parent = std::filesystem::path(dir).parent_path().string();
  EXPECT_EQ(c.data.train, parent + "/data/train_*.bin");
  EXPECT_EQ(c.data.val, "/abs/val.bin");  // absolute paths stay
  EXPECT_EQ(c.logging.dir, dir + "/runs/x");
  EXPECT_EQ(c.checkpoint.dir, dir + "/runs/x/checkpoints");  // inferred from the resolved logging.dir
  EXPECT_EQ(c.checkpoint.resume, dir + "/ckpt/step_00000010.h5");
  const Config set = load_config(dir + "/run.toml", {"data.train=here/train.bin", "checkpoint.resume=auto"});
  EXPECT_EQ(set.data.train, "here/train.bin");  // --set: relative to the current directory
  EXPECT_EQ(set.checkpoint.resume, "auto");
}

TEST(ConfigFiles, ShippedConfigsLoad) {
  Config demo = load_config(FEAST_SOURCE_DIR "/configs/demo.toml", {});
  // Paths in a config file are relative to the file: configs/../datasets/demo.
  EXPECT_EQ(demo.data.train, FEAST_SOURCE_DIR "/datasets/demo/train_*.bin");
  EXPECT_EQ(demo.model.vocab_size, 256);
  EXPECT_EQ(demo.logging.dir, FEAST_SOURCE_DIR "/runs/demo");
  EXPECT_EQ(demo.checkpoint.dir, FEAST_SOURCE_DIR "/runs/demo/checkpoints");
  EXPECT_NE(demo.where("training.steps").find("configs/demo.toml:"), std::string::npos);

  Config llama = load_config(FEAST_SOURCE_DIR "/configs/llama-demo.toml", {});
  EXPECT_TRUE(llama.model.is_llama());
  EXPECT_EQ(llama.model.kv_heads(), 2);
  EXPECT_FALSE(llama.model.tied());

  Config gpt2 = load_config(FEAST_SOURCE_DIR "/configs/gpt2-124m.toml", {});
  EXPECT_EQ(gpt2.model.n_layer, 12);
  EXPECT_EQ(gpt2.model.n_embd, 768);
  EXPECT_EQ(gpt2.model.vocab_size, 50257);
  EXPECT_EQ(gpt2.model.max_seq_len, 1024);
  EXPECT_EQ(gpt2.training.device, "cuda");
  EXPECT_EQ(gpt2.data.val, FEAST_SOURCE_DIR "/datasets/fineweb10B/fineweb_val_*.bin");
}

// model.init_from: config.json sets the [model] keys the config left at their defaults; an
// explicit key that disagrees names both values; what feast cannot compute is refused by name.
TEST(ConfigInitFrom, ConfigJsonSetsTheModelKeys) {
  const std::string gpt2 = FEAST_SOURCE_DIR "/tests/fixtures/hf/gpt2-tiny";
  const Config g = parse_config("", "t", {"model.init_from=\"" + gpt2 + "\""});
  EXPECT_EQ(g.model.arch, "gpt2");
  EXPECT_EQ(g.model.n_layer, 2);
  EXPECT_EQ(g.model.n_head, 4);
  EXPECT_EQ(g.model.n_embd, 32);
  EXPECT_EQ(g.model.vocab_size, 320);
  EXPECT_EQ(g.model.max_seq_len, 64);
  EXPECT_TRUE(g.model.tied());
  EXPECT_NE(g.where("model.n_layer").find("config.json (\"n_layer\")"), std::string::npos) << g.where("model.n_layer");

  const Config l = parse_config("", "t", {"model.init_from=\"" FEAST_SOURCE_DIR "/tests/fixtures/hf/llama3-tiny\""});
  EXPECT_EQ(l.model.arch, "llama");
  EXPECT_EQ(l.model.n_kv_head, 2);
  EXPECT_EQ(l.model.intermediate_size, 48);
  EXPECT_EQ(l.model.vocab_size, 400);
  EXPECT_FALSE(l.model.tied());
  EXPECT_EQ(l.model.rope_scaling.rope_type, "llama3");
  EXPECT_EQ(l.model.rope_scaling.original_max_position_embeddings, 16);
  EXPECT_DOUBLE_EQ(l.model.norm_eps, 1e-5);

  // An explicit key that agrees is fine; one that disagrees names both values and the file.
  EXPECT_NO_THROW(parse_config("[model]\nn_layer = 2\n", "t.toml", {"model.init_from=\"" + gpt2 + "\""}));
  try {
    parse_config("[model]\nn_layer = 6\n", "t.toml", {"model.init_from=\"" + gpt2 + "\""});
    FAIL() << "a conflicting n_layer was accepted";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("t.toml:2: model.n_layer = 6 conflicts with model.init_from's config.json, which has \"n_layer\" = 2"),
              std::string::npos) << m;
  }
}

TEST(ConfigInitFrom, UnsupportedOrMissingConfigsAreRefusedByName) {
  const std::string dir = ::testing::TempDir() + "/feast_init_from";
  std::filesystem::create_directories(dir);
  auto refused = [&](const std::string& json, const std::string& expected) {
    std::ofstream(dir + "/config.json") << json;
    try {
      parse_config("", "t", {"model.init_from=\"" + dir + "\""});
      ADD_FAILURE() << json << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  refused(R"({"model_type": "bert"})", "\"model_type\" = \"bert\": feast imports");
  refused(R"({"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 8, "vocab_size": 10, "n_positions": 8,
             "activation_function": "relu"})", "\"activation_function\" = \"relu\"");
  refused(R"({"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1,
             "vocab_size": 10, "max_position_embeddings": 8, "intermediate_size": 16, "attention_bias": true})",
          "\"attention_bias\" = true");
  refused(R"({"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1,
             "vocab_size": 10, "max_position_embeddings": 8, "intermediate_size": 16,
             "rope_scaling": {"rope_type": "yarn", "factor": 2}})", "rope_type \"yarn\"");
  refused(R"({"model_type": "gpt2", "n_head": 2})", "\"n_layer\" is missing");
  refused("{not json", "not a JSON object");
  std::filesystem::remove(dir + "/config.json");
  try {
    parse_config("", "t", {"model.init_from=\"" + dir + "\""});
    ADD_FAILURE() << "a folder without config.json was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("config.json: cannot read"), std::string::npos) << e.what();
  }
}

// transformers 5 writes the rotary base and scaling into "rope_parameters" and no top-level
// rope_theta: read there, the base is the model's, not the default 10000.
TEST(ConfigInitFrom, Transformers5RopeParametersAreRead) {
  const std::string dir = ::testing::TempDir() + "/feast_init_from_v5";
  std::filesystem::create_directories(dir);
  const std::string shape = R"("model_type": "llama", "hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 2,
      "num_key_value_heads": 2, "vocab_size": 400, "max_position_embeddings": 64, "intermediate_size": 48, )";
  std::ofstream(dir + "/config.json") << "{" << shape << R"("rope_parameters": {"rope_type": "llama3",
      "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 16}})";
  const Config c = parse_config("", "t", {"model.init_from=\"" + dir + "\""});
  EXPECT_DOUBLE_EQ(c.model.rope_theta, 500000.0);
  EXPECT_EQ(c.model.rope_scaling.rope_type, "llama3");
  EXPECT_DOUBLE_EQ(c.model.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.model.rope_scaling.original_max_position_embeddings, 16);
  EXPECT_NE(c.where("model.rope_theta").find("rope_parameters.rope_theta"), std::string::npos)
      << c.where("model.rope_theta");

  // The same model written by transformers 4 (rope_theta and rope_scaling) gives the same config.
  std::ofstream(dir + "/config.json") << "{" << shape << R"("rope_theta": 500000.0, "rope_scaling": {"rope_type":
      "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16}})";
  expect_same(parse_config("", "t", {"model.init_from=\"" + dir + "\""}), c);

  auto refused = [&](const std::string& rope, const std::string& expected) {
    std::ofstream(dir + "/config.json") << "{" << shape << rope << "}";
    try {
      parse_config("", "t", {"model.init_from=\"" + dir + "\""});
      ADD_FAILURE() << rope << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  refused(R"("rope_parameters": {"full_attention": {"rope_theta": 1e6}, "sliding_attention": {"rope_theta": 1e4}})",
          "settings per kind of layer (\"full_attention\")");
  refused(R"("rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": 0.25})", "partial_rotary_factor 0.25");
  refused(R"("rope_theta": 10000.0, "rope_parameters": {"rope_theta": 1e6})", "disagrees with rope_parameters");
  refused(R"("rope_scaling": {"rope_type": "linear", "factor": 2}, "rope_parameters": {"rope_theta": 1e4})",
          "\"rope_scaling\" = {\"factor\":2,\"rope_type\":\"linear\"} disagrees with rope_parameters");
  // Both spellings, agreeing (an exporter serving transformers 4 and 5 alike): accepted.
  std::ofstream(dir + "/config.json") << "{" << shape << R"("rope_theta": 500000.0, "rope_scaling": {"type": "linear",
      "factor": 2.0}, "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 500000.0}})";
  const Config both = parse_config("", "t", {"model.init_from=\"" + dir + "\""});
  EXPECT_EQ(both.model.rope_scaling.rope_type, "linear");
  EXPECT_DOUBLE_EQ(both.model.rope_scaling.factor, 2.0);
  EXPECT_DOUBLE_EQ(both.model.rope_theta, 500000.0);
  refused(R"("rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2})", "rope_type \"yarn\"");
  // transformers 4 reads "type" over "rope_type"; where they disagree no reading is safe.
  refused(R"("rope_scaling": {"type": "linear", "rope_type": "default", "factor": 4})",
          "rope_type \"default\" and type \"linear\", which disagree");
}

// Configs that transformers reads: "swish" (its other name for SiLU), and a context shorter than
// training.seq_len's default, which the default then follows.
TEST(ConfigInitFrom, OtherSpellingsAndShortContextsAreAccepted) {
  const std::string dir = ::testing::TempDir() + "/feast_init_from_short";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << R"({"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4,
      "num_hidden_layers": 2, "vocab_size": 400, "max_position_embeddings": 24, "intermediate_size": 48,
      "hidden_act": "swish"})";
  const Config c = parse_config("", "t", {"model.init_from=\"" + dir + "\""});
  EXPECT_EQ(c.model.max_seq_len, 24);
  EXPECT_EQ(c.training.seq_len, 24);
}

TEST(ConfigFiles, MissingFileNamesThePath) {
  try {
    load_config("/nonexistent/feast.toml", {});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read config file '/nonexistent/feast.toml'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(load_config(FEAST_SOURCE_DIR "/configs", {}), ConfigError);
}

TEST(ConfigFiles, EmptyPathMeansDefaultsPlusOverrides) {
  Config c = load_config("", {"training.steps=3"});
  EXPECT_EQ(c.training.steps, 3);
  EXPECT_EQ(c.model.n_layer, 4);
}

TEST(ConfigDocs, TablesAreWhatTheKeyTableGenerates) {
  const std::string doc = read_file(FEAST_SOURCE_DIR "/docs/config.md");
  ASSERT_FALSE(doc.empty());
  EXPECT_TRUE(regenerate_config_docs(doc) == doc)
      << "docs/config.md differs from the key table in config/config.cpp; regenerate it with "
         "`./build/trainer print-config --docs docs/config.md > /tmp/config.md && mv /tmp/config.md docs/config.md`";
  // A changed detail shows up: the generator really reads the key table.
  std::string stale = doc;
  const size_t at = stale.find("| `training.steps` |");
  ASSERT_NE(at, std::string::npos);
  stale.insert(stale.find(" |\n", at + 20), " (stale)");
  EXPECT_NE(regenerate_config_docs(stale), stale);
  EXPECT_EQ(regenerate_config_docs(stale), doc);
}

TEST(ConfigDocs, DocsMentionEveryKey) {
  const std::string doc = read_file(FEAST_SOURCE_DIR "/docs/config.md");
  ASSERT_FALSE(doc.empty());
  for (const std::string& key : config_keys()) {
    EXPECT_NE(doc.find("`" + key + "`"), std::string::npos) << key << " is not in docs/config.md";
  }
}

}  // namespace
}  // namespace feast
