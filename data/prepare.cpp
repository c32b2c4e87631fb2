// Preparation: tokenise, streaming the tokens (and loss masks) to provisional shards, split
// train/val, write the final shards, then meta.json last, so a directory with a meta.json is
// complete. Memory holds one shard and the document starts, not the corpus. meta.json's
// "params" object is the key for reuse: same parameters (including each input file's size and
// CRC-32, and the tokenizer's files) and every listed file present means nothing to do.
//
// Inputs are read in order on the calling thread and cut into documents; batches of documents
// are parsed (JSON Lines) and tokenized on worker threads, each result stored at its document's
// index and appended in input order, so the output does not depend on the thread count.
#include "data/prepare.h"


#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <regex>
#include <span>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>

#include <zlib.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/parallel_for.h"
#include "data/tokenizer/byte_tokenizer.h"
#include "data/dataset.h"
#include "data/dataset_meta.h"
#include "data/loss_mask.h"
#include "data/markov_corpus.h"
#include "data/shard.h"
#include "data/tokenizer/tokenizer.h"

namespace feast {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// ---------------------------------------------------------------------------------------------
// Options, names, meta.json

void check_options(const PrepareOptions& o) {
  if (o.out_dir.empty()) throw Error("prepare-data: no output directory given (--out DIR)");
  std::error_code ec;
  if (fs::exists(o.out_dir, ec) && !fs::is_directory(o.out_dir, ec)) {
    throw Error("prepare-data: --out " + o.out_dir +
                " is an existing file, not a directory; give --out a new or existing directory");
  }
  if (!(o.val_fraction > 0.0 && o.val_fraction < 1.0)) {
    throw Error("prepare-data: --val-fraction must be in (0, 1), got " +
                std::to_string(o.val_fraction));
  }
  if (o.max_shard_tokens < 1) {
    throw Error("prepare-data: --max-shard-tokens must be >= 1, got " +
                std::to_string(o.max_shard_tokens));
  }
  if (o.threads < 0) throw Error("prepare-data: --threads must be >= 0, got " + std::to_string(o.threads));
}

int worker_count(const PrepareOptions& o) {
  return o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string shard_name(const std::string& split, size_t index, const char* ext = ".bin") {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s_%03zu%s", split.c_str(), index, ext);
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
  // Directories prepared before tokenizers and masks existed lack these keys.
  d.tokenizer_kind = meta.value("tokenizer", std::string(ByteTokenizer::kName));
  d.tokenizer_folder = meta.value("tokenizer_folder", std::string());
  d.vocab_size = meta.value("vocab_size", int64_t{ByteTokenizer::kVocabSize});
  if (meta.contains("eos_id") && meta["eos_id"].is_number_integer()) d.eos_id = meta["eos_id"].get<int32_t>();
  d.has_loss_mask = meta.value("loss_mask", false);
  d.documents = meta.value("documents", int64_t{0});
  d.instruction_examples = meta.value("instruction_examples", int64_t{0});
  d.masked_tokens = meta.at("train").value("masked", int64_t{0}) + meta.at("val").value("masked", int64_t{0});
  return d;
}

// The earlier preparation of out_dir, if it used these parameters and is still complete.
// A meta.json that does not parse counts as absent: the directory is simply rebuilt.
std::optional<PreparedData> find_reusable(const PrepareOptions& o, const json& params) {
  const fs::path dir(o.out_dir);
  if (o.force) return std::nullopt;
  try {
    const std::optional<DatasetMeta> found = read_dataset_meta(o.out_dir);
    if (!found) return std::nullopt;
    const json& meta = found->json();
    if (meta.at("params") != params) return std::nullopt;
    PreparedData d = from_meta(dir, meta);
    for (const auto* list : {&d.train_shards, &d.val_shards}) {
      for (const auto& p : *list) {
        if (!fs::is_regular_file(p)) return std::nullopt;
        if (d.has_loss_mask && !fs::is_regular_file(loss_mask_path(p))) return std::nullopt;
      }
    }
    d.reused = true;
    return d;
  } catch (const json::exception&) {
    return std::nullopt;
  } catch (const DataError&) {
    return std::nullopt;
  }
}

// Removes meta.json first (the directory is incomplete from here on) and any shards and masks
// of an earlier run, which the trainer's train_*.bin glob would otherwise pick up.
void clear_previous(const fs::path& dir) {
  fs::remove(dataset_meta_path(dir.string()));
  static const std::regex shard_re(R"((train|val)_\d+\.(bin|mask)(\.tmp)?)");
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (std::regex_match(entry.path().filename().string(), shard_re)) fs::remove(entry.path());
  }
}

// The tokenizer and how meta.json names it.
struct TokenizerInfo {
  std::unique_ptr<Tokenizer> tokenizer;
  std::string folder;  // absolute; "" for the byte tokenizer
};

TokenizerInfo open_tokenizer(const std::string& name) {
  TokenizerInfo t;
  t.tokenizer = load_tokenizer(name);  // "" and "byte" give the byte tokenizer
  if (t.tokenizer->kind() != "byte") t.folder = fs::absolute(name).lexically_normal().string();
  return t;
}

uint32_t crc32_of_file(const std::string& path, std::atomic<int64_t>* progress) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw DataError(path + ": cannot open: " + std::strerror(errno));
  std::vector<char> buf(1 << 20);
  uLong crc = crc32_z(0, nullptr, 0);
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto got = static_cast<size_t>(f.gcount());
    crc = crc32_z(crc, reinterpret_cast<const Bytef*>(buf.data()), got);
    if (progress) *progress += static_cast<int64_t>(got);
  }
  if (f.bad()) throw DataError(path + ": read error");
  return static_cast<uint32_t>(crc);
}

