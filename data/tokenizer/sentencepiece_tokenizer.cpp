// SentencePiece through libsentencepiece, with Hugging Face's LlamaTokenizer around it. The
// library encodes `<s>` written in the text as the characters '<', 's', '>'; HF first splits
// such special tokens off and encodes the text between them piece by piece. How each piece gets
// SentencePiece's dummy-prefix space depends on tokenizer_config.json's "legacy":
//   legacy (true or absent): every piece is encoded as SentencePiece would encode it alone, so
//     each gets the prefix when the model adds one;
//   legacy false (Llama-2 as saved by recent transformers): '▁' is prepended to the whole text
//     once (when add_prefix_space, the default) and the pieces are encoded with the prefix
//     off, so text after a special token gets none.
// Decode undoes exactly what encode added, run by run between special tokens.
// The library's encoder takes ~60-100 bytes of memory per character of one call and slows down
// on long inputs, so long runs are cut before a '\n' and encoded chunk by chunk when that cannot
// change the ids.
#include "data/tokenizer/sentencepiece_tokenizer.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <unordered_map>

#include <nlohmann/json.hpp>
#include <sentencepiece_processor.h>

#include "core/error.h"

namespace feast {

using nlohmann::json;

namespace {

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // U+2581, SentencePiece's '▁'
// Runs longer than this are encoded in chunks (when the model allows it): long enough that the
// extra calls cost nothing, short enough that one call's memory stays a few megabytes.
constexpr size_t kChunkBytes = size_t{64} << 10;

// The model with its normalizer's add_dummy_prefix overridden. Protocol buffers merge a
// repeated embedded message into the first, so appending ModelProto field 3 (normalizer_spec)
// holding only field 3 (add_dummy_prefix) changes that one flag: no protobuf headers needed.
void load_with_dummy_prefix(sentencepiece::SentencePieceProcessor& sp, const std::string& serialized,
                            bool add_dummy_prefix, const std::string& path) {
  std::string patched = serialized;
  patched += std::string{'\x1a', '\x02', '\x18', add_dummy_prefix ? '\x01' : '\x00'};
  const auto status = sp.LoadFromSerializedProto(patched);
  if (!status.ok()) throw DataError(path + ": not a SentencePiece model (" + status.ToString() + ")");
}

// A minimal protocol-buffer reader for the few ModelProto fields the library does not expose
// (Debian ships no generated sentencepiece_model.pb.h).
bool read_varint(std::string_view s, size_t& i, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && i < s.size(); shift += 7) {
    const auto b = static_cast<unsigned char>(s[i++]);
    v |= uint64_t{b & 0x7Fu} << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

// Calls f(field number, varint value, length-delimited bytes) for each field of the message in
// `s`, in order; false if `s` is malformed.
template <typename F>
bool for_each_field(std::string_view s, F&& f) {
  size_t i = 0;
  while (i < s.size()) {
    uint64_t key = 0, v = 0;
    std::string_view bytes;
    if (!read_varint(s, i, key)) return false;
    switch (key & 7) {
      case 0:
        if (!read_varint(s, i, v)) return false;
        break;
      case 1:
        if (s.size() - i < 8) return false;
        i += 8;
        break;
      case 2:
        if (!read_varint(s, i, v) || v > s.size() - i) return false;
        bytes = s.substr(i, v);
        i += v;
        break;
      case 5:
        if (s.size() - i < 4) return false;
        i += 4;
        break;
      default:
        return false;
    }
    f(static_cast<uint32_t>(key >> 3), v, bytes);
  }
  return true;
}

// Whether the normalizer and model of a serialized ModelProto treat '\n' as a hard boundary that
// only the dummy prefix crosses: identity normalization (no precompiled charsmap, whose rules may
// span characters), whitespace kept as written, the prefix at the front (not a suffix), and a
// unigram or BPE model (a word model would look '\n' up inside a word). Repeated embedded
// messages merge, later scalars win, as protobuf parses them.
bool normalizer_keeps_newlines(std::string_view serialized) {
  int64_t model_type = 1;  // proto defaults: UNIGRAM, remove_extra_whitespaces true
  bool suffix = false, charsmap = false, remove_extra_whitespaces = true;
  const bool parsed = for_each_field(serialized, [&](uint32_t field, uint64_t, std::string_view bytes) {
    if (field == 2) {  // trainer_spec
      for_each_field(bytes, [&](uint32_t f, uint64_t v, std::string_view) {
        if (f == 3) model_type = static_cast<int64_t>(v);
        if (f == 24) suffix = v != 0;  // treat_whitespace_as_suffix
      });
    } else if (field == 3) {  // normalizer_spec
      for_each_field(bytes, [&](uint32_t f, uint64_t v, std::string_view b) {
        if (f == 2) charsmap = !b.empty();  // precompiled_charsmap
        if (f == 4) remove_extra_whitespaces = v != 0;
      });
    }
  });
  return parsed && (model_type == 1 || model_type == 2) && !suffix && !charsmap && !remove_extra_whitespaces;
}

}  // namespace

struct SentencePieceTokenizer::Impl {
  std::string path;
  // legacy: `model` encodes and decodes every run. Otherwise `bare` (no dummy prefix) does,
  // and the first run's prefix is HF's '▁', added and removed here. `bare` also encodes
  // continuations and every chunk of a long run after the first.
  sentencepiece::SentencePieceProcessor model, bare;
  bool legacy = true;
  bool add_prefix_space = true;
  size_t unk_length = 0;  // ids SentencePiece gives the unknown token's text (HF's unk_token_length)
  std::string unk_text;
  int32_t space_id = -1;  // the '▁' piece
  AddedTokenSplitter split;
  std::unordered_map<int32_t, AddedToken> added;  // id -> token
  int64_t size = 0;
  int32_t pieces = 0;  // ids below come from the model; added tokens may lie above
  std::optional<int32_t> eos, bos;
  // Long runs are cut before a '\n' into chunks of about this many bytes; 0 when the model could
  // give other ids for the pieces than for the whole (see chunk_end).
  size_t chunk_bytes = 0;

