// Packed samples and document masks on the data side: first-fit decreasing, `prepare-data --pack`
// (whole samples in windows, overlong ones split and counted, padding not counted, each split
// packed on its own, shards of whole windows), the samplers reading packed data window by window,
// and document masks leaving out the target after each end-of-text token, in the counts too.
#include "data/packing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <random>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/dataset.h"
#include "data/loss_mask.h"
#include "data/prepare.h"
#include "data/sampler.h"
#include "data/tokenizer/tokenizer.h"
#include "tests/support/temp_dir.h"

namespace feast {
namespace {

using ::feast::testing::TempDir;
using prepare_data::first_fit_decreasing;

const std::string kGpt2 = std::string(FEAST_SOURCE_DIR) + "/tests/fixtures/hf/tokenizers/bpe-gpt2";
constexpr int32_t kEos = 317;  // bpe-gpt2's <|endoftext|>

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<int32_t> tokens_of(const std::string& shard) {
  const Shard s(shard);
  std::vector<int32_t> out(size_t(s.size()));
  s.read(0, s.size(), out.data());
  return out;
}

std::vector<uint8_t> mask_of(const std::string& shard) {
  const Shard s(shard);
  const LossMask m(loss_mask_path(shard), s);
  const auto w = m.window(0, m.size());
  return {w.begin(), w.end()};
}

TEST(FirstFitDecreasing, PlacesTheLongestFirstIntoTheFirstWindowWithRoom) {
  // Sorted: 5 (w0), 4 (w1), 3 (w1, full), 3 (w2), 2 (w0, full), 2 (w2), 1 (w2).
  const auto w = first_fit_decreasing({5, 4, 3, 3, 2, 2, 1}, 7);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0], (std::vector<size_t>{0, 4}));
  EXPECT_EQ(w[1], (std::vector<size_t>{1, 2}));
  EXPECT_EQ(w[2], (std::vector<size_t>{3, 5, 6}));
  // Equal lengths keep their order; an item of the whole capacity takes a window alone.
  const auto v = first_fit_decreasing({7, 3, 7, 3}, 7);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0], (std::vector<size_t>{0}));
  EXPECT_EQ(v[1], (std::vector<size_t>{2}));
  EXPECT_EQ(v[2], (std::vector<size_t>{1, 3}));
  EXPECT_THROW(first_fit_decreasing({8}, 7), Error);
}

TEST(FirstFitDecreasing, ManyItemsEachOnceWithinCapacityAndNearTheBound) {
  std::mt19937 rng(7);
  std::vector<int64_t> lengths(20000);
  for (auto& l : lengths) l = 1 + int64_t(rng() % 300);
  const int64_t capacity = 512;
  const auto windows = first_fit_decreasing(lengths, capacity);
  std::vector<int> seen(lengths.size(), 0);
  for (const auto& w : windows) {
    int64_t used = 0;
    for (size_t i : w) {
      ++seen[i];
      used += lengths[i];
    }
    EXPECT_LE(used, capacity);
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int s) { return s == 1; }));
  // First-fit decreasing uses at most 11/9 OPT + 6/9 windows, and OPT >= the total / capacity.
  const double total = double(std::accumulate(lengths.begin(), lengths.end(), int64_t{0}));
  EXPECT_LE(double(windows.size()), 11.0 / 9.0 * std::ceil(total / double(capacity)) + 1);
}

// Samples of known lengths: sample k is a prompt/completion example whose completion is "k" words.
std::string write_examples(const TempDir& dir, int n, std::vector<int>& words) {
  std::mt19937 rng(3);
  const std::string path = dir.file("examples.jsonl");
  std::ofstream f(path);
  for (int k = 0; k < n; ++k) {
    const int w = k == 5 ? 90 : 1 + int(rng() % 12);  // sample 5 is longer than a window
    words.push_back(w);
    std::string completion;
    for (int i = 0; i < w; ++i) {
      completion += " w";
      completion += std::to_string(k);
    }
    std::string prompt = "q";  // appended piece by piece: GCC 12 warns (-Wrestrict) on the inlined concatenation
    prompt += std::to_string(k);
    prompt += ':';
    f << nlohmann::json{{"prompt", prompt}, {"completion", completion}}.dump() << "\n";
  }
  return path;
}

