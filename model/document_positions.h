// Document masks (data.document_mask): a window of packed documents, each ended by the
// end-of-text token, computes what each document alone would. A token's position is its place
// in its document: attention reads only the keys of the same document (AttentionShape::positions)
// and rotary or learned positions restart at each document.
#pragma once

#include <cstdint>
#include <vector>

namespace feast {

// (B, T) positions of tokens (B, T) within their documents: each row's first token is at 0, and
// the token after an end-of-text token `eos` starts a new document (the end-of-text token
// belongs to the document it ends).
std::vector<int32_t> document_positions(const int32_t* tokens, int B, int T, int32_t eos);

}  // namespace feast
