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
#include "data/sentencepiece_tokenizer.h"

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

}  // namespace

struct SentencePieceTokenizer::Impl {
  std::string path;
  // legacy: `model` encodes and decodes every run. Otherwise `bare` (no dummy prefix) does,
  // and the first run's prefix is HF's '▁', added and removed here.
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
      for (int id = 0; id < m.pieces; ++id)
        if (m.model.IsControl(id) || m.model.IsUnknown(id))
          added.push_back(AddedToken{m.model.IdToPiece(id), id, true, false, false, false, false});
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
  if (!m.legacy) {
    load_with_dummy_prefix(m.bare, serialized, false, model_path);
    std::vector<int> ids;
    m.encode_with(m.bare, m.unk_text, ids);
    m.unk_length = ids.size();
    m.space_id = m.bare.PieceToId(kSpaceSymbol);
  }
}

SentencePieceTokenizer::SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept = default;
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  const Impl& m = *impl_;
  check_utf8(text);
  std::vector<int32_t> out;
  std::vector<AddedTokenSplitter::Piece> pieces;
  std::vector<int> ids;
  if (m.legacy) {
    m.split.split(text, pieces);
    for (const auto& p : pieces) {
      if (p.id >= 0) {
        out.push_back(p.id);
      } else {
        m.encode_with(m.model, p.text, ids);
        out.insert(out.end(), ids.begin(), ids.end());
      }
    }
    return out;
  }
  // LlamaTokenizer.tokenize with legacy=False, step by step.
  if (text.empty()) return out;
  std::string t;
  t.reserve(text.size() + kSpaceSymbol.size());
  if (m.add_prefix_space) t += kSpaceSymbol;
  for (size_t i = 0; i < text.size();) {  // HF reads a written '▁' as a space
    if (text.compare(i, kSpaceSymbol.size(), kSpaceSymbol) == 0) {
      t += ' ';
      i += kSpaceSymbol.size();
    } else {
      t += text[i++];
    }
  }
  m.split.split(t, pieces);
  std::string guarded;
  for (const auto& p : pieces) {
    if (p.id >= 0) {
      out.push_back(p.id);
      continue;
    }
    if (p.text.starts_with(' ') || p.text.starts_with(kSpaceSymbol)) {
      // HF encodes unk_token + text and drops the unknown token's ids, so that leading
      // whitespace survives a model that strips it.
      guarded.assign(m.unk_text);
      guarded.append(p.text);
      m.encode_with(m.bare, guarded, ids);
      if (ids.size() >= m.unk_length) ids.erase(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(m.unk_length));
    } else {
      m.encode_with(m.bare, p.text, ids);
    }
    out.insert(out.end(), ids.begin(), ids.end());
  }
  // Text that starts with a special token: the '▁' before it is dropped.
  if (m.add_prefix_space && out.size() > 1 && out[0] == m.space_id && m.is_special(out[1]) &&
      !pieces.empty() && pieces[0].id < 0)
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

}  // namespace feast