// The files of a tokenizer folder that decide its output, with their sizes and CRC-32: part
// of the reuse key, so a changed tokenizer.json prepares the data again. Model weights in the
// same folder are not read.
json tokenizer_params(const TokenizerInfo& t) {
  static const char* const kFiles[] = {"tokenizer.json",     "tokenizer.model",         "tokenizer_config.json",
                                       "vocab.json",         "merges.txt",              "special_tokens_map.json",
                                       "added_tokens.json",  "config.json",             "generation_config.json"};
  const fs::path given(t.folder);
  const fs::path dir = fs::is_directory(given) ? given : given.parent_path();
  json files = json::array();
  std::vector<std::string> names;
  for (const char* name : kFiles) names.emplace_back(name);
  if (!fs::is_directory(given)) names.push_back(given.filename().string());
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  for (const std::string& name : names) {
    const fs::path p = dir / name;
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) continue;
    files.push_back({{"name", name}, {"bytes", fs::file_size(p)}, {"crc32", crc32_of_file(p.string(), nullptr)}});
  }
  return {{"kind", t.tokenizer->kind()}, {"folder", t.folder}, {"files", files}};
}

// ---------------------------------------------------------------------------------------------
// Progress and threads

class Progress {
 public:
  Progress(const PrepareOptions& o, const char* phase, int64_t total) : o_(o), phase_(phase), total_(total) {}
  std::atomic<int64_t> bytes{0};
  std::atomic<int64_t> tokens{0};
  void report(bool finished = false) const {
    if (!o_.on_progress) return;
    PrepareProgress p;
    p.phase = phase_;
    p.bytes_done = finished ? total_ : std::min(total_, bytes.load());
    p.bytes_total = total_;
    p.tokens = tokens.load();
    p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    p.finished = finished;
    o_.on_progress(p);
  }

