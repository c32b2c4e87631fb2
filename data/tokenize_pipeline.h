// prepare-data's tokenizing pipeline and its progress reports: the documents of the inputs are
// tokenized on worker threads and streamed into a ShardStream in input order. Internal to data/.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "data/prepare.h"
#include "data/shard_stream.h"
#include "data/tokenizer/chat_template.h"
#include "data/tokenizer/tokenizer.h"

namespace feast::prepare_data {

// Tokenizing threads: options.threads, or every core when 0.
int worker_count(const PrepareOptions& o);

// One phase's progress: bytes and tokens counted by any thread, reported from the calling one.
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

// What tokenizing found besides the tokens, which stream into a ShardStream: the document
// starts (8 bytes per document, for the val cut) and the counts and notes for the report.
struct Corpus {
  std::vector<int64_t> doc_starts;   // token offset of each document
  int64_t documents = 0, instruction_examples = 0;
  // Documents holding the end-of-text token before their end (a chat template that ends every
  // turn with it): document masks cannot find their boundaries by that token.
  int64_t eos_inside_documents = 0;
  std::vector<bool> skipped;         // per input file
  std::vector<std::string> notes;
};

// Tokenizes `files` in order into `sink` on worker_count(o) threads, counting bytes and tokens
// in `progress`; chat records are rendered by `chat` (null: the tokenizer has none). Throws
// DataError naming file[:line] for input it cannot read or encode.
Corpus tokenize_documents(const std::vector<std::string>& files, const Tokenizer& tok, const ChatTemplate* chat,
                          const PrepareOptions& o, Progress& progress, DocumentSink& sink);

}  // namespace feast::prepare_data
