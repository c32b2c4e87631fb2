// Sharded model folders as transformers lays them out (one file, an index and its shards, and
// what is wrong with a folder), and the writer's refusal of bad inputs and unwritable paths.
#include "interop/hf/safetensors_model.h"
#include "interop/hf/safetensors_writer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "tests/interop/hf/safetensors_test_helpers.h"
#include "tests/support/temp_dir.h"

namespace feast {
namespace {

namespace fs = std::filesystem;
using namespace ::feast::testing;  // safetensors_test_helpers.h

// ---------------------------------------------------------------------------------------------
// Model folders

struct ModelSource {
  std::vector<std::vector<float>> values;
  std::vector<TensorToWrite> tensors;
};

// Tensors of 40, 40, 40, 200, 12 and 12 bytes in F32.
ModelSource model_source() {
  ModelSource m;
  const std::vector<std::pair<std::string, std::vector<int64_t>>> specs = {
      {"embed.weight", {2, 5}}, {"layers.0.w", {10}}, {"layers.1.w", {5, 2}},
      {"big", {5, 10}},         {"norm.a", {3}},      {"norm.b", {1, 3}}};
  unsigned seed = 10;
  for (const auto& [name, shape] : specs) m.values.push_back(random_floats(size_t(product(shape)), seed++));
  for (size_t i = 0; i < specs.size(); ++i) m.tensors.push_back({specs[i].first, specs[i].second, m.values[i].data()});
  return m;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

TEST(SafetensorsModel, OneFileWhenEverythingFits) {
  feast::testing::TempDir dir;
  const ModelSource src = model_source();
  EXPECT_EQ(write_safetensors_model(dir.path(), src.tensors, 0), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(write_safetensors_model(dir.path(), src.tensors, 344), std::vector<std::string>{"model.safetensors"});
  EXPECT_FALSE(fs::exists(dir.file("model.safetensors.index.json")));
  const SafetensorsModel model(dir.path());
  EXPECT_EQ(model.names().size(), src.tensors.size());
  EXPECT_EQ(model.file_of("big").metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  for (size_t i = 0; i < src.tensors.size(); ++i)
    expect_same_floats(model.read_f32(src.tensors[i].name), src.values[i], src.tensors[i].name);
}

TEST(SafetensorsModel, ShardedFolderAsTransformersWritesIt) {
  feast::testing::TempDir dir;
  const ModelSource src = model_source();
  // In BF16 the tensors take 20, 20, 20, 100, 6 and 6 bytes. Limit 50: [20 + 20], [20] (+100
  // overflows), [100] alone (over the limit), [6 + 6].
  const std::vector<std::string> files = write_safetensors_model(dir.path(), src.tensors, 50, "BF16");
  EXPECT_EQ(files, (std::vector<std::string>{"model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
                                             "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors",
                                             "model.safetensors.index.json"}));
  EXPECT_FALSE(fs::exists(dir.file("model.safetensors")));
  const nlohmann::json index = read_json(dir.file("model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], (10 + 10 + 10 + 50 + 3 + 3) * 2);
  const nlohmann::json want_map = {{"embed.weight", "model-00001-of-00004.safetensors"},
                                   {"layers.0.w", "model-00001-of-00004.safetensors"},
                                   {"layers.1.w", "model-00002-of-00004.safetensors"},
                                   {"big", "model-00003-of-00004.safetensors"},
                                   {"norm.a", "model-00004-of-00004.safetensors"},
                                   {"norm.b", "model-00004-of-00004.safetensors"}};
  EXPECT_EQ(index["weight_map"], want_map);

  const SafetensorsModel model(dir.path());
  EXPECT_EQ(model.files().size(), 4u);
  EXPECT_EQ(model.names(), (std::vector<std::string>{"big", "embed.weight", "layers.0.w", "layers.1.w", "norm.a", "norm.b"}));
  for (size_t i = 0; i < src.tensors.size(); ++i) {
    const std::string& name = src.tensors[i].name;
    EXPECT_EQ(fs::path(model.file_of(name).path()).filename().string(), want_map[name].get<std::string>());
    EXPECT_EQ(model.find(name)->dtype, "BF16");
    EXPECT_EQ(model.file_of(name).metadata().at("format"), "pt");
    std::vector<float> want;
    for (float x : src.values[i]) want.push_back(stored(x, "BF16"));
    expect_same_floats(model.read_f32(name), want, name);
  }
  float slab[4];
  model.read_f32("big", std::vector<int64_t>{3, 6}, std::vector<int64_t>{2, 2}, slab);
  EXPECT_EQ(slab[3], stored(src.values[3][4 * 10 + 7], "BF16"));
  EXPECT_EQ(model.find("absent"), nullptr);
  EXPECT_THROW(model.file_of("absent"), DataError);

  // Exporting again unsharded removes the shards and the index.
  write_safetensors_model(dir.path(), src.tensors, 0);
  EXPECT_FALSE(fs::exists(dir.file("model.safetensors.index.json")));
  EXPECT_FALSE(fs::exists(dir.file("model-00001-of-00004.safetensors")));
  EXPECT_EQ(SafetensorsModel(dir.path()).files().size(), 1u);
}

void expect_model_error(const std::string& folder, std::initializer_list<std::string> parts) {
  try {
    SafetensorsModel m(folder);
    ADD_FAILURE() << folder << " opened";
  } catch (const DataError& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "'" << p << "' not in: " << e.what();
  }
}

TEST(SafetensorsModel, FolderWithoutWeightsNamesWhatItLookedFor) {
  feast::testing::TempDir dir;
  expect_model_error(dir.path(), {dir.path(), "model.safetensors", "model.safetensors.index.json"});
  expect_model_error(dir.file("absent"), {"no such model folder"});
}

TEST(SafetensorsModel, MissingShardIsAnError) {
  feast::testing::TempDir dir;
  write_safetensors_model(dir.path(), model_source().tensors, 100);
  fs::remove(dir.file("model-00002-of-00004.safetensors"));
  expect_model_error(dir.path(), {"model-00002-of-00004.safetensors", "missing", "layers.1.w"});
}

TEST(SafetensorsModel, IndexNamingTheWrongFileIsAnError) {
  feast::testing::TempDir dir;
  write_safetensors_model(dir.path(), model_source().tensors, 100);
  nlohmann::json index = read_json(dir.file("model.safetensors.index.json"));
  index["weight_map"]["layers.1.w"] = "model-00001-of-00004.safetensors";
  write_text(dir.file("model.safetensors.index.json"), index.dump());
  expect_model_error(dir.path(), {"'layers.1.w'", "model-00001-of-00004.safetensors", "does not hold it"});
}

TEST(SafetensorsModel, TensorInTwoShardsIsAnError) {
  feast::testing::TempDir dir;
  const std::vector<float> v = random_floats(4, 1);
  write_safetensors(dir.file("a.safetensors"), {{"x", {4}, v.data()}, {"y", {4}, v.data()}}, {});
  write_safetensors(dir.file("b.safetensors"), {{"x", {4}, v.data()}}, {});
  write_text(dir.file("model.safetensors.index.json"),
             R"({"metadata": {}, "weight_map": {"x": "a.safetensors", "y": "b.safetensors"}})");
  expect_model_error(dir.path(), {"'x'", "in both"});
}

// transformers loads every tensor of a shard, listed or not (exports of GPT-2 keep attention-mask
// buffers out of the index but in the shards).
TEST(SafetensorsModel, ShardHoldingATensorTheIndexOmitsIsRead) {
  feast::testing::TempDir dir;
  const std::vector<float> v = random_floats(4, 1), w = random_floats(4, 2);
  write_safetensors(dir.file("a.safetensors"), {{"x", {4}, v.data()}, {"extra", {4}, w.data()}}, {});
  write_text(dir.file("model.safetensors.index.json"), R"({"weight_map": {"x": "a.safetensors"}})");
  const SafetensorsModel model(dir.path());
  EXPECT_EQ(model.names(), (std::vector<std::string>{"extra", "x"}));
  expect_same_floats(model.read_f32("x"), v, "x");
  expect_same_floats(model.read_f32("extra"), w, "extra");
}

TEST(SafetensorsModel, MalformedIndexIsAnError) {
  feast::testing::TempDir dir;
  const std::string index = dir.file("model.safetensors.index.json");
  write_text(index, "{\"weight_map\": ");
  expect_model_error(dir.path(), {index, "not valid JSON"});
  write_text(index, R"({"metadata": {"total_size": 0}})");
  expect_model_error(dir.path(), {index, "weight_map"});
  write_text(index, R"({"weight_map": {"x": 3}})");
  expect_model_error(dir.path(), {"'x'", "not a file name"});
  // A damaged shard is reported with its own path.
  write_bytes(dir.file("s.safetensors"), make_file("{}", 3));
  write_text(index, R"({"weight_map": {"x": "s.safetensors"}})");
  expect_model_error(dir.path(), {dir.file("s.safetensors"), "past the last tensor"});
}

TEST(SafetensorsModel, SingleFileIsPreferredOverAnIndex) {
  feast::testing::TempDir dir;
  const ModelSource src = model_source();
  write_safetensors(dir.file("model.safetensors"), src.tensors, {});
  write_text(dir.file("model.safetensors.index.json"), "broken");
  const SafetensorsModel model(dir.path());
  EXPECT_EQ(model.names().size(), src.tensors.size());
}

TEST(SafetensorsWrite, BadInputsAndUnwritablePathsAreErrors) {
  feast::testing::TempDir dir;
  const std::vector<float> v(4, 1.0f);
  EXPECT_THROW(write_safetensors(dir.file("a"), {{"x", {4}, v.data()}}, {}, "F64"), Error);
  EXPECT_THROW(write_safetensors(dir.file("a"), {{"x", {4}, v.data()}, {"x", {4}, v.data()}}, {}), Error);
  EXPECT_THROW(write_safetensors(dir.file("a"), {{"__metadata__", {4}, v.data()}}, {}), Error);
  EXPECT_THROW(write_safetensors(dir.file("a"), {{"x", {-4}, v.data()}}, {}), Error);
  EXPECT_THROW(write_safetensors(dir.file("a"), {{"x", {4}, nullptr}}, {}), Error);
  try {
    write_safetensors(dir.file("no/such/dir/a.safetensors"), {{"x", {4}, v.data()}}, {});
    ADD_FAILURE() << "wrote into a missing directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("no/such/dir/a.safetensors")), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir.file("a")));
}

}  // namespace
}  // namespace feast
