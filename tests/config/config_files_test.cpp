// Configs as files: the to_toml round trip, paths in a file and in --set, the shipped configs in
// configs/, model.init_from's config.json, and the key reference in docs/.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "config/config.h"
#include "tests/config/config_test_helpers.h"

namespace feast {
namespace {

using namespace ::feast::testing;  // config_test_helpers.h

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
      << "docs/config.md differs from the key table in config/key_table.cpp; regenerate it with "
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