TEST(PreparePack, WindowsHoldWholeSamplesPaddedWithEndOfTextThatDoesNotCount) {
  TempDir dir;
  std::vector<int> words;
  const std::string input = write_examples(dir, 60, words);
  PrepareOptions o{dir.file("packed"), 0.1};
  o.tokenizer = kGpt2;
  o.pack_seq_len = 63;
  o.max_shard_tokens = 200;  // rounded down to whole windows: 192 = 3 windows a shard
  const PreparedData d = prepare_text({input}, o);
  ASSERT_TRUE(d.packing);
  const PackingSummary& p = *d.packing;
  EXPECT_EQ(p.window, 64);
  EXPECT_EQ(p.documents, 60);
  EXPECT_EQ(p.split_documents, 1);  // sample 5
  EXPECT_GE(p.pieces, 2);
  EXPECT_EQ(d.train_tokens, p.train_windows * 64);
  EXPECT_EQ(d.val_tokens, p.val_windows * 64);
  EXPECT_GT(p.val_windows, 0);
  EXPECT_GT(p.efficiency(), 0.8);
  EXPECT_LT(p.efficiency(), 1.0);

  // Every shard is whole windows; the windows hold the samples whole (the pieces of sample 5
  // excepted), each ending in the end-of-text token, then padding of end-of-text tokens whose
  // mask entries are 0.
  const auto tok = load_tokenizer(kGpt2);
  int64_t padding = 0;
  std::map<int, int> samples_seen;  // sample -> its complete copies found
  for (const auto* shards : {&d.train_shards, &d.val_shards})
    for (const std::string& shard : *shards) {
      const std::vector<int32_t> t = tokens_of(shard);
      const std::vector<uint8_t> m = mask_of(shard);
      ASSERT_EQ(t.size() % 64, 0u) << shard;
      EXPECT_LE(t.size(), 192u) << shard;
      for (size_t w = 0; w < t.size(); w += 64) {
        size_t at = w;
        while (at < w + 64) {
          // One sample (or piece) runs to its end-of-text token or to the window's end.
          size_t end = at;
          while (end < w + 64 && t[end] != kEos) ++end;
          if (end == at) {  // an end-of-text token on its own: padding
            EXPECT_EQ(m[at], 0) << shard << " at " << at;
            ++padding;
            ++at;
            continue;
          }
          const std::string text = tok->decode(std::vector<int32_t>(t.begin() + long(at), t.begin() + long(end)));
          if (text.rfind("q", 0) == 0 && end < w + 64) {
            const int k = std::stoi(text.substr(1));
            ++samples_seen[k];
            EXPECT_EQ(std::count(text.begin(), text.end(), 'w'), words[size_t(k)]) << text;
            EXPECT_EQ(m[end], 1) << "a sample's end-of-text token counts";
          }
          at = end + 1;
        }
      }
    }
  EXPECT_EQ(padding, p.padding_tokens);
  for (int k = 0; k < 60; ++k) {
    if (k != 5) {
      EXPECT_EQ(samples_seen[k], 1) << "sample " << k << " is not in one window whole";
    }
  }

  const nlohmann::json meta = nlohmann::json::parse(std::ifstream(dir.file("packed/meta.json")));
  EXPECT_EQ(meta.at("packing").at("window"), 64);
  EXPECT_EQ(meta.at("packing").at("split_documents"), 1);
  // Prepared again with the same parameters: reused, with the same summary.
  const PreparedData again = prepare_text({input}, o);
  EXPECT_TRUE(again.reused);
  ASSERT_TRUE(again.packing);
  EXPECT_EQ(again.packing->padding_tokens, p.padding_tokens);
  // The samplers read it window by window, at training.seq_len = 63 only: every window a
  // training step draws is one of the packed windows.
  const Dataset train(dir.file("packed"), Split::kTrain);
  EXPECT_EQ(train.packed_window(), 64);
  EXPECT_EQ(train.recorded_eos_id(), kEos);
  const TrainSampler s(train, 1, 63, kEos);
  EXPECT_EQ(s.num_starts(), p.train_windows);
  std::vector<int32_t> all;
  for (const std::string& shard : d.train_shards) {
    const std::vector<int32_t> t = tokens_of(shard);
    all.insert(all.end(), t.begin(), t.end());
  }
  std::vector<int32_t> in(8 * 63), tg(8 * 63);
  s.fill(0, 0, 8, in.data(), tg.data());
  for (int r = 0; r < 8; ++r) {
    bool found = false;
    for (size_t w = 0; w < all.size() && !found; w += 64)
      found = std::equal(in.begin() + r * 63, in.begin() + (r + 1) * 63, all.begin() + long(w));
    EXPECT_TRUE(found) << "row " << r << " is not a packed window";
  }
  const std::string wrong = error_of([&] { TrainSampler(train, 1, 31); });
  EXPECT_NE(wrong.find("windows of 64 tokens"), std::string::npos) << wrong;
  EXPECT_NE(wrong.find("training.seq_len = 63"), std::string::npos) << wrong;
  EXPECT_EQ(ValSampler(Dataset(dir.file("packed"), Split::kVal), 63).num_windows(), p.val_windows);
}