 private:
  const PrepareOptions& o_;
  const char* phase_;
  int64_t total_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// ---------------------------------------------------------------------------------------------
// Reading documents

bool is_jsonl(const std::string& path) { return ends_with(path, ".jsonl") || ends_with(path, ".jsonl.gz"); }

// A plain or gzip file (by name) read in blocks; raw_offset() counts the bytes as stored.
class InputFile {
 public:
  explicit InputFile(const std::string& path) : path_(path) {
    if (ends_with(path, ".gz")) {
      gz_ = gzopen(path.c_str(), "rb");
      if (!gz_) throw DataError(path + ": cannot open input: " + std::strerror(errno));
      gzbuffer(gz_, 1 << 17);
    } else {
      f_.open(path, std::ios::binary);
      if (!f_) throw DataError(path + ": cannot open input text file: " + std::strerror(errno));
    }
  }
  ~InputFile() {
    if (gz_) gzclose(gz_);
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // Appends up to n bytes to out; returns how many (0 at the end).
  size_t read_into(std::string& out, size_t n) {
    const size_t old = out.size();
    out.resize(old + n);
    size_t got = 0;
    if (gz_) {
      const int r = gzread(gz_, out.data() + old, static_cast<unsigned>(n));
      int code = Z_OK;
      std::string what = gzerror(gz_, &code);
      // A stream that stops before its gzip trailer is not an error to gzread: it returns what
      // it could decompress and records Z_BUF_ERROR ("unexpected end of file"). Taking that
      // for the end would keep a truncated download's first part without a word.
      if (r < 0 || code == Z_BUF_ERROR) {
        if (what.rfind(path_ + ": ", 0) == 0) what.erase(0, path_.size() + 2);  // zlib names the file too
        throw DataError(path_ + ": is truncated or corrupt (gzip: " + what + " after " +
                        std::to_string(gztell(gz_)) + " bytes decompressed); re-download it or re-compress it "
                        "(`gzip -t " + path_ + "` checks a .gz file)");
      }
      got = static_cast<size_t>(r);
    } else {
      f_.read(out.data() + old, static_cast<std::streamsize>(n));
      got = static_cast<size_t>(f_.gcount());
      if (f_.bad()) throw DataError(path_ + ": read error");
      raw_ += static_cast<int64_t>(got);
    }
    out.resize(old + got);
    return got;
  }
  int64_t raw_offset() const { return gz_ ? static_cast<int64_t>(gzoffset(gz_)) : raw_; }

 private:
  std::string path_;
  gzFile gz_ = nullptr;
  std::ifstream f_;
  int64_t raw_ = 0;
};

struct Document {
  uint32_t file = 0;
  int64_t line = 0;       // 1-based line of a JSON Lines file; 0: a whole text file
  std::string text;       // the file's contents, or the JSON line
  int64_t raw_bytes = 0;  // input bytes as stored it accounts for (progress)
};

struct Encoded {
  std::vector<int32_t> tokens;  // eos included
  int64_t prompt_tokens = -1;   // >= 0: a prompt/completion example; its first prompt_tokens are not targets
  bool skipped = false;         // a text file with NUL bytes
  std::string note;             // a warning about the input
  std::string error;            // what is wrong, prefixed with file[:line]
};

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

// The string field `key` of a JSON Lines object, or an error.
const std::string* string_field(const json& j, const char* key, std::string& error) {
  const auto it = j.find(key);
  if (it == j.end()) return nullptr;
  if (!it->is_string()) {
    error = std::string("field \"") + key + "\" is " + it->type_name() + ", not a string";
    return nullptr;
  }
  return it->get_ptr<const std::string*>();
}

// Tokenizes one JSON Lines line: {"text": ...} or {"prompt": ..., "completion": ...}.
void encode_json_line(const Tokenizer& tok, const std::string& line, Encoded& e) {
  json j;
  try {
    j = json::parse(line);
  } catch (const json::parse_error& ex) {
    std::string what = ex.what();
    const auto colon = what.find("parse error");  // drop nlohmann's "[json.exception.parse_error.101] "
    e.error = "not valid JSON (" + (colon == std::string::npos ? what : what.substr(colon)) + ")";
    return;
  }
  if (!j.is_object()) {
    e.error = std::string("a JSON ") + j.type_name() + ", not an object with a \"text\" field or \"prompt\" and \"completion\" fields";
    return;
  }
  const bool has_text = j.contains("text"), has_prompt = j.contains("prompt"), has_completion = j.contains("completion");
  if (has_text && (has_prompt || has_completion)) {
    e.error = std::string("has both \"text\" and \"") + (has_prompt ? "prompt" : "completion") +
              "\": a line is either a document (\"text\") or an instruction example (\"prompt\" and \"completion\")";
    return;
  }
  if (!has_text && !has_prompt && !has_completion) {
    e.error = "has no \"text\" field and no \"prompt\" and \"completion\" fields";
    return;
  }
  if (!has_text && has_prompt != has_completion) {
    e.error = std::string("has \"") + (has_prompt ? "prompt" : "completion") + "\" but no \"" +
              (has_prompt ? "completion" : "prompt") + "\"";
    return;
  }
  if (has_text) {
    const std::string* text = string_field(j, "text", e.error);
    if (text) e.tokens = tok.encode(*text);
    return;
  }
  const std::string* prompt = string_field(j, "prompt", e.error);
  const std::string* completion = prompt ? string_field(j, "completion", e.error) : nullptr;
  if (!prompt || !completion) return;
  e.tokens = tok.encode(*prompt);
  e.prompt_tokens = static_cast<int64_t>(e.tokens.size());
  // The completion continues the prompt: no SentencePiece dummy prefix unless it starts the text.
  const std::vector<int32_t> c = prompt->empty() ? tok.encode(*completion) : tok.encode_continuation(*completion);
  e.tokens.insert(e.tokens.end(), c.begin(), c.end());
}

// Tokenizes a whole text file, after the checks that tell text from other files.
void encode_text_file(const Tokenizer& tok, const std::string& path, const std::string& text, bool keep_binary,
                      Encoded& e) {
  const int64_t nuls = std::count(text.begin(), text.end(), '\0');
  if (nuls > 0 && !keep_binary) {
    e.skipped = true;
    e.note = path + ": skipped, not text: " + std::to_string(nuls) +
             " NUL byte(s) (--keep-binary tokenizes it anyway)";
    return;
  }
  const int64_t bad = invalid_utf8_bytes(text);
  if (nuls > 0)
    e.note = path + ": kept (--keep-binary), though it has " + std::to_string(nuls) + " NUL byte(s)";
  else if (bad > 0 && bad * 100 > int64_t(text.size()))
    e.note = path + ": kept, but " + std::to_string(bad) + " of its " + std::to_string(text.size()) +
             " bytes are not valid UTF-8; is it text?";
  e.tokens = tok.encode(text);
}

// ---------------------------------------------------------------------------------------------
// Writing: tokens stream to disk as they are produced
//
// Memory holds one shard's tokens and mask, not the corpus: tokens go into provisional shards
// of max_shard_tokens in a staging folder inside out_dir as they fill. Only when the input ends
// is the val cut known (it depends on the total and on the document starts); finish() then
// renames the provisional shards wholly before the cut to train shards, writes the one the cut
// falls in cut short, and copies the tail into val shards one shard at a time. The files are
// byte for byte those of splitting the whole token stream at the cut and writing each split in
// shards of max_shard_tokens. Until finish() clears the earlier output, a failure leaves out_dir
// as it was (the staging folder is removed).

constexpr const char* kStagingDir = ".prepare-staging";

class ShardStream {
 public:
  ShardStream(const fs::path& dir, int64_t max_shard_tokens, int64_t vocab_size)
      : dir_(dir), staging_(dir / kStagingDir), max_(max_shard_tokens), vocab_(vocab_size),
        width_(width_for_vocab(vocab_size)) {
    std::error_code ec;
    created_dir_ = !fs::exists(dir_, ec);
    // Named here: std::filesystem's own message says neither the flag nor what would fix it.
    const auto fail = [&](const fs::path& what) {
      throw DataError("prepare-data: --out " + dir_.string() + ": cannot create " + what.string() + " (" +
                      ec.message() + "); give --out a directory that can be created and written");
    };
    fs::create_directories(dir_, ec);
    if (ec) fail(dir_);
    fs::remove_all(staging_, ec);  // left by a run that was killed
    if (!ec) fs::create_directory(staging_, ec);
    if (ec) fail(staging_);
  }
  ShardStream(const ShardStream&) = delete;
  ShardStream& operator=(const ShardStream&) = delete;
  ~ShardStream() {
    std::error_code ec;
    fs::remove_all(staging_, ec);
    if (!finished_ && created_dir_) fs::remove(dir_, ec);  // only if empty
  }

