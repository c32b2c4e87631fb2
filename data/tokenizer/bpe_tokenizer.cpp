// Byte-level BPE, following Hugging Face's `tokenizers` step for step so ids match it exactly:
// AddedVocabulary's split (raw text, then normalized text), the normalizer (none or NFC), the
// pre-tokenizers (ByteLevel, Split, Digits, Sequence of them), and BPE's merge loop (lowest rank first, leftmost on ties). Pieces stay raw
// bytes throughout: the vocabulary is converted from GPT-2's printable alphabet back to bytes
// once at load, so encoding never builds the mapped strings.
//
// This file encodes and decodes; bpe_load.cpp reads the files into BpeTokenizer::Impl (bpe_impl.h).
#include "data/tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <functional>
#include <mutex>

#include "core/error.h"
#include "data/tokenizer/bpe_impl.h"
#include "data/tokenizer/bpe_regex.h"
#include "data/tokenizer/byte_alphabet.h"
#include "data/tokenizer/unicode_nfc.h"

namespace feast {

using namespace bpe_detail;

// ---- Encoding -------------------------------------------------------------------------------

void BpeTokenizer::Impl::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<AddedTokenSplitter::Piece> first, second;
  raw_split.split(text, first);
  for (const auto& p : first) {
    if (p.id >= 0) {
      out.push_back(p.id);
      continue;
    }
    std::string normalized;
    std::string_view piece = p.text;
    if (nfc) {
      normalized = feast::nfc(piece);
      piece = normalized;
    }
    second.clear();
    normalized_split.split(piece, second);
    for (const auto& q : second) {
      if (q.id >= 0) out.push_back(q.id);
      else pre_tokenize(q.text, 0, false, out);
    }
  }
}

// Runs pre-tokenizer steps [step, end) on `piece` (raw bytes), then BPE on each final piece.
// `mapped`: a ByteLevel step ran already, so later Split steps see GPT-2's alphabet, as in HF.
void BpeTokenizer::Impl::pre_tokenize(std::string_view piece, size_t step, bool mapped,
                                      std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (step == steps.size()) {
    bpe(piece, out);
    return;
  }
  const PreTokenizerStep& s = steps[step];
  if (s.kind == PreTokenizerStep::Kind::kSplit) {
    apply_split(s, piece, step, mapped, out);
    return;
  }
  std::string prefixed;
  if (s.add_prefix_space && piece[0] != ' ') {
    prefixed.reserve(piece.size() + 1);
    prefixed.push_back(' ');
    prefixed.append(piece);
    piece = prefixed;
  }
  if (!s.regex) {
    pre_tokenize(piece, step + 1, true, out);
    return;
  }
  // GPT-2's pattern matches every character, so the gaps are always empty; keep them anyway.
  size_t last = 0;
  s.regex->for_each_match(piece, [&](size_t start, size_t end) {
    if (start > last) pre_tokenize(piece.substr(last, start - last), step + 1, true, out);
    pre_tokenize(piece.substr(start, end - start), step + 1, true, out);
    last = end;
  });
  if (last < piece.size()) pre_tokenize(piece.substr(last), step + 1, true, out);
}

