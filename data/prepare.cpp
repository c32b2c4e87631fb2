// Preparation: tokenise, split train/val, write shards, then meta.json last, so a directory with
// a meta.json is complete. meta.json's "params" object is the key for reuse: same parameters
// (including each input file's size) and every listed shard present means nothing to do.
#include "data/prepare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <span>

#include <zlib.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/byte_tokenizer.h"
#include "data/markov_corpus.h"
#include "data/shard.h"

namespace feast {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kMetaFile = "meta.json";

void check_options(const PrepareOptions& o) {
  if (o.out_dir.empty()) throw Error("prepare-data: no output directory given (--out DIR)");
  if (!(o.val_fraction > 0.0 && o.val_fraction < 1.0)) {
    throw Error("prepare-data: --val-fraction must be in (0, 1), got " +
                std::to_string(o.val_fraction));
  }
  if (o.max_shard_tokens < 1) {
    throw Error("prepare-data: --max-shard-tokens must be >= 1, got " +
                std::to_string(o.max_shard_tokens));
  }
}

std::string shard_name(const std::string& split, size_t index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s_%03zu.bin", split.c_str(), index);
  return buf;
}

std::vector<std::string> full_paths(const fs::path& dir, const json& names) {
  std::vector<std::string> out;
  for (const auto& n : names) out.push_back((dir / n.get<std::string>()).string());
  return out;
}

PreparedData from_meta(const fs::path& dir, const json& meta) {
  PreparedData d;
  d.train_shards = full_paths(dir, meta.at("train").at("shards"));
  d.val_shards = full_paths(dir, meta.at("val").at("shards"));
  d.train_tokens = meta.at("train").at("tokens").get<int64_t>();
  d.val_tokens = meta.at("val").at("tokens").get<int64_t>();
  if (meta.contains("entropy_floor_nats")) {
    d.entropy_floor = meta["entropy_floor_nats"].get<double>();
    d.unigram_entropy = meta.at("unigram_entropy_nats").get<double>();
  }
  return d;
}

// The earlier preparation of out_dir, if it used these parameters and is still complete.
// A meta.json that does not parse counts as absent: the directory is simply rebuilt.
std::optional<PreparedData> find_reusable(const PrepareOptions& o, const json& params) {
  const fs::path dir(o.out_dir);
  std::ifstream f(dir / kMetaFile);
  if (o.force || !f) return std::nullopt;
  try {
    const json meta = json::parse(f);
    if (meta.at("params") != params) return std::nullopt;
    PreparedData d = from_meta(dir, meta);
    for (const auto* list : {&d.train_shards, &d.val_shards}) {
      for (const auto& p : *list) {
        if (!fs::is_regular_file(p)) return std::nullopt;
      }
    }
    d.reused = true;
    return d;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

// Removes meta.json first (the directory is incomplete from here on) and any shards of an
// earlier run, which the trainer's train_*.bin glob would otherwise pick up.
void clear_previous(const fs::path& dir) {
  fs::remove(dir / kMetaFile);
  static const std::regex shard_re(R"((train|val)_\d+\.bin(\.tmp)?)");
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (std::regex_match(entry.path().filename().string(), shard_re)) fs::remove(entry.path());
  }
}

json write_split(const fs::path& dir, const std::string& split, std::span<const int32_t> tokens,
                 int64_t max_shard_tokens) {
  json names = json::array();
  const auto chunk = static_cast<size_t>(max_shard_tokens);
  for (size_t i = 0; i < tokens.size(); i += chunk) {
    const std::string name = shard_name(split, i / chunk);
    write_shard((dir / name).string(), tokens.subspan(i, std::min(chunk, tokens.size() - i)),
                width_for_vocab(ByteTokenizer::kVocabSize));
    names.push_back(name);
  }
  return {{"tokens", tokens.size()}, {"shards", names}};
}

PreparedData write_prepared(std::span<const int32_t> tokens, const PrepareOptions& o,
                            const json& params, const MarkovCorpus* corpus) {
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t n_val = std::max<int64_t>(1, std::llround(static_cast<double>(n) * o.val_fraction));
  if (n - n_val < 1) {
    throw DataError("prepare-data: the input has only " + std::to_string(n) +
                    " tokens; a train and a val split need at least 2");
  }
  const fs::path dir(o.out_dir);
  fs::create_directories(dir);
  clear_previous(dir);

  json meta;
  meta["params"] = params;
  meta["tokenizer"] = ByteTokenizer::kName;
  meta["vocab_size"] = ByteTokenizer::kVocabSize;
  const ShardFormat& format = format_for(width_for_vocab(ByteTokenizer::kVocabSize));
  meta["shard_magic"] = format.magic;
  meta["shard_version"] = format.version;
  meta["train"] = write_split(dir, "train", tokens.first(static_cast<size_t>(n - n_val)),
                              o.max_shard_tokens);
  meta["val"] = write_split(dir, "val", tokens.last(static_cast<size_t>(n_val)),
                            o.max_shard_tokens);
  if (corpus) {
    meta["entropy_floor_nats"] = corpus->entropy_rate();
    meta["unigram_entropy_nats"] = corpus->unigram_entropy();
  }

  const fs::path tmp = dir / (std::string(kMetaFile) + ".tmp");
  {
    std::ofstream f(tmp);
    f << meta.dump(2) << "\n";
    if (!f) throw DataError(tmp.string() + ": cannot write");
  }
  fs::rename(tmp, dir / kMetaFile);
  return from_meta(dir, meta);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw DataError(path + ": cannot open input text file");
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

json common_params(const PrepareOptions& o) {
  return {{"val_fraction", o.val_fraction}, {"max_shard_tokens", o.max_shard_tokens}, {"keep_binary", o.keep_binary}};
}

}  // namespace

namespace {

// Bytes that are not part of a well-formed UTF-8 sequence.
int64_t invalid_utf8_bytes(const std::string& s) {
  int64_t bad = 0;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + size_t(len) <= s.size();
    for (int k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + size_t(k)]) & 0xC0) == 0x80;
    if (ok) {
      i += size_t(len);
    } else {
      ++bad;
      ++i;
    }
  }
  return bad;
}

}  // namespace