  int64_t size() const { return flushed_ + static_cast<int64_t>(tokens_.size()); }
  bool has_mask() const { return masked_; }

  // Appends one document's tokens. prompt_tokens >= 0: an instruction example whose first
  // prompt_tokens tokens do not count in the loss; the first one turns masks on, every token
  // before it counting.
  void append(std::span<const int32_t> tokens, int64_t prompt_tokens = -1) {
    if (prompt_tokens >= 0 && !masked_) {
      masked_ = true;
      for (size_t k = 0; k < sizes_.size(); ++k) {
        write_loss_mask(loss_mask_path(part(k)), std::vector<uint8_t>(static_cast<size_t>(sizes_[k]), 1));
      }
      mask_.assign(tokens_.size(), 1);
    }
    const auto off = static_cast<size_t>(std::max<int64_t>(0, prompt_tokens));
    for (size_t i = 0; i < tokens.size();) {
      const size_t n = std::min(tokens.size() - i, static_cast<size_t>(max_) - tokens_.size());
      // Grows geometrically but never past one shard (max_shard_tokens may be far larger
      // than the input).
      if (tokens_.size() + n > tokens_.capacity()) {
        tokens_.reserve(std::min(static_cast<size_t>(max_),
                                 std::max({tokens_.capacity() * 2, tokens_.size() + n, size_t{1} << 16})));
      }
      tokens_.insert(tokens_.end(), tokens.begin() + i, tokens.begin() + i + n);
      if (masked_) {
        for (size_t j = i; j < i + n; ++j) mask_.push_back(j < off ? 0 : 1);
      }
      i += n;
      if (static_cast<int64_t>(tokens_.size()) == max_) flush();
    }
  }