void BpeTokenizer::Impl::apply_split(const PreTokenizerStep& s, std::string_view piece, size_t step,
                                     bool mapped, std::vector<int32_t>& out) const {
  // After ByteLevel the pattern runs on the mapped text; each mapped character is one byte, so
  // the pieces map back exactly.
  std::string unicode;
  std::string_view subject = piece;
  if (mapped) {
    unicode = alphabet().to_unicode(piece);
    subject = unicode;
  }
  auto emit = [&](size_t start, size_t end) {
    if (end <= start) return;
    const std::string_view sub = subject.substr(start, end - start);
    if (!mapped) {
      pre_tokenize(sub, step + 1, mapped, out);
    } else {
      pre_tokenize(*alphabet().to_bytes(sub), step + 1, mapped, out);
    }
  };
  if (s.behavior == SplitBehavior::kIsolated || (s.behavior == SplitBehavior::kRemoved && !s.invert)) {
    // The common case streams: gaps and matches in order (Removed drops the matches).
    const bool keep_matches = s.behavior == SplitBehavior::kIsolated;
    size_t last = 0;
    s.regex->for_each_match(subject, [&](size_t start, size_t end) {
      emit(last, start);
      if (keep_matches) emit(start, end);
      last = end;
    });
    emit(last, subject.size());
    return;
  }
  // HF's SplitDelimiterBehavior over the (span, is_match) cover of the piece.
  struct Span {
    size_t start, end;
    bool is_match;
  };
  std::vector<Span> spans;
  size_t last = 0;
  s.regex->for_each_match(subject, [&](size_t start, size_t end) {
    if (start > last) spans.push_back({last, start, false});
    spans.push_back({start, end, true});
    last = end;
  });
  if (last < subject.size()) spans.push_back({last, subject.size(), false});
  if (s.invert)
    for (Span& sp : spans) sp.is_match = !sp.is_match;
  std::vector<Span> result;
  bool previous_match = false;
  switch (s.behavior) {
    case SplitBehavior::kIsolated:
      // assign(), not result = spans: GCC 12 warns (-Wfree-nonheap-object) on that copy inlined.
      result.assign(spans.begin(), spans.end());
      break;
    case SplitBehavior::kRemoved:
      for (const Span& sp : spans)
        if (!sp.is_match) result.push_back(sp);
      break;
    case SplitBehavior::kContiguous:
      for (const Span& sp : spans) {
        if (sp.is_match == previous_match && !result.empty()) result.back().end = sp.end;
        else result.push_back(sp);
        previous_match = sp.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& sp : spans) {
        if (sp.is_match && !previous_match && !result.empty()) result.back().end = sp.end;
        else result.push_back(sp);
        previous_match = sp.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !result.empty()) result.back().start = it->start;
        else result.push_back(*it);
        previous_match = it->is_match;
      }
      std::reverse(result.begin(), result.end());
      break;
  }
  for (const Span& sp : result) emit(sp.start, sp.end);
}

void BpeTokenizer::Impl::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  if (ignore_merges) {  // Llama-3: a piece that is itself a token is emitted whole
    const auto it = vocab.find(piece);
    if (it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() == 1) {
    const int32_t id = byte_id[static_cast<unsigned char>(piece[0])];
    if (id >= 0) out.push_back(id);
    return;
  }
  if (piece.size() > kMaxCachedPiece) {
    merge_word(piece, out);
    return;
  }
  {
    std::unique_lock lock(cache_mutex, std::try_to_lock);  // busy: another thread; just compute
    if (lock.owns_lock()) {
      const auto it = cache.find(piece);
      if (it != cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
  }
  const size_t before = out.size();
  merge_word(piece, out);
  std::unique_lock lock(cache_mutex, std::try_to_lock);
  if (lock.owns_lock()) {
    if (cache.size() >= kMaxCacheEntries) cache.clear();
    cache.emplace(std::string(piece), std::vector<int32_t>(out.begin() + before, out.end()));
  }
}

// HF's Word::merge_all: a heap of candidate pairs ordered by (rank, position); a popped
// candidate is stale when either side has merged since, which the id check detects.
void BpeTokenizer::Impl::merge_word(std::string_view piece, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // -1 at the ends
    bool alive;
  };
  struct Candidate {
    int32_t rank, pos, id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;  // a min-heap through std::push_heap/pop_heap
  symbols.clear();
  heap.clear();
  for (char c : piece) {
    const int32_t id = byte_id[static_cast<unsigned char>(c)];
    if (id < 0) continue;  // a byte the vocabulary lacks, with no unknown token: HF drops it
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, -1, true});
    if (n > 0) symbols[n - 1].next = n;
  }
  auto consider = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    const auto it = merges.find(pair_key(symbols[pos].id, symbols[next].id));
    if (it == merges.end()) return;
    heap.push_back({it->second.rank, pos, it->second.id});
    std::push_heap(heap.begin(), heap.end(), std::greater<>{});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    const auto it = merges.find(pair_key(left.id, right.id));
    if (it == merges.end() || it->second.id != top.id) continue;
    left.id = top.id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  check_utf8(text);
  std::vector<int32_t> out;
  out.reserve(text.size() / 3);
  impl_->encode_text(text, out);
  return out;
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (const int32_t id : ids) {
    if (id < 0 || id >= impl_->size) {
      throw DataError(impl_->path + ": cannot decode token id " + std::to_string(id) + " (vocabulary size " +
                      std::to_string(impl_->size) + ")");
    }
    text += impl_->token_bytes[id];
  }
  return text;
}

int64_t BpeTokenizer::vocab_size() const { return impl_->size; }
std::optional<int32_t> BpeTokenizer::eos_id() const { return impl_->eos; }
std::optional<int32_t> BpeTokenizer::bos_id() const { return impl_->bos; }
bool BpeTokenizer::is_special(int32_t id) const {
  return impl_->special_ids.contains(id) || id == impl_->eos || id == impl_->bos;
}

}  // namespace feast
