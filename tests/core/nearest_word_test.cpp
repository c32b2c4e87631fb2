// "Did you mean": the edit distance (with adjacent swaps) and the nearest word within reach.
#include "core/nearest_word.h"

#include <gtest/gtest.h>

namespace feast {
namespace {

TEST(NearestWord, EditDistanceCountsSwapsAsOneEdit) {
  EXPECT_EQ(edit_distance("steps", "steps"), 0u);
  EXPECT_EQ(edit_distance("stpes", "steps"), 1u);  // adjacent swap
  EXPECT_EQ(edit_distance("step", "steps"), 1u);   // insertion
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
}

TEST(NearestWord, SuggestsOnlyWhatIsClose) {
  const std::vector<std::string> options = {"--temperature", "--top-k", "--top-p", "--max-new-tokens"};
  EXPECT_EQ(nearest_word("--temprature", options), "--temperature");
  EXPECT_EQ(nearest_word("--top-q", options), "--top-k");  // the first of equally near ones
  EXPECT_EQ(nearest_word("--frobnicate", options), "");
  EXPECT_EQ(nearest_word("x", {}), "");
}

}  // namespace
}  // namespace feast