  // Writes the final shards with the first n_train tokens as the train split and the rest as
  // val, clearing out_dir's earlier shards and meta.json first. Returns meta.json's "train"
  // and "val" objects.
  std::pair<json, json> finish(int64_t n_train) {
    flush();
    const int64_t total = flushed_;  // copy() below fills tokens_ as its buffer
    clear_previous(dir_);
    finished_ = true;  // out_dir is changed from here on
    json train = {{"shards", json::array()}}, val = {{"shards", json::array()}};
    int64_t train_masked = 0, val_masked = 0;
    // Train: whole provisional shards are renamed; the one the cut falls in is cut short.
    for (size_t k = 0; static_cast<int64_t>(k) * max_ < n_train; ++k) {
      const int64_t begin = static_cast<int64_t>(k) * max_;
      const std::string name = shard_name("train", k);
      const std::string path = (dir_ / name).string();
      if (begin + sizes_[k] <= n_train) {
        fs::rename(part(k), path);
        if (masked_) fs::rename(loss_mask_path(part(k)), loss_mask_path(path));
        train_masked += zeros_[k];
      } else {
        train_masked += copy(begin, n_train - begin, path);
      }
      add(train, name);
    }
    // Val: the tail, a shard's worth at a time.
    for (int64_t begin = n_train, k = 0; begin < total; begin += max_, ++k) {
      const std::string name = shard_name("val", static_cast<size_t>(k));
      val_masked += copy(begin, std::min(max_, total - begin), (dir_ / name).string());
      add(val, name);
    }
    train["tokens"] = n_train;
    val["tokens"] = total - n_train;
    if (masked_) {
      train["masked"] = train_masked;
      val["masked"] = val_masked;
    }
    return {train, val};
  }

 private:
  std::string part(size_t k) const { return (staging_ / shard_name("part", k)).string(); }

  void flush() {
    if (tokens_.empty()) return;
    const std::string path = part(sizes_.size());
    write_shard(path, tokens_, width_, vocab_);
    if (masked_) write_loss_mask(loss_mask_path(path), mask_);
    sizes_.push_back(static_cast<int64_t>(tokens_.size()));
    zeros_.push_back(std::count(mask_.begin(), mask_.end(), uint8_t{0}));
    flushed_ += static_cast<int64_t>(tokens_.size());
    tokens_.clear();
    mask_.clear();
  }

  // Writes tokens [begin, begin + n) of the stream (at most two provisional shards) to path
  // and its mask; returns the mask's zeros.
  int64_t copy(int64_t begin, int64_t n, const std::string& path) {
    tokens_.resize(static_cast<size_t>(n));
    mask_.resize(masked_ ? static_cast<size_t>(n) : 0);
    for (int64_t done = 0; done < n;) {
      const auto k = static_cast<size_t>((begin + done) / max_);
      const int64_t at = (begin + done) % max_;
      const int64_t m = std::min(n - done, sizes_[k] - at);
      const Shard shard(part(k));
      shard.read(at, m, tokens_.data() + done);
      if (masked_) {
        const LossMask mask(loss_mask_path(part(k)), shard);
        const std::span<const uint8_t> w = mask.window(at, m);
        std::copy(w.begin(), w.end(), mask_.begin() + done);
      }
      done += m;
    }
    write_shard(path, tokens_, width_, vocab_);
    if (masked_) write_loss_mask(loss_mask_path(path), mask_);
    return std::count(mask_.begin(), mask_.end(), uint8_t{0});
  }

  void add(json& split, const std::string& name) const {
    split["shards"].push_back(name);
    if (masked_) split["masks"].push_back(name.substr(0, name.size() - 4) + ".mask");
  }