  void encode_with(const sentencepiece::SentencePieceProcessor& sp, std::string_view text,
                   std::vector<int>& ids) const {
    const auto status = sp.Encode(text, &ids);
    if (!status.ok()) throw DataError(path + ": SentencePiece cannot encode the text: " + status.ToString());
  }
  std::string decode_with(const sentencepiece::SentencePieceProcessor& sp, const std::vector<int>& ids) const {
    std::string text;
    if (ids.empty()) return text;
    const auto status = sp.Decode(ids, &text);
    if (!status.ok()) throw DataError(path + ": SentencePiece cannot decode: " + status.ToString());
    return text;
  }
  bool is_special(int32_t id) const {
    const auto it = added.find(id);
    return it != added.end() && it->second.special;
  }

  // Where the chunk of `text` that starts at `start` ends: at the last '\n' within chunk_bytes,
  // else at the first one after, else at the end. Cutting there is exact when no piece holds a
  // '\n', '\n' is not unknown (so no run of unknowns spans it) and the normalizer leaves it be:
  // nothing then merges across the '\n', and only the text's first chunk gets the dummy prefix.
  size_t chunk_end(std::string_view text, size_t start) const {
    if (chunk_bytes == 0 || text.size() - start <= chunk_bytes) return text.size();
    size_t cut = text.rfind('\n', start + chunk_bytes);
    if (cut == std::string_view::npos || cut <= start) cut = text.find('\n', start + 1);
    return cut == std::string_view::npos ? text.size() : cut;
  }

  // Appends the ids of `text` without a dummy prefix. Text that starts with whitespace is encoded
  // after the unknown token's text, whose ids are then dropped (HF's legacy=False trick), so a
  // model that strips leading whitespace keeps it.
  void append_bare(std::string_view text, std::vector<int>& ids, std::vector<int32_t>& out) const {
    if (text.starts_with(' ') || text.starts_with(kSpaceSymbol)) {
      std::string guarded = unk_text;
      guarded.append(text);
      encode_with(bare, guarded, ids);
      if (ids.size() >= unk_length) ids.erase(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(unk_length));
    } else {
      encode_with(bare, text, ids);
    }
    out.insert(out.end(), ids.begin(), ids.end());
  }

