// Reading prepare-data's inputs (plain and gzip files, JSON Lines records) and encoding one
// document: a whole text file, after the checks that tell text from other files, or one line.
#include "data/prepare_inputs.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace feast::prepare_data {

using nlohmann::json;

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool is_jsonl(const std::string& path) { return ends_with(path, ".jsonl") || ends_with(path, ".jsonl.gz"); }
bool is_json_array(const std::string& path) { return ends_with(path, ".json") || ends_with(path, ".json.gz"); }

InputFile::InputFile(const std::string& path) : path_(path) {
  if (ends_with(path, ".gz")) {
    gz_ = gzopen(path.c_str(), "rb");
    if (!gz_) throw DataError(path + ": cannot open input: " + std::strerror(errno));
    gzbuffer(gz_, 1 << 17);
  } else {
    f_.open(path, std::ios::binary);
    if (!f_) throw DataError(path + ": cannot open input text file: " + std::strerror(errno));
  }
}

InputFile::~InputFile() {
  if (gz_) gzclose(gz_);
}

size_t InputFile::read_into(std::string& out, size_t n) {
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

}  // namespace

namespace {

// A chat record: its messages rendered by the model's template, only the assistant turns
// counting in the loss.
void encode_conversation(const Tokenizer& tok, const ChatTemplate* chat, const json& messages, Encoded& e) {
  if (!chat) {
    e.error = "has \"messages\" (a conversation), but the tokenizer has no chat template to render it with; "
              "give prepare-data --tokenizer the folder of a chat model (one whose tokenizer_config.json has a "
              "\"chat_template\", or with a chat_template.jinja)";
    return;
  }
  try {
    const std::vector<ChatMessage> turns = parse_chat_messages(messages);
    if (std::none_of(turns.begin(), turns.end(), [](const ChatMessage& m) { return m.role == "assistant"; })) {
      e.error = "a conversation without an assistant turn: nothing in it would count in the loss";
      return;
    }
    EncodedChat enc = encode_chat(tok, chat->render_for_training(turns));
    e.tokens = std::move(enc.ids);
    e.counted = std::move(enc.counted);
  } catch (const DataError& ex) {
    e.error = ex.what();
  }
}

}  // namespace

// Tokenizes one JSON Lines line: {"text": ...}, {"prompt": ..., "completion": ...} or
// {"messages": [...]}.
void encode_json_line(const Tokenizer& tok, const ChatTemplate* chat, const std::string& line, Encoded& e) {
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
    e.error = std::string("a JSON ") + j.type_name() +
              ", not an object with a \"text\" field, \"prompt\" and \"completion\" fields, or \"messages\"";
    return;
  }
  if (j.contains("messages")) {
    for (const char* other : {"text", "prompt", "completion"})
      if (j.contains(other)) {
        e.error = std::string("has both \"messages\" and \"") + other +
                  "\": a line is a document (\"text\"), an instruction example (\"prompt\" and \"completion\") or a "
                  "conversation (\"messages\")";
        return;
      }
    encode_conversation(tok, chat, j["messages"], e);
    return;
  }
  const bool has_text = j.contains("text"), has_prompt = j.contains("prompt"), has_completion = j.contains("completion");
  if (has_text && (has_prompt || has_completion)) {
    e.error = std::string("has both \"text\" and \"") + (has_prompt ? "prompt" : "completion") +
              "\": a line is either a document (\"text\") or an instruction example (\"prompt\" and \"completion\")";
    return;
  }
  if (!has_text && !has_prompt && !has_completion) {
    e.error = "has no \"text\" field, no \"prompt\" and \"completion\" fields and no \"messages\"";
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

}  // namespace feast::prepare_data