  fs::path dir_, staging_;
  int64_t max_, vocab_;
  TokenWidth width_;
  bool created_dir_ = false, finished_ = false, masked_ = false;
  std::vector<int32_t> tokens_;  // the shard being filled
  std::vector<uint8_t> mask_;    // its mask, while masks are on
  std::vector<int64_t> sizes_, zeros_;  // per provisional shard: tokens, mask zeros
  int64_t flushed_ = 0;
};

// What tokenizing found besides the tokens, which stream into a ShardStream: the document
// starts (8 bytes per document, for the val cut) and the counts and notes for the report.
struct Corpus {
  std::vector<int64_t> doc_starts;   // token offset of each document
  int64_t documents = 0, instruction_examples = 0;
  std::vector<bool> skipped;         // per input file
  std::vector<std::string> notes;
};

class Tokenizing {
 public:
  Tokenizing(const std::vector<std::string>& files, const TokenizerInfo& t, const PrepareOptions& o, Progress& p,
             ShardStream& stream)
      : files_(files), tok_(*t.tokenizer), eos_(t.tokenizer->eos_id()), o_(o), progress_(p), stream_(stream) {
    out_.skipped.assign(files.size(), false);
  }

  Corpus run() {
    for (uint32_t f = 0; f < files_.size(); ++f) {
      InputFile in(files_[f]);
      const int64_t size = static_cast<int64_t>(fs::file_size(files_[f]));
      int64_t accounted = 0;
      if (is_jsonl(files_[f])) {
        read_lines(f, in, accounted);
      } else {
        Document d{f, 0, {}, 0};
        // A plain file in one allocation: its size, plus room for the read that finds the end.
        if (!ends_with(files_[f], ".gz")) {
          d.text.reserve(static_cast<size_t>(size) + (1 << 16));
          in.read_into(d.text, static_cast<size_t>(size));
        }
        while (in.read_into(d.text, 1 << 16) > 0) {
        }
        d.raw_bytes = in.raw_offset();
        accounted = d.raw_bytes;
        push(std::move(d));
      }
      progress_.bytes += size - accounted;  // blank lines, gzip trailers
    }
    flush();
    return std::move(out_);
  }

 private:
  // Splits a JSON Lines file into its lines, one document each; blank lines are skipped.
  void read_lines(uint32_t f, InputFile& in, int64_t& accounted) {
    const bool gz = ends_with(files_[f], ".gz");
    std::string buf;
    size_t pos = 0;
    int64_t line = 0, last_raw = 0;
    bool eof = false;
    for (;;) {
      size_t nl = buf.find('\n', pos);
      while (nl == std::string::npos && !eof) {
        buf.erase(0, pos);
        pos = 0;
        const size_t searched = buf.size();  // a long line is searched once, not per block
        eof = in.read_into(buf, 1 << 20) == 0;
        nl = buf.find('\n', searched);
      }
      if (nl == std::string::npos && pos >= buf.size()) break;
      const size_t end = nl == std::string::npos ? buf.size() : nl;
      ++line;
      Document d{f, line, buf.substr(pos, end - pos), 0};
      pos = end + 1;
      if (!d.text.empty() && d.text.back() == '\r') d.text.pop_back();
      if (d.text.find_first_not_of(" \t") == std::string::npos) continue;
      // Progress in bytes as stored: the line's own, or how far the compressed stream moved.
      d.raw_bytes = gz ? in.raw_offset() - last_raw : static_cast<int64_t>(d.text.size()) + 1;
      last_raw = in.raw_offset();
      accounted += d.raw_bytes;
      push(std::move(d));
    }
  }

  void push(Document d) {
    batch_bytes_ += d.text.size();
    batch_.push_back(std::move(d));
    // Batches of ~16 MiB of text: large enough to keep every thread busy, small enough that
    // the text waiting to be tokenized stays a small part of memory.
    if (batch_bytes_ >= (16u << 20) || batch_.size() >= 65536) flush();
  }

  void flush() {
    std::vector<Encoded> results(batch_.size());
    parallel_for(batch_.size(), worker_count(o_), [&](size_t i) {
      Document& d = batch_[i];
      Encoded& e = results[i];
      const std::string& path = files_[d.file];
      try {
        if (d.line > 0)
          encode_json_line(tok_, d.text, e);
        else
          encode_text_file(tok_, path, d.text, o_.keep_binary, e);
      } catch (const DataError& ex) {
        e.error = ex.what();  // the tokenizer's (invalid UTF-8 at byte N)
      }
      if (!e.error.empty()) e.error = path + (d.line > 0 ? ":" + std::to_string(d.line) : "") + ": " + e.error;
      if (eos_ && (!e.tokens.empty() || e.prompt_tokens >= 0)) e.tokens.push_back(*eos_);
      std::string().swap(d.text);
      progress_.bytes += d.raw_bytes;
      progress_.tokens += static_cast<int64_t>(e.tokens.size());
    }, [&] { progress_.report(); });
    for (size_t i = 0; i < results.size(); ++i) append(batch_[i], results[i]);
    batch_.clear();
    batch_bytes_ = 0;
  }

