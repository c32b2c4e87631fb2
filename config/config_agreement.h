// Every rank of a job must run the same config. An MPMD launch (`mpirun -np 4 trainer a.toml :
// -np 4 trainer b.toml`), a --set given to some ranks only, or nodes whose copies of the config
// file differ would otherwise build layers of other shapes, train replicas at other learning
// rates, or wait in collectives the others never join.
#pragma once

#include <string>

#include "comm/communicator.h"
#include "config/config.h"

namespace feast {

// Every key and the value every rank must agree on, one "key = value" line each. Of paths that
// may differ by node (the data, init_from, tokenizer, logging.dir, checkpoint.dir, a
// checkpoint.resume file; config_agreement.cpp says why) only whether each is set counts.
std::string agreed_config_text(const Config& config);

// What differs between `config` (this rank, `my_rank`) and `reference_text` (agreed_config_text
// on rank `reference_rank`): the first key that differs, with both values and where this rank's
// came from, and the fix; empty when they agree.
std::string config_disagreement(const Config& config, int my_rank, const std::string& reference_text,
                                int reference_rank);

// Collective over `world`: returns when every rank runs rank 0's config; otherwise throws
// AgreedError on every rank, the lowest differing rank naming the key.
void agree_on_config(Communicator& world, const Config& config);

}  // namespace feast