PreparedData prepare_text(const std::vector<std::string>& files, const PrepareOptions& options) {
  check_options(options);
  if (files.empty()) throw Error("prepare-data: no input files given");
  json params = common_params(options);
  params["kind"] = "text";
  json inputs = json::array();
  std::vector<std::string> contents;
  for (const auto& path : files) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
      throw DataError(path + ": cannot read input text file: " + (ec ? ec.message() : "not a regular file"));
    contents.push_back(read_file(path));
    const std::string& c = contents.back();
    // The content's checksum, so that a file edited in place (same size, even the same
    // modification time) is prepared again.
    inputs.push_back({{"path", fs::absolute(path).string()},
                      {"bytes", c.size()},
                      {"crc32", crc32_z(0, reinterpret_cast<const Bytef*>(c.data()), c.size())}});
  }
  params["files"] = inputs;
  if (auto reused = find_reusable(options, params)) return *reused;

  std::string text;
  text.reserve([&] {
    size_t n = 0;
    for (const std::string& c : contents) n += c.size();
    return n;
  }());
  int kept = 0, skipped = 0;
  std::vector<std::string> notes;
  for (size_t f = 0; f < files.size(); ++f) {
    const std::string& c = contents[f];
    const int64_t nuls = std::count(c.begin(), c.end(), '\0');
    if (nuls > 0 && !options.keep_binary) {
      notes.push_back(files[f] + ": skipped, not text: " + std::to_string(nuls) +
                      " NUL byte(s) (--keep-binary tokenizes it anyway)");
      ++skipped;
      continue;
    }
    const int64_t bad = invalid_utf8_bytes(c);
    if (nuls > 0)
      notes.push_back(files[f] + ": kept (--keep-binary), though it has " + std::to_string(nuls) + " NUL byte(s)");
    else if (bad > 0 && bad * 100 > int64_t(c.size()))
      notes.push_back(files[f] + ": kept, but " + std::to_string(bad) + " of its " + std::to_string(c.size()) +
                      " bytes are not valid UTF-8; is it text?");
    text += c;
    std::string().swap(contents[f]);  // one copy of the corpus in memory at a time
    ++kept;
  }
  if (kept == 0)
    throw DataError("prepare-data: none of the " + std::to_string(files.size()) + " input file(s) is text (" +
                    notes.front() + (notes.size() > 1 ? ", ..." : "") + ")");
  const std::vector<int32_t> tokens = ByteTokenizer().encode(text);
  PreparedData d = write_prepared(tokens, options, params, nullptr);
  d.files_kept = kept;
  d.files_skipped = skipped;
  d.input_notes = notes;
  return d;
}

PreparedData prepare_synthetic(int64_t num_tokens, uint64_t seed, const PrepareOptions& options) {
  check_options(options);
  if (num_tokens < 2) {
    throw Error("prepare-data: --tokens must be >= 2, got " + std::to_string(num_tokens));
  }
  const MarkovCorpus corpus(seed);
  json params = common_params(options);
  params["kind"] = "synthetic";
  params["generator"] = "markov2";
  params["tokens"] = num_tokens;
  params["seed"] = seed;
  params["successors"] = corpus.successors();
  if (auto reused = find_reusable(options, params)) return *reused;

  const std::vector<int32_t> tokens = ByteTokenizer().encode(corpus.generate(num_tokens));
  return write_prepared(tokens, options, params, &corpus);
}

}  // namespace feast