  void append(const Document& d, Encoded& e) {
    if (!e.error.empty()) throw DataError("prepare-data: " + e.error);
    if (e.skipped) out_.skipped[d.file] = true;
    if (!e.note.empty()) out_.notes.push_back(e.note);
    if (e.tokens.empty()) return;
    ++out_.documents;
    out_.doc_starts.push_back(stream_.size());
    if (e.prompt_tokens >= 0) ++out_.instruction_examples;
    stream_.append(e.tokens, e.prompt_tokens);
    std::vector<int32_t>().swap(e.tokens);
  }

  const std::vector<std::string>& files_;
  const Tokenizer& tok_;
  const std::optional<int32_t> eos_;
  const PrepareOptions& o_;
  Progress& progress_;
  ShardStream& stream_;
  std::vector<Document> batch_;
  size_t batch_bytes_ = 0;
  Corpus out_;
};

// ---------------------------------------------------------------------------------------------
// Writing

// The token count of the train split: the last round(n * val_fraction) tokens (at least one)
// go to val. With an end-of-text token the cut moves to the nearest document start within half
// the val size of it, so that val begins at a document; the byte tokenizer has no document
// separators, and cuts exactly, as it always has.
int64_t train_size(int64_t n, const PrepareOptions& o, const std::vector<int64_t>& doc_starts, bool at_documents) {
  const int64_t n_val = std::max<int64_t>(1, std::llround(static_cast<double>(n) * o.val_fraction));
  if (n - n_val < 1) {
    throw DataError("prepare-data: the input has only " + std::to_string(n) +
                    " tokens; a train and a val split need at least 2");
  }
  int64_t cut = n - n_val;
  if (at_documents) {
    const auto it = std::lower_bound(doc_starts.begin(), doc_starts.end(), cut);
    int64_t best = -1;
    for (auto c : {it, it == doc_starts.begin() ? doc_starts.end() : it - 1}) {
      if (c == doc_starts.end() || *c < 1 || *c > n - 1) continue;
      if (std::abs(*c - cut) * 2 <= n_val && (best < 0 || std::abs(*c - cut) < std::abs(best - cut))) best = *c;
    }
    if (best > 0) cut = best;
  }
  return cut;
}

// Writes the shards (see ShardStream::finish), then meta.json last.
PreparedData write_prepared(ShardStream& stream, int64_t n_train, const TokenizerInfo& t, const PrepareOptions& o,
                            const json& params, json extra) {
  const fs::path dir(o.out_dir);
  const int64_t vocab = t.tokenizer->vocab_size();
  json meta = std::move(extra);
  meta["params"] = params;
  meta["tokenizer"] = t.tokenizer->kind();
  if (!t.folder.empty()) meta["tokenizer_folder"] = t.folder;
  meta["vocab_size"] = vocab;
  const std::optional<int32_t> eos = t.tokenizer->eos_id();
  meta["eos_id"] = eos ? json(*eos) : json(nullptr);
  meta["loss_mask"] = stream.has_mask();
  const ShardFormat& format = format_for(width_for_vocab(vocab));
  meta["shard_magic"] = format.magic;
  meta["shard_version"] = format.version;
  std::tie(meta["train"], meta["val"]) = stream.finish(n_train);

  write_dataset_meta(dir.string(), meta);
  return from_meta(dir, meta);
}

json common_params(const PrepareOptions& o) {
  return {{"val_fraction", o.val_fraction}, {"max_shard_tokens", o.max_shard_tokens}, {"keep_binary", o.keep_binary}};
}

}  // namespace

std::vector<std::string> expand_input_patterns(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (const std::string& a : args) {
    std::error_code ec;
    if (fs::exists(a, ec) || a.find_first_of("*?[") == std::string::npos) {
      out.push_back(a);  // a missing plain name is reported, naming it, when it is read
      continue;
    }
    std::vector<std::string> matches = glob_files(a);
    if (matches.empty()) throw DataError("prepare-data: '" + a + "' matches no file");
    std::sort(matches.begin(), matches.end());  // by byte value, not the locale's collation
    out.insert(out.end(), matches.begin(), matches.end());
  }
  return out;
}

PreparedData prepare_text(const std::vector<std::string>& files, const PrepareOptions& options) {
  check_options(options);
  if (files.empty()) throw Error("prepare-data: no input files given");
  const TokenizerInfo tok = open_tokenizer(options.tokenizer);

  json params = common_params(options);
  params["kind"] = "text";
  int64_t total_bytes = 0;
  std::vector<int64_t> sizes;
  for (const auto& path : files) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
      throw DataError(path + ": cannot read input text file: " + (ec ? ec.message() : "not a regular file"));
    sizes.push_back(static_cast<int64_t>(fs::file_size(path)));
    total_bytes += sizes.back();
  }
  // The contents' checksums, so that a file edited in place (same size, even the same
  // modification time) is prepared again.
  std::vector<uint32_t> crcs(files.size());
  {
    Progress p(options, "checksumming inputs", total_bytes);
    parallel_for(files.size(), worker_count(options), [&](size_t i) { crcs[i] = crc32_of_file(files[i], &p.bytes); },
                 [&] { p.report(); });
    p.report(/*finished=*/true);
  }
  json inputs = json::array();
  for (size_t i = 0; i < files.size(); ++i)
    inputs.push_back({{"path", fs::absolute(files[i]).string()}, {"bytes", sizes[i]}, {"crc32", crcs[i]}});
  params["files"] = inputs;
  // The byte tokenizer's parameters stay as they were before tokenizers, so its directories are reused.
  if (!tok.folder.empty()) params["tokenizer"] = tokenizer_params(tok);
  if (auto reused = find_reusable(options, params)) return *reused;

