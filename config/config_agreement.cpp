#include "config/config_agreement.h"

#include <map>
#include <sstream>

#include "comm/agreement.h"

namespace feast {
namespace {

// Paths a rank may name differently: inputs each node keeps its own copy of, and directories
// whose sameness is checked where it matters (checkpoint.dir: at the start every rank must see
// rank 0's probe there; logging.dir gives the default checkpoint.dir, and only rank 0 writes the
// rest of it). A relative checkpoint.resume is read against each node's copy of the config.
bool node_local(const std::string& key) {
  return key == "data.train" || key == "data.val" || key == "model.init_from" || key == "model.tokenizer" ||
         key == "logging.dir" || key == "checkpoint.dir" || key == "checkpoint.resume";
}

// What must still agree of a node-local path: whether it is set, since that decides which
// collectives a rank joins (evaluations, the import, the run directory's), and for
// checkpoint.resume its kind.
std::string agreed_value(const std::string& key, const std::string& value) {
  if (!node_local(key)) return value;
  if (key == "checkpoint.resume" && (value == "\"auto\"" || value == "\"never\"")) return value;
  return value == "\"\"" ? "(unset)" : "(a path)";
}

// "key = value" lines, as agreed_config_text writes them.
std::map<std::string, std::string> parse_lines(const std::string& text) {
  std::map<std::string, std::string> values;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find(" = ");
    if (eq != std::string::npos) values[line.substr(0, eq)] = line.substr(eq + 3);
  }
  return values;
}

}  // namespace

std::string agreed_config_text(const Config& config) {
  std::string text;
  for (const auto& [key, value] : config_values(config)) text += key + " = " + agreed_value(key, value) + "\n";
  return text;
}

std::string config_disagreement(const Config& config, int my_rank, const std::string& reference_text,
                                int reference_rank) {
  const std::map<std::string, std::string> theirs = parse_lines(reference_text);
  for (const auto& [key, value] : config_values(config)) {
    const std::string mine = agreed_value(key, value);
    const auto it = theirs.find(key);
    const std::string other = it == theirs.end() ? "(not a key there)" : it->second;
    if (mine == other) continue;
    return "rank " + std::to_string(my_rank) + " runs another config than rank " + std::to_string(reference_rank) +
           ": " + key + " = " + mine + " here (" + config.where(key) + "), " + other + " on rank " +
           std::to_string(reference_rank) + "; start every rank with the same config file and --set options " +
           "(check the mpirun command line, and that every node reads the same file)";
  }
  return "";
}

void agree_on_config(Communicator& world, const Config& config) {
  if (world.size() == 1) return;
  const std::string reference = broadcast_string(world, agreed_config_text(config), 0);
  agree_on_error(world, config_disagreement(config, world.rank(), reference, 0));
}

}  // namespace feast