  // Appends the ids of a run of text between special tokens, with the model's dummy prefix or
  // without, chunk by chunk: each chunk after the first starts with '\n' and gets no prefix.
  void append_run(std::string_view text, bool dummy_prefix, std::vector<int32_t>& out) const {
    std::vector<int> ids;
    size_t end = chunk_end(text, 0);
    if (dummy_prefix) {
      encode_with(model, text.substr(0, end), ids);
      out.insert(out.end(), ids.begin(), ids.end());
    } else {
      append_bare(text.substr(0, end), ids, out);
    }
    while (end < text.size()) {
      const size_t start = end;
      end = chunk_end(text, start);
      encode_with(bare, text.substr(start, end - start), ids);
      out.insert(out.end(), ids.begin(), ids.end());
    }
  }

  std::vector<int32_t> encode(std::string_view text, bool continuation) const;
};

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path, const std::string& config_json)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = model_path;
  std::ifstream in(model_path, std::ios::binary);
  if (!in) throw DataError("tokenizer: cannot read " + model_path);
  const std::string serialized((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto status = m.model.LoadFromSerializedProto(serialized);
  if (!status.ok()) {
    throw DataError(model_path + ": not a SentencePiece model (" + status.ToString() +
                    "); the file is corrupt, truncated or of another kind");
  }
  m.pieces = m.model.GetPieceSize();
  m.size = m.pieces;
  if (m.model.bos_id() >= 0) m.bos = m.model.bos_id();
  if (m.model.eos_id() >= 0) m.eos = m.model.eos_id();

  json config = json::object();
  if (!config_json.empty()) {
    std::ifstream cin(config_json, std::ios::binary);
    if (!cin) throw DataError("tokenizer: cannot read " + config_json);
    try {
      config = json::parse(cin);
    } catch (const json::exception& e) {
      throw DataError(config_json + ": not valid JSON (" + e.what() + ")");
    }
  }
  std::vector<AddedToken> added;
  try {
    m.legacy = config.value("legacy", json(true)).is_null() || config.value("legacy", true);
    m.add_prefix_space = config.value("add_prefix_space", json(true)).is_null() || config.value("add_prefix_space", true);
    if (config.contains("added_tokens_decoder")) {
      for (const auto& [id_text, t] : config.at("added_tokens_decoder").items()) {
        AddedToken a;
        a.id = std::stoi(id_text);
        a.content = t.at("content").get<std::string>();
        a.special = t.value("special", false);
        a.lstrip = t.value("lstrip", false);
        a.rstrip = t.value("rstrip", false);
        a.single_word = t.value("single_word", false);
        added.push_back(a);
      }
    } else {
      // LlamaTokenizer's defaults: only <unk>, <s> and </s> are split off, not every control
      // piece (Mistral v3's [INST] stays text).
      for (const int id : {m.model.unk_id(), m.model.bos_id(), m.model.eos_id()}) {
        if (id < 0 || id >= m.pieces) continue;
        const bool seen = std::any_of(added.begin(), added.end(), [&](const AddedToken& a) { return a.id == id; });
        if (!seen) added.push_back(AddedToken{m.model.IdToPiece(id), id, true, false, false, false, false});
      }
    }
    const auto unk = config.find("unk_token");
    m.unk_text = unk != config.end() && unk->is_string() ? unk->get<std::string>() : "<unk>";
  } catch (const std::exception& e) {
    throw DataError(config_json + ": unexpected value (" + e.what() + ")");
  }
  for (const AddedToken& a : added) {
    if (a.id < 0) throw DataError(config_json + ": added token '" + a.content + "' has a negative id");
    m.added[a.id] = a;
    m.size = std::max<int64_t>(m.size, a.id + int64_t{1});
  }
  m.split = AddedTokenSplitter(std::move(added));
  load_with_dummy_prefix(m.bare, serialized, false, model_path);
  std::vector<int> ids;
  m.encode_with(m.bare, m.unk_text, ids);
  m.unk_length = ids.size();
  m.space_id = m.bare.PieceToId(kSpaceSymbol);

  bool newline_in_piece = false;
  for (int id = 0; id < m.pieces && !newline_in_piece; ++id)
    newline_in_piece = m.model.IdToPiece(id).find('\n') != std::string::npos;
  m.encode_with(m.bare, "\n", ids);
  const bool newline_unknown = ids.empty() || std::any_of(ids.begin(), ids.end(), [&](int id) { return m.bare.IsUnknown(id); });
  if (!newline_in_piece && !newline_unknown && normalizer_keeps_newlines(serialized)) m.chunk_bytes = kChunkBytes;
}

SentencePieceTokenizer::SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept = default;
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  check_utf8(text);
  return impl_->encode(text, false);
}

std::vector<int32_t> SentencePieceTokenizer::encode_continuation(std::string_view text) const {
  check_utf8(text);
  return impl_->encode(text, true);
}

// A continuation is encoded as if text came before it: no dummy prefix and no '▁' on its first
// run; runs after a special token are encoded as in encode().
std::vector<int32_t> SentencePieceTokenizer::Impl::encode(std::string_view text, bool continuation) const {
  std::vector<int32_t> out;
  std::vector<AddedTokenSplitter::Piece> runs;
  if (legacy) {
    split.split(text, runs);
    for (const auto& p : runs) {
      if (p.id >= 0) out.push_back(p.id);
      else append_run(p.text, !(continuation && p.text.data() == text.data()), out);
    }
    return out;
  }
  // LlamaTokenizer.tokenize with legacy=False, step by step.
  if (text.empty()) return out;
  const bool prefix = add_prefix_space && !continuation;
  std::string t;
  t.reserve(text.size() + kSpaceSymbol.size());
  if (prefix) t += kSpaceSymbol;
  for (size_t i = 0; i < text.size();) {  // HF reads a written '▁' as a space
    if (text.compare(i, kSpaceSymbol.size(), kSpaceSymbol) == 0) {
      t += ' ';
      i += kSpaceSymbol.size();
    } else {
      t += text[i++];
    }
  }
  split.split(t, runs);
  for (const auto& p : runs) {
    if (p.id >= 0) out.push_back(p.id);
    else append_run(p.text, false, out);
  }
  // A '▁' token before a special token at the start is dropped (the added '▁' or a written space).
  if (!continuation && out.size() > 1 && out[0] == space_id && is_special(out[1]) && !runs.empty() && runs[0].id < 0)
    out.erase(out.begin());
  return out;
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids) const {
  const Impl& m = *impl_;
  std::string text;
  std::vector<int> run;
  bool first_run = true;  // the run at the very start, which carries the prefix space
  auto flush = [&] {
    if (run.empty()) return;
    if (m.legacy) {
      text += m.decode_with(m.model, run);
    } else {
      std::string s = m.decode_with(m.bare, run);
      if (first_run && text.empty() && m.add_prefix_space && s.starts_with(' ')) s.erase(0, 1);
      text += s;
    }
    run.clear();
  };
  for (const int32_t id : ids) {
    if (id < 0 || id >= m.size) {
      throw DataError(m.path + ": cannot decode token id " + std::to_string(id) + " (vocabulary size " +
                      std::to_string(m.size) + ")");
    }
    const auto it = m.added.find(id);
    if (it != m.added.end()) {
      flush();
      first_run = false;
      text += it->second.content;
    } else if (id < m.pieces) {
      run.push_back(id);
    }
  }
  flush();
  return text;
}

int64_t SentencePieceTokenizer::vocab_size() const { return impl_->size; }
std::optional<int32_t> SentencePieceTokenizer::eos_id() const { return impl_->eos; }
std::optional<int32_t> SentencePieceTokenizer::bos_id() const { return impl_->bos; }
bool SentencePieceTokenizer::is_special(int32_t id) const {
  const Impl& m = *impl_;
  if (id == m.eos || id == m.bos) return true;
  if (const auto it = m.added.find(id); it != m.added.end()) return it->second.special;
  return id >= 0 && id < m.pieces && (m.model.IsControl(id) || m.model.IsUnknown(id));
}
bool SentencePieceTokenizer::splits_at_newlines() const { return impl_->chunk_bytes > 0; }
void SentencePieceTokenizer::set_chunk_bytes(size_t bytes) {
  if (impl_->chunk_bytes > 0) impl_->chunk_bytes = std::max<size_t>(bytes, 1);
}

}  // namespace feast
