// "Did you mean": the valid word nearest to a misspelt one, for config keys, sections, command
// options and verbs alike.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace feast {

// Optimal-string-alignment distance: Levenshtein plus adjacent swaps, the commonest typo.
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate nearest to `word`, or "" when none is within a third of its length (at least 2
// edits): far-fetched suggestions are worse than none.
std::string nearest_word(std::string_view word, const std::vector<std::string>& candidates);

// The largest distance nearest_word accepts for `word`.
size_t nearest_word_limit(std::string_view word);

}  // namespace feast
