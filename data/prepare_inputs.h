// Reading prepare-data's inputs: plain and gzip files read in blocks, the documents they are cut
// into, and encoding one document (a whole text file, or one JSON Lines record) after the checks
// that tell text from other files. Internal to data/ (prepare.cpp and the tokenizing pipeline).
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <zlib.h>

#include "data/tokenizer/chat_template.h"
#include "data/tokenizer/tokenizer.h"

namespace feast::prepare_data {

bool ends_with(const std::string& s, const std::string& tail);

bool is_jsonl(const std::string& path);
// Whether `path` names a JSON file (.json, .json.gz): an array of the records a JSON Lines file
// holds one per line (what `datasets`' to_json(lines=False) and many instruction sets ship).
bool is_json_array(const std::string& path);

// A plain or gzip file (by name) read in blocks; raw_offset() counts the bytes as stored.
class InputFile {
 public:
  explicit InputFile(const std::string& path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // Appends up to n bytes to out; returns how many (0 at the end).
  size_t read_into(std::string& out, size_t n);
  int64_t raw_offset() const { return gz_ ? static_cast<int64_t>(gzoffset(gz_)) : raw_; }

 private:
  std::string path_;
  gzFile gz_ = nullptr;
  std::ifstream f_;
  int64_t raw_ = 0;
};

struct Document {
  uint32_t file = 0;
  int64_t line = 0;       // 1-based line of a JSON Lines file, or record of a JSON array; 0: a text file
  std::string text;       // the file's contents, or the JSON line
  int64_t raw_bytes = 0;  // input bytes as stored it accounts for (progress)
};

struct Encoded {
  std::vector<int32_t> tokens;  // eos included (but after a conversation: its template ends it)
  int64_t prompt_tokens = -1;   // >= 0: a prompt/completion example; its first prompt_tokens are not targets
  std::vector<uint8_t> counted;  // a conversation: per token, 1 where it counts (its assistant turns)
  bool skipped = false;         // a text file with NUL bytes
  std::string note;             // a warning about the input
  std::string error;            // what is wrong, prefixed with file[:line]
};

// Tokenizes one JSON Lines line: {"text": ...}, {"prompt": ..., "completion": ...}, or
// {"messages": [{"role", "content"}, ...]} rendered by `chat` (null: the tokenizer has no chat
// template, and such a line is an error).
void encode_json_line(const Tokenizer& tok, const ChatTemplate* chat, const std::string& line, Encoded& e);

// Tokenizes a whole text file, after the checks that tell text from other files.
void encode_text_file(const Tokenizer& tok, const std::string& path, const std::string& text, bool keep_binary,
                      Encoded& e);

}  // namespace feast::prepare_data