// Chat data: SmolLM2's template ends every turn with <|im_end|>, its end-of-text token, so only
// the recorded document starts (X.docs) keep a conversation one document. Under document masks
// the samplers restart positions exactly there, not after every turn.
TEST(PreparePack, ConversationsStayOneDocumentThoughEveryTurnEndsWithEndOfText) {
  TempDir dir;
  const std::string folder = std::string(FEAST_SOURCE_DIR) + "/tests/fixtures/hf/chat/smollm2";
  {
    std::ofstream f(dir.file("chats.jsonl"));
    for (int k = 0; k < 24; ++k) {
      nlohmann::json messages = nlohmann::json::array();
      for (int turn = 0; turn < 1 + k % 3; ++turn) {
        messages.push_back({{"role", "user"}, {"content", "question " + std::to_string(k)}});
        messages.push_back({{"role", "assistant"}, {"content", "answer " + std::to_string(turn)}});
      }
      f << nlohmann::json{{"messages", messages}}.dump() << "\n";
    }
  }
  PrepareOptions o{dir.file("packed"), 0.2};
  o.tokenizer = folder;
  o.pack_seq_len = 255;
  const PreparedData d = prepare_text({dir.file("chats.jsonl")}, o);
  ASSERT_TRUE(d.packing);
  EXPECT_EQ(d.packing->split_documents, 0);
  const auto tok = load_tokenizer(folder);
  const int32_t eos = *tok->eos_id();
  // Every shard has its starts; they mark each conversation and each window's padding, and the
  // end-of-text token occurs inside conversations (after each turn).
  int64_t conversation_starts = 0, inner_eos = 0;
  for (const auto* shards : {&d.train_shards, &d.val_shards})
    for (const std::string& shard : *shards) {
      const std::vector<int32_t> t = tokens_of(shard);
      const std::vector<uint8_t> starts = [&] {
        const Shard sh(shard);
        const LossMask m(document_starts_path(shard), sh);
        const auto w = m.window(0, m.size());
        return std::vector<uint8_t>(w.begin(), w.end());
      }();
      ASSERT_EQ(starts.size(), t.size());
      for (size_t i = 0; i < t.size(); ++i) {
        if (i % 256 == 0) {
          EXPECT_EQ(starts[i], 1) << "a window starts a document";
        }
        if (starts[i] && t[i] != eos) ++conversation_starts;
        if (t[i] == eos && i + 1 < t.size() && (i + 1) % 256 != 0 && !starts[i + 1]) ++inner_eos;
      }
    }
  EXPECT_EQ(conversation_starts, 24);
  EXPECT_GT(inner_eos, 24) << "the template should end every turn with the end-of-text token";
  // The validation windows' positions restart exactly at the recorded starts.
  const Dataset val(dir.file("packed"), Split::kVal);
  ASSERT_TRUE(val.has_document_starts());
  const ValSampler v(val, 255, eos);
  std::vector<int32_t> in(255), tg(255), pos(255);
  for (int64_t w = 0; w < v.num_windows(); ++w) {
    v.fill(w, 1, in.data(), tg.data(), pos.data());
    const auto starts = val.document_starts(0).window(w * 256, 256);  // the split's one shard
    // Counted from the starts and masks alone, as every rank counts a step's targets.
    EXPECT_EQ(v.counted_targets(w, 1), std::count_if(tg.begin(), tg.end(), [](int32_t t) { return t >= 0; }));
    for (int i = 0; i < 255; ++i) {
      EXPECT_EQ(pos[size_t(i)] == 0, i == 0 || starts[size_t(i)] != 0) << "window " << w << " token " << i;
      if (starts[size_t(i) + 1]) {
        EXPECT_EQ(tg[size_t(i)], -1) << "a conversation's first token is no target";
      }
    }
  }
}

