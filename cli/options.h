// The one command-line parser of every verb. A verb declares its options and positional
// arguments once (CommandLine); parse_command_line() turns argv into typed values or a
// ConfigError that names the verb, the argument and, for a misspelt option, the nearest valid
// one; usage() writes `trainer VERB --help` from the same declaration, so help and parsing
// cannot drift apart. A verb that takes a config gets CONFIG.toml and `--set section.key=value`
// handled here, alike for every such verb.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace feast {

enum class ValueKind {
  kFlag,       // no value
  kText,       // any text, or one of `choices`
  kInteger,    // a whole number in [min, max]
  kNumber,     // a number in [min, max]
  kSize,       // bytes: 4096, 64K, 500MB, 2GiB (K, M, G binary; KB, MB, GB decimal)
  kBandwidth,  // bytes per second: 450GB/s, 400Gb/s (bits), 25GiB/s
  kDuration,   // seconds: 5us, 1.5ms, 2s
};

struct Option {
  std::string name = {};  // "--top-k"
  ValueKind kind = ValueKind::kFlag;
  std::string metavar = {};  // "K", shown in the usage
  std::string help = {};     // what it does and its default; lines after the first are indented
  std::vector<std::string> choices = {};  // kText: the values allowed (empty = any)
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();  // kInteger: at most INT32_MAX unless set
};

struct CommandLine {
  std::string verb;      // "generate", "bench comm": what messages start with
  std::string synopsis;  // the usage line(s), without the leading "usage: "
  std::string description;
  std::vector<Option> options;
  // Positional arguments: their name in messages, and how many (max -1: any number).
  std::string positional;
  int min_positional = 0, max_positional = 0;
  // CONFIG.toml (the one positional) and --set section.key=value, repeatable.
  bool takes_config = false;
  std::string epilogue;  // after the options
  // Arguments that are not options here but mean something elsewhere, with what to say instead
  // of "unknown option" ("--parallel" -> "the layouts benchmark is `trainer bench parallel`").
  std::map<std::string, std::string> hints;
};

// The whole `--help` text: "usage: " + synopsis, the description, every option, the epilogue.
std::string usage(const CommandLine& cl);

class Args {
 public:
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  bool flag(const std::string& name) const { return has(name); }
  // The value given for `name` (the last one, when given twice), or `fallback`.
  std::string text(const std::string& name, const std::string& fallback = "") const;
  int64_t integer(const std::string& name, int64_t fallback) const;
  double number(const std::string& name, double fallback) const;  // numbers, sizes, bandwidths, durations

  const std::vector<std::string>& positional() const { return positional_; }
  const std::string& config_path() const { return config_path_; }
  const std::vector<std::string>& overrides() const { return overrides_; }

 private:
  friend Args parse_command_line(const CommandLine& cl, const std::vector<std::string>& argv);
  struct Value {
    std::string text;
    double number = 0;
  };
  std::map<std::string, Value> values_;
  std::vector<std::string> positional_;
  std::string config_path_;
  std::vector<std::string> overrides_;
};

// Throws ConfigError ("VERB: ...", then the usage) for an unknown option (with the nearest
// valid one), a missing or malformed value, or the wrong number of positional arguments.
Args parse_command_line(const CommandLine& cl, const std::vector<std::string>& argv);

// Whether argv asks for help (--help or -h anywhere).
bool wants_help(const std::vector<std::string>& argv);

// The values of the typed kinds, for code that parses them outside a command line.
uint64_t parse_size(const std::string& what, const std::string& value);
double parse_bandwidth(const std::string& what, const std::string& value);
double parse_duration(const std::string& what, const std::string& value);

}  // namespace feast
