// Preparation: tokenise, streaming the tokens (and loss masks) to provisional shards, split
// train/val, write the final shards, then meta.json last, so a directory with a meta.json is
// complete. Memory holds one shard and the document starts, not the corpus. meta.json's
// "params" object is the key for reuse: same parameters (including each input file's size and
// CRC-32, and the tokenizer's files) and every listed file present means nothing to do.
//
// The jobs on either side of the driver live beside it: reading inputs and encoding documents
// (prepare_inputs), tokenizing them on threads (tokenize_pipeline), the shards (shard_stream).
#include "data/prepare.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <string_view>
#include <tuple>
#include <utility>

#include <zlib.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/parallel_for.h"
#include "data/tokenizer/byte_tokenizer.h"
#include "data/dataset.h"
#include "data/dataset_meta.h"
#include "data/packing.h"
#include "data/loss_mask.h"
#include "data/markov_corpus.h"
#include "data/shard.h"
#include "data/shard_stream.h"
#include "data/tokenize_pipeline.h"
#include "data/tokenizer/tokenizer.h"

namespace feast {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace prepare_data;

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
  if (o.pack_seq_len < 0) throw Error("prepare-data: --seq-len must be >= 1, got " + std::to_string(o.pack_seq_len));
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
  if (meta.contains("val_floor_nats")) {
    d.val_floor = meta["val_floor_nats"].get<double>();
    d.val_floor_stddev = meta.at("val_floor_stddev_nats").get<double>();
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
  if (meta.contains("packing")) {
    const json& p = meta["packing"];
    PackingSummary s;
    s.window = p.at("window").get<int64_t>();
    s.train_windows = p.at("train_windows").get<int64_t>();
    s.val_windows = p.at("val_windows").get<int64_t>();
    s.documents = p.at("documents").get<int64_t>();
    s.split_documents = p.at("split_documents").get<int64_t>();
    s.pieces = p.at("pieces").get<int64_t>();
    s.padding_tokens = p.at("padding_tokens").get<int64_t>();
    d.packing = s;
  }
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
        if (found->records_document_starts() && !fs::is_regular_file(document_starts_path(p))) return std::nullopt;
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
                                       "added_tokens.json",  "config.json",             "generation_config.json",
                                       "chat_template.jinja"};
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

// Writes the shards (see ShardStream::finish), packed data's document starts beside them (a
// byte per token of the whole stream, train then val), then meta.json last.
PreparedData write_prepared(ShardStream& stream, int64_t n_train, const TokenizerInfo& t, const PrepareOptions& o,
                            const json& params, json extra, const std::vector<uint8_t>* document_starts = nullptr) {
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
  if (document_starts) {
    size_t at = 0;
    for (const char* split : {"train", "val"})
      for (const auto& name : meta[split]["shards"]) {
        const std::string shard = (dir / name.get<std::string>()).string();
        const auto n = static_cast<size_t>(Shard(shard).size());
        FEAST_CHECK(at + n <= document_starts->size(), "document starts for " << document_starts->size()
                                                                               << " tokens, the shards hold more");
        write_loss_mask(document_starts_path(shard), std::span(*document_starts).subspan(at, n),
                        Durability::kByCaller);
        at += n;
      }
    FEAST_CHECK(at == document_starts->size(), "document starts for " << document_starts->size() << " tokens, the "
                                                                       << "shards hold " << at);
    meta["document_starts"] = true;
  }

  // The shards were written without a sync each (thousands of small ones would cost two fsyncs
  // apiece): one sync of their file system puts them on the disk before meta.json, written last,
  // says the directory is complete.
  sync_file_system(dir.string());
  write_dataset_meta(dir.string(), meta);
  return from_meta(dir, meta);
}

// --pack: the samples before the val cut (train_size's, moved to a sample's start) packed into
// windows, then the rest; meta.json's "packing" into extra. Returns the train split's tokens.
int64_t pack_splits(const DocumentPacker& packer, ShardStream& stream, const std::vector<int64_t>& doc_starts,
                    const PrepareOptions& o, int32_t pad, json& extra, std::vector<uint8_t>& starts) {
  const size_t n = packer.documents();
  if (n < 2)
    throw DataError("prepare-data --pack: the input holds " + std::to_string(n) +
                    " sample(s); a train and a val split need at least 2");
  const int64_t cut = train_size(packer.size(), o, doc_starts, true);
  // The samples starting before the cut train; at least one on each side.
  size_t train = static_cast<size_t>(std::lower_bound(doc_starts.begin(), doc_starts.end(), cut) - doc_starts.begin());
  train = std::clamp<size_t>(train, 1, n - 1);
  const int64_t window = o.pack_seq_len + 1;
  const PackedSplit t = packer.write(stream, 0, train, pad, starts), v = packer.write(stream, train, n, pad, starts);
  extra["packing"] = {{"window", window},
                      {"seq_len", o.pack_seq_len},
                      {"train_windows", t.windows},
                      {"val_windows", v.windows},
                      {"documents", t.documents + v.documents},
                      {"split_documents", t.split_documents + v.split_documents},
                      {"pieces", t.pieces + v.pieces},
                      {"padding_tokens", t.padding_tokens + v.padding_tokens},
                      {"pad_id", pad}};
  return t.windows * window;
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

  const std::optional<int32_t> eos = tok.tokenizer->eos_id();
  const int64_t window = options.pack_seq_len > 0 ? options.pack_seq_len + 1 : 0;
  if (window > 0) {
    if (!eos)
      throw DataError("prepare-data --pack: the " + tok.tokenizer->kind() + " tokenizer has no end-of-text token to end "
                      "the samples and pad the windows with; give --tokenizer a model's tokenizer folder");
    params["pack_seq_len"] = options.pack_seq_len;
  }
  if (auto reused = find_reusable(options, params)) return *reused;

  Progress p(options, "tokenizing", total_bytes);
  // Packed shards hold whole windows.
  const int64_t shard_tokens = window > 0 ? std::max(window, options.max_shard_tokens / window * window)
                                          : options.max_shard_tokens;
  ShardStream stream(options.out_dir, shard_tokens, tok.tokenizer->vocab_size());
  std::optional<DocumentPacker> packer;
  if (window > 0) packer.emplace(window);
  // A chat model's template renders conversations ({"messages": ...} records).
  std::optional<ChatTemplate> chat;
  if (!tok.folder.empty() && ChatTemplate::available(tok.folder)) chat = ChatTemplate::load(tok.folder);
  Corpus c = tokenize_documents(files, *tok.tokenizer, chat ? &*chat : nullptr, options, p,
                                packer ? static_cast<DocumentSink&>(*packer) : stream);
  p.report(/*finished=*/true);
  const int skipped = static_cast<int>(std::count(c.skipped.begin(), c.skipped.end(), true));
  const int kept = static_cast<int>(files.size()) - skipped;
  if (kept == 0)
    throw DataError("prepare-data: none of the " + std::to_string(files.size()) + " input file(s) is text (" +
                    c.notes.front() + (c.notes.size() > 1 ? ", ..." : "") + ")");
  json extra = {{"documents", c.documents}, {"instruction_examples", c.instruction_examples}};
  if (eos) extra["eos_inside_documents"] = c.eos_inside_documents;
  int64_t n_train = 0;
  std::vector<uint8_t> document_starts;  // packed data's
  if (packer) {
    n_train = pack_splits(*packer, stream, c.doc_starts, options, *eos, extra, document_starts);
  } else {
    n_train = train_size(stream.size(), options, c.doc_starts, eos.has_value());
  }
  PreparedData d =
      write_prepared(stream, n_train, tok, options, params, extra, packer ? &document_starts : nullptr);
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
  json extra = {{"entropy_floor_nats", corpus.entropy_rate()}, {"unigram_entropy_nats", corpus.unigram_entropy()}};
  // The floor on the validation split itself: a val_loss is measured on these tokens, not on
  // endless text, and may fall a little below the entropy rate.
  if (n_train < num_tokens) {
    const MarkovCorpus::Score val = corpus.score(text, n_train);
    extra["val_floor_nats"] = val.mean;
    extra["val_floor_stddev_nats"] = val.stddev;
  }
  return write_prepared(stream, n_train, tok, options, params, extra);
}

}  // namespace feast
