// Byte tokenizer: ids are byte values (high bytes included) and decode inverts encode.
#include "data/tokenizer/byte_tokenizer.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace feast {
namespace {

TEST(ByteTokenizer, RoundTripsEveryByte) {
  std::string text;
  for (int b = 0; b < 256; ++b) text.push_back(static_cast<char>(b));
  text += "héllo, wörld\n";
  const ByteTokenizer tok;
  const std::vector<int32_t> ids = tok.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[static_cast<size_t>(b)], b);
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_EQ(ByteTokenizer::kVocabSize, 256);
}

TEST(ByteTokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  const ByteTokenizer tok;
  EXPECT_THROW(tok.decode(std::vector<int32_t>{65, 256}), DataError);
  EXPECT_THROW(tok.decode(std::vector<int32_t>{-1}), DataError);
}

}  // namespace
}  // namespace feast
