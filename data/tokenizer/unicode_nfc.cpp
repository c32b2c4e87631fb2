// NFC as UAX #15 defines it: full canonical decomposition (Hangul syllables algorithmically),
// canonical ordering of combining marks, then canonical composition of primary composites.
#include "data/tokenizer/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace feast {

namespace {

struct CombiningClass {
  uint32_t cp;
  uint8_t ccc;
};
struct Decomposition {
  uint32_t cp;
  uint16_t offset;  // into kDecompositionData
  uint8_t length;
};
struct Composition {
  uint64_t pair;  // first << 21 | second
  uint32_t composite;
};

#include "data/tokenizer/unicode_nfc_tables.inc"

// Hangul syllables: S = SBase + (L - LBase) * NCount + (V - VBase) * TCount + (T - TBase).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t combining_class(uint32_t cp) {
  if (cp < 0x300) return 0;
  const auto it = std::lower_bound(std::begin(kCombiningClasses), std::end(kCombiningClasses), cp,
                                   [](const CombiningClass& c, uint32_t v) { return c.cp < v; });
  return it != std::end(kCombiningClasses) && it->cp == cp ? it->ccc : 0;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (cp >= 0xC0) {
    const auto it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), cp,
                                     [](const Decomposition& d, uint32_t v) { return d.cp < v; });
    if (it != std::end(kDecompositions) && it->cp == cp) {
      out.insert(out.end(), kDecompositionData + it->offset, kDecompositionData + it->offset + it->length);
      return;
    }
  }
  out.push_back(cp);
}

// The primary composite of (a, b), or 0 when there is none.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const uint64_t key = (static_cast<uint64_t>(a) << 21) | b;
  const auto it = std::lower_bound(std::begin(kCompositions), std::end(kCompositions), key,
                                   [](const Composition& c, uint64_t v) { return c.pair < v; });
  return it != std::end(kCompositions) && it->pair == key ? it->composite : 0;
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace

std::string nfc(std::string_view text) {
  // U+0300 is the first code point NFC can change or combine; its UTF-8 lead byte is 0xCC, and
  // every code point below it is encoded with bytes below 0xCC.
  if (std::none_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) >= 0xCC; }))
    return std::string(text);
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    decompose(cp, cps);
    i += len;
  }
  // Canonical ordering: a stable sort of each run of marks by combining class.
  for (size_t i = 0; i < cps.size();) {
    if (combining_class(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < cps.size() && combining_class(cps[end]) != 0) ++end;
    std::stable_sort(cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(end),
                     [](uint32_t a, uint32_t b) { return combining_class(a) < combining_class(b); });
    i = end;
  }
  // Canonical composition, as UAX #15's sample code: a character joins the last starter unless
  // a character kept between them has class zero or a class at least its own (it is blocked).
  if (cps.empty()) return std::string();
  size_t starter = 0, kept = 1;
  int last_class = combining_class(cps[0]) == 0 ? 0 : 256;  // 256: no starter to join yet
  for (size_t i = 1; i < cps.size(); ++i) {
    const uint32_t cp = cps[i];
    const int cls = combining_class(cp);
    if (last_class < cls || last_class == 0) {
      if (const uint32_t composite = compose(cps[starter], cp)) {
        cps[starter] = composite;
        continue;
      }
    }
    if (cls == 0) starter = kept;
    last_class = cls;
    cps[kept++] = cp;
  }
  cps.resize(kept);
  std::string out;
  out.reserve(text.size());
  for (const uint32_t cp : cps) append_utf8(cp, out);
  return out;
}

}  // namespace feast
