// Reader for golden-data fixtures written by tests/fixtures/*.py: b"FEASTFIX", u32 version (1),
// u32 count, then named float32 arrays (u32 name length, name, u32 ndim, i64 dims, data).
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace feast::testing {

struct FixtureArray {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

inline std::map<std::string, FixtureArray> read_fixture(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open fixture");
  auto read = [&](void* dst, size_t n) {
    in.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
    if (!in) throw std::runtime_error(path + ": truncated fixture");
  };
  char magic[8];
  read(magic, 8);
  if (std::memcmp(magic, "FEASTFIX", 8) != 0) throw std::runtime_error(path + ": bad magic");
  uint32_t version = 0, count = 0;
  read(&version, 4);
  read(&count, 4);
  if (version != 1) throw std::runtime_error(path + ": unknown fixture version");
  std::map<std::string, FixtureArray> arrays;
  for (uint32_t a = 0; a < count; ++a) {
    uint32_t len = 0, ndim = 0;
    read(&len, 4);
    std::string name(len, '\0');
    read(name.data(), len);
    read(&ndim, 4);
    FixtureArray arr;
    arr.shape.resize(ndim);
    read(arr.shape.data(), 8 * ndim);
    size_t n = 1;
    for (int64_t d : arr.shape) n *= static_cast<size_t>(d);
    arr.data.resize(n);
    read(arr.data.data(), 4 * n);
    arrays.emplace(std::move(name), std::move(arr));
  }
  return arrays;
}

// The model and batch shape a golden fixture (tests/fixtures/make_*_golden.py) was made with:
// GPT-2's as one "config" array, the Llama family's as named "config.*" scalars.
struct GoldenSetup {
  ModelConfig config;
  int B = 0, T = 0, steps = 0;
};

inline GoldenSetup golden_setup(const std::map<std::string, FixtureArray>& fx) {
  GoldenSetup g;
  ModelConfig& cfg = g.config;
  if (fx.count("config")) {  // make_gpt2_golden.py: one array of numbers
    const auto& c = fx.at("config").data;
    cfg.n_layer = int(c[0]);
    cfg.n_head = int(c[1]);
    cfg.n_embd = int(c[2]);
    cfg.vocab_size = int(c[3]);
    cfg.max_seq_len = int(c[4]);
    g.B = int(c[5]);
    g.T = int(c[6]);
    g.steps = int(c[7]);
    return g;
  }
  auto get = [&](const char* key) { return double(fx.at(std::string("config.") + key).data[0]); };
  cfg.arch = "llama";
  cfg.n_layer = int(get("n_layer"));
  cfg.n_head = int(get("n_head"));
  cfg.n_kv_head = int(get("n_kv_head"));
  cfg.n_embd = int(get("n_embd"));
  cfg.intermediate_size = int(get("intermediate_size"));
  cfg.vocab_size = int(get("vocab_size"));
  cfg.max_seq_len = int(get("max_seq_len"));
  cfg.norm_eps = get("norm_eps");
  cfg.rope_theta = get("rope_theta");
  cfg.qkv_bias = get("qkv_bias") != 0;
  cfg.tie_embeddings = get("tie_embeddings") != 0;
  if (get("rope_llama3") != 0) {
    cfg.rope_scaling.rope_type = "llama3";
    cfg.rope_scaling.factor = get("rope_factor");
    cfg.rope_scaling.low_freq_factor = get("rope_low");
    cfg.rope_scaling.high_freq_factor = get("rope_high");
    cfg.rope_scaling.original_max_position_embeddings = int(get("rope_original"));
  }
  g.B = int(get("B"));
  g.T = int(get("T"));
  g.steps = int(get("steps"));
  return g;
}

}  // namespace feast::testing