TEST(PreparePack, NeedsAnEndOfTextTokenAndTwoSamples) {
  TempDir dir;
  std::ofstream(dir.file("a.jsonl")) << R"({"text": "one"})" << "\n" << R"({"text": "two"})" << "\n";
  PrepareOptions o{dir.file("out"), 0.5};
  o.pack_seq_len = 8;
  const std::string byte = error_of([&] { prepare_text({dir.file("a.jsonl")}, o); });
  EXPECT_NE(byte.find("no end-of-text token"), std::string::npos) << byte;
  std::ofstream(dir.file("b.jsonl")) << R"({"text": "one"})" << "\n";
  o.tokenizer = kGpt2;
  const std::string one = error_of([&] { prepare_text({dir.file("b.jsonl")}, o); });
  EXPECT_NE(one.find("1 sample(s)"), std::string::npos) << one;
}

// Rows of a window whose inputs are end-of-text tokens read -1 as targets under document masks,
// and the counts (every rank's denominator of the loss) leave them out too, with loss masks.
TEST(DocumentMasks, TheTargetAfterAnEndOfTextTokenDoesNotCount) {
  TempDir dir;
  std::vector<int32_t> tokens(200);
  std::vector<uint8_t> mask(200);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = i % 7 == 3 ? 9 : int32_t(10 + i % 50);  // 9 ends documents
    mask[i] = i % 5 == 0 ? 0 : 1;
  }
  write_shard(dir.file("train_000.bin"), tokens, TokenWidth::u16);
  write_loss_mask(dir.file("train_000.mask"), mask);
  const Dataset data(dir.path());
  const int T = 16, rows = 12;
  const TrainSampler plain(data, 5, T), documents(data, 5, T, 9);
  std::vector<int32_t> in(rows * T), tg(rows * T), in2(rows * T), tg2(rows * T);
  int64_t dropped = 0;
  for (int64_t step = 0; step < 5; ++step) {
    plain.fill(step, 0, rows, in.data(), tg.data());
    documents.fill(step, 0, rows, in2.data(), tg2.data());
    EXPECT_EQ(in, in2);
    int64_t counted = 0;
    for (size_t k = 0; k < tg.size(); ++k) {
      EXPECT_EQ(tg2[k], in[k] == 9 ? -1 : tg[k]) << k;
      counted += tg2[k] >= 0;
      dropped += in[k] == 9 && tg[k] >= 0;
    }
    EXPECT_EQ(documents.counted_targets(step, 0, rows), counted);
    EXPECT_EQ(documents.counted_targets(step, 0, 5) + documents.counted_targets(step, 5, rows - 5), counted);
    EXPECT_LT(counted, plain.counted_targets(step, 0, rows));
  }
  EXPECT_GT(dropped, 0);
  const ValSampler val(data, T, 9);
  std::vector<int32_t> vin(4 * T), vtg(4 * T);
  val.fill(0, 4, vin.data(), vtg.data());
  EXPECT_EQ(val.counted_targets(0, 4), std::count_if(vtg.begin(), vtg.end(), [](int32_t t) { return t >= 0; }));
}

TEST(DocumentMasks, PackedAndUnpackedShardsDoNotMix) {
  TempDir dir;
  std::vector<int32_t> tokens(64, 5);
  std::filesystem::create_directories(dir.file("a"));
  std::filesystem::create_directories(dir.file("b"));
  write_shard(dir.file("a/train_000.bin"), tokens, TokenWidth::u16);
  write_shard(dir.file("b/train_000.bin"), tokens, TokenWidth::u16);
  std::ofstream(dir.file("a/meta.json")) << R"({"packing": {"window": 32}, "eos_id": 5})";
  EXPECT_EQ(Dataset(dir.file("a/train_000.bin")).packed_window(), 32);
  const std::string mixed = error_of([&] { Dataset(dir.file("*/train_000.bin")); });
  EXPECT_NE(mixed.find("packed into windows of 32 tokens"), std::string::npos) << mixed;
  EXPECT_NE(mixed.find("not packed"), std::string::npos) << mixed;
  std::ofstream(dir.file("b/meta.json")) << R"({"packing": {"window": 48}})";
  const std::string cut = error_of([&] { Dataset(dir.file("b/train_000.bin")); });
  EXPECT_NE(cut.find("not whole packed windows of 48"), std::string::npos) << cut;
}

}  // namespace
}  // namespace feast