  Progress p(options, "tokenizing", total_bytes);
  ShardStream stream(options.out_dir, options.max_shard_tokens, tok.tokenizer->vocab_size());
  Corpus c = Tokenizing(files, tok, options, p, stream).run();
  p.report(/*finished=*/true);
  const int skipped = static_cast<int>(std::count(c.skipped.begin(), c.skipped.end(), true));
  const int kept = static_cast<int>(files.size()) - skipped;
  if (kept == 0)
    throw DataError("prepare-data: none of the " + std::to_string(files.size()) + " input file(s) is text (" +
                    c.notes.front() + (c.notes.size() > 1 ? ", ..." : "") + ")");
  const int64_t n_train = train_size(stream.size(), options, c.doc_starts, tok.tokenizer->eos_id().has_value());
  json extra = {{"documents", c.documents}, {"instruction_examples", c.instruction_examples}};
  PreparedData d = write_prepared(stream, n_train, tok, options, params, extra);
  d.files_kept = kept;
  d.files_skipped = skipped;
  d.input_notes = c.notes;
  return d;
}

PreparedData prepare_synthetic(int64_t num_tokens, uint64_t seed, const PrepareOptions& options) {
  check_options(options);
  if (num_tokens < 2) {
    throw Error("prepare-data: --tokens must be >= 2, got " + std::to_string(num_tokens));
  }
  // The text is generated in memory, a byte per token, and a larger demo corpus teaches nothing
  // more: the chain's floor is reached long before. Refused here rather than as bad_alloc.
  if (num_tokens > kMaxSyntheticTokens) {
    throw Error("prepare-data: --tokens must be at most " + std::to_string(kMaxSyntheticTokens) +
                " (the synthetic corpus is generated in memory, a byte per token), got " + std::to_string(num_tokens));
  }
  const MarkovCorpus corpus(seed);
  json params = common_params(options);
  params["kind"] = "synthetic";
  params["generator"] = "markov2";
  params["tokens"] = num_tokens;
  params["seed"] = seed;
  params["successors"] = corpus.successors();
  if (auto reused = find_reusable(options, params)) return *reused;

  const TokenizerInfo tok = open_tokenizer("byte");
  const int64_t n_train = train_size(num_tokens, options, {}, false);
  ShardStream stream(options.out_dir, options.max_shard_tokens, tok.tokenizer->vocab_size());
  const std::string text = corpus.generate(num_tokens);
  // Encoded a piece at a time: the whole text as int32 ids would take four times its size.
  constexpr size_t kPiece = size_t{1} << 24;
  for (size_t at = 0; at < text.size(); at += kPiece)
    stream.append(tok.tokenizer->encode(std::string_view(text).substr(at, kPiece)));
  const json extra = {{"entropy_floor_nats", corpus.entropy_rate()}, {"unigram_entropy_nats", corpus.unigram_entropy()}};
  return write_prepared(stream, n_train, tok, options, params, extra);
}

}  // namespace feast
