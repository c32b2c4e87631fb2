// Inputs are read in order on the calling thread and cut into documents; batches of documents
// are parsed (JSON Lines) and tokenized on worker threads, each result stored at its document's
// index and appended in input order, so the output does not depend on the thread count.
#include "data/tokenize_pipeline.h"

#include <algorithm>

#include <filesystem>
#include <optional>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/parallel_for.h"
#include "data/prepare_inputs.h"

namespace feast::prepare_data {

namespace fs = std::filesystem;

int worker_count(const PrepareOptions& o) {
  return o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

namespace {

class Tokenizing {
 public:
  Tokenizing(const std::vector<std::string>& files, const Tokenizer& tok, const ChatTemplate* chat,
             const PrepareOptions& o, Progress& p, DocumentSink& stream)
      : files_(files), tok_(tok), chat_(chat), eos_(tok.eos_id()), o_(o), progress_(p), stream_(stream) {
    out_.skipped.assign(files.size(), false);
  }

  Corpus run() {
    for (uint32_t f = 0; f < files_.size(); ++f) {
      InputFile in(files_[f]);
      const int64_t size = static_cast<int64_t>(fs::file_size(files_[f]));
      int64_t accounted = 0;
      if (is_jsonl(files_[f])) {
        read_lines(f, in, accounted);
      } else if (is_json_array(files_[f])) {
        read_array(f, in, accounted);
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

  // Splits a JSON file, an array of records (or of texts), into its records, one document each
  // (each is checked as a JSON Lines line is). Anything but an array is refused: read as text, it would
  // train on its braces and quotes without a word.
  void read_array(uint32_t f, InputFile& in, int64_t& accounted) {
    const std::string& path = files_[f];
    std::string text;
    while (in.read_into(text, 1 << 20) > 0) {
    }
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    const std::string expected =
        "prepare-data reads a .json file as a JSON array of records, {\"text\": ...} or {\"prompt\": ..., "
        "\"completion\": ...}, or of texts, and a .jsonl file as one record per line; to train on the file as "
        "plain text, give it another extension";
    if (j.is_discarded()) throw DataError("prepare-data: " + path + ": not valid JSON; " + expected);
    if (!j.is_array())
      throw DataError("prepare-data: " + path + ": a JSON " + j.type_name() + ", not an array of records; " + expected);
    for (size_t i = 0; i < j.size(); ++i) {
      // A string is a document's text (["first text", "second text"]); anything else a record.
      const nlohmann::json& r = j[i];
      Document d{f, static_cast<int64_t>(i) + 1, r.is_string() ? nlohmann::json{{"text", r}}.dump() : r.dump(), 0};
      // Progress: the file's bytes spread over its records.
      d.raw_bytes = static_cast<int64_t>((i + 1) * static_cast<size_t>(in.raw_offset()) / j.size() -
                                         i * static_cast<size_t>(in.raw_offset()) / j.size());
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
          encode_json_line(tok_, chat_, d.text, e);
        else
          encode_text_file(tok_, path, d.text, o_.keep_binary, e);
      } catch (const DataError& ex) {
        e.error = ex.what();  // the tokenizer's (invalid UTF-8 at byte N)
      }
      if (!e.error.empty()) {
        // Appended, not path + ":" + line: GCC 12 warns (-Wrestrict) on that concatenation inlined.
        std::string where = path;
        if (d.line > 0) {
          if (is_json_array(path)) {
            where += ": record ";
          } else {
            where += ':';
          }
          where += std::to_string(d.line);
        }
        e.error = where + ": " + e.error;
      }
      // A conversation ends as its template ends it; other documents end with the end-of-text token.
      if (eos_ && e.counted.empty() && (!e.tokens.empty() || e.prompt_tokens >= 0)) {
        e.tokens.push_back(*eos_);
      }
      if (e.prompt_tokens >= 0) {  // the prompt does not count; the completion and the eos do
        e.counted.assign(e.tokens.size(), 1);
        std::fill_n(e.counted.begin(), std::min<size_t>(e.counted.size(), size_t(e.prompt_tokens)), uint8_t{0});
      }
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
    if (eos_ && std::find(e.tokens.begin(), e.tokens.end() - 1, *eos_) != e.tokens.end() - 1) ++out_.eos_inside_documents;
    out_.doc_starts.push_back(stream_.size());
    if (!e.counted.empty()) ++out_.instruction_examples;
    stream_.append(e.tokens, e.counted);
    std::vector<int32_t>().swap(e.tokens);
    std::vector<uint8_t>().swap(e.counted);
  }

  const std::vector<std::string>& files_;
  const Tokenizer& tok_;
  const ChatTemplate* chat_;
  const std::optional<int32_t> eos_;
  const PrepareOptions& o_;
  Progress& progress_;
  DocumentSink& stream_;
  std::vector<Document> batch_;
  size_t batch_bytes_ = 0;
  Corpus out_;
};

}  // namespace

Corpus tokenize_documents(const std::vector<std::string>& files, const Tokenizer& tok, const ChatTemplate* chat,
                          const PrepareOptions& o, Progress& progress, DocumentSink& stream) {
  return Tokenizing(files, tok, chat, o, progress, stream).run();
}

}  // namespace feast::prepare_data
