// Deciding together that something failed. An error found on some ranks only (a missing file, a
// corrupt checkpoint slice) must end or redirect every rank alike, or the others wait forever
// in the next collective (design invariant 6).
#pragma once

#include <optional>
#include <string>

#include "comm/communicator.h"

namespace feast {

// Collective: the lowest rank of `group` for which `flag` is true, or -1 when it is true on none.
int lowest_rank_where(Communicator& group, bool flag);

// Collective: `text` as rank `root` has it, on every rank.
std::string broadcast_string(Communicator& group, const std::string& text, int root);

// Collective over `group`: the message of the lowest rank whose `mine` is non-empty, on every
// rank; nothing when no rank failed.
std::optional<std::string> first_error(Communicator& group, const std::string& mine);

// Collective: throws AgreedError on every rank when any rank's `mine` is non-empty; the lowest
// failing rank reports its own message, the others say which rank failed.
void agree_on_error(Communicator& group, const std::string& mine);

}  // namespace feast
