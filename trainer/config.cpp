// The config parser: one table of key descriptors (name, field, allowed range, doc) drives
// parsing, --set overrides, validation, to_toml and config_keys, so a key is added in one place.
// Errors are ConfigErrors that name the key, where it was set and what would be accepted.
#include "trainer/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>
#include <type_traits>
#include <variant>

#include "core/error.h"

namespace feast {
namespace {

// ---- the key table ----------------------------------------------------------------------------

// Accessors are plain function pointers so that the table can be a static array and every row
// reads the same; the variant alternative tells the parser which TOML type the key takes. A key
// is reached from Config through a path of member pointers (two for [model], three for
// [model.rope_scaling]).
template <auto... Path>
auto& member(Config& c) {
  return (c.*....*Path);
}
using Field = std::variant<int& (*)(Config&), int64_t& (*)(Config&), uint64_t& (*)(Config&),
                           double& (*)(Config&), std::string& (*)(Config&),
                           std::vector<int>& (*)(Config&), bool& (*)(Config&),
                           std::optional<bool>& (*)(Config&)>;

struct Limit {
  double value;
  bool strict;  // > or < instead of >= or <=
};

// What a single key accepts; cross-key rules (n_embd % n_head, ...) live in validate_cross.
struct Rule {
  std::optional<Limit> min, max;
  std::vector<std::string> choices;  // strings only; empty = any
  bool non_empty = false;            // strings only
  bool llama_only = false;           // means something for model.arch = "llama" only
};

Rule any() { return {}; }
Rule at_least(double v) {
  Rule r;
  r.min = Limit{v, false};
  return r;
}
Rule above(double v) {
  Rule r;
  r.min = Limit{v, true};
  return r;
}
Rule closed(double lo, double hi) {
  Rule r = at_least(lo);
  r.max = Limit{hi, false};
  return r;
}
Rule half_open(double lo, double hi) {
  Rule r = at_least(lo);
  r.max = Limit{hi, true};
  return r;
}
Rule one_of(std::vector<std::string> choices) {
  Rule r;
  r.choices = std::move(choices);
  return r;
}
// A rule for a key that only the Llama family uses.
Rule llama(Rule r) {
  r.llama_only = true;
  return r;
}
Rule non_empty() {
  Rule r;
  r.non_empty = true;
  return r;
}

struct KeyDesc {
  const char* section;
  const char* name;
  Field field;
  Rule rule;
  const char* doc;
  // For a key whose default depends on other keys (an unset optional): the value in use, as
  // TOML; to_toml marks it as inferred from model.arch.
  std::string (*inferred)(const Config&) = nullptr;

  std::string full() const { return std::string(section) + "." + name; }
};

// In the order to_toml prints them; a dotted section is a sub-table of the one before it.
const std::vector<std::string> kSections = {"model",    "model.rope_scaling", "parallel", "training",
                                            "data",     "checkpoint",         "logging",
                                            "fault"};

// Stringifying the member keeps every key name identical to its struct field.
#define FEAST_KEY(section, name) \
  #section, #name, &member<&Config::section, &decltype(Config::section)::name>
#define FEAST_ROPE_KEY(name) \
  "model.rope_scaling", #name, &member<&Config::model, &ModelConfig::rope_scaling, &RopeScaling::name>

std::string tie_in_use(const Config& c) { return c.model.tied() ? "true" : "false"; }

const std::vector<KeyDesc>& keys() {
  static const std::vector<KeyDesc> table = {
      {FEAST_KEY(model, arch), one_of({"gpt2", "llama"}), "model family"},
      {FEAST_KEY(model, n_layer), at_least(1), "transformer blocks"},
      {FEAST_KEY(model, n_head), at_least(1), "attention heads; must divide n_embd"},
      {FEAST_KEY(model, n_embd), at_least(1), "channels of the residual stream"},
      {FEAST_KEY(model, vocab_size), closed(2, 2147483647), "token ids are < vocab_size"},
      {FEAST_KEY(model, max_seq_len), at_least(1), "longest sequence (GPT-2: position rows)"},
      {FEAST_KEY(model, init_std), above(0), "std of the normal init of weight matrices"},
      {FEAST_KEY(model, n_kv_head), llama(at_least(0)), "key/value heads (llama); 0 = n_head"},
      {FEAST_KEY(model, intermediate_size), at_least(0), "MLP width; 0 = the family default"},
      {FEAST_KEY(model, norm_eps), above(0), "LayerNorm / RMSNorm epsilon"},
      {FEAST_KEY(model, rope_theta), llama(above(0)), "rotary base frequency (llama)"},
      {FEAST_KEY(model, qkv_bias), llama(any()), "biases on q, k, v (llama family)"},
      {FEAST_KEY(model, tie_embeddings), any(), "LM head shares the token embedding", &tie_in_use},
      {FEAST_ROPE_KEY(rope_type), llama(one_of({"default", "linear", "llama3"})), "rotary frequency scaling"},
      {FEAST_ROPE_KEY(factor), llama(above(0)), "context extension factor"},
      {FEAST_ROPE_KEY(low_freq_factor), llama(above(0)), "llama3: low-frequency bound"},
      {FEAST_ROPE_KEY(high_freq_factor), llama(above(0)), "llama3: high-frequency bound"},
      {FEAST_ROPE_KEY(original_max_position_embeddings), llama(at_least(1)), "llama3: original context"},

      {FEAST_KEY(parallel, tp), at_least(1), "tensor-parallel degree"},
      {FEAST_KEY(parallel, pp), at_least(1), "pipeline-parallel degree"},
      {FEAST_KEY(parallel, dp), at_least(0), "data-parallel degree; 0 = world / (tp * pp)"},
      {FEAST_KEY(parallel, order), one_of({"tp-dp-pp", "tp-pp-dp", "dp-tp-pp", "dp-pp-tp", "pp-tp-dp", "pp-dp-tp"}),
       "rank-numbering axes, innermost first"},
      {FEAST_KEY(parallel, zero_stage), closed(0, 2), "0 all-reduce; 1 shard optimizer; 2 also gradients"},
      {FEAST_KEY(parallel, micro_batch_size), at_least(1), "sequences per micro-batch per rank"},
      {FEAST_KEY(parallel, num_micro_batches), at_least(1), "micro-batches per step per dp rank"},
      {FEAST_KEY(parallel, schedule), one_of({"1f1b", "gpipe"}), "pipeline schedule"},
      {FEAST_KEY(parallel, bucket_mb), above(0), "gradient-reduction bucket size, MiB"},
      {FEAST_KEY(parallel, stage_layers), at_least(1), "layers per stage; [] = even split"},
      {FEAST_KEY(parallel, timeout_s), above(0), "watchdog: longest wait for a collective, s"},

      {FEAST_KEY(training, steps), at_least(1), "optimizer steps to run"},
      {FEAST_KEY(training, batch_size), at_least(0), "global batch in sequences; 0 = derived"},
      {FEAST_KEY(training, seed), at_least(0), "seeds the initialisation and the data order"},
      {FEAST_KEY(training, device), one_of({"cpu", "cuda"}), "compute backend"},
      {FEAST_KEY(training, seq_len), at_least(1), "tokens per sequence; <= model.max_seq_len"},
      {FEAST_KEY(training, lr), above(0), "peak learning rate"},
      {FEAST_KEY(training, min_lr), at_least(0), "lr at the end of the decay; <= lr"},
      {FEAST_KEY(training, warmup_steps), at_least(0), "linear warm-up steps"},
      {FEAST_KEY(training, lr_schedule), one_of({"cosine", "linear", "constant"}),
       "decay after warm-up"},
      {FEAST_KEY(training, weight_decay), at_least(0), "AdamW decoupled decay (matrices only)"},
      {FEAST_KEY(training, beta1), half_open(0, 1), "AdamW first-moment decay"},
      {FEAST_KEY(training, beta2), half_open(0, 1), "AdamW second-moment decay"},
      {FEAST_KEY(training, eps), above(0), "AdamW denominator epsilon"},
      {FEAST_KEY(training, grad_clip), at_least(0), "max global grad norm; 0 = no clipping"},
      {FEAST_KEY(training, eval_interval), at_least(0), "evaluate every N steps; 0 = never"},
      {FEAST_KEY(training, eval_batches), at_least(1), "validation batches (global batch size) per evaluation"},
      {FEAST_KEY(training, threads), at_least(0), "OpenMP threads per rank; 0 = OMP_NUM_THREADS or the CPUs"},
      {FEAST_KEY(training, exit_at_step), at_least(0), "save and exit 0 after this step; 0 = never"},
      {FEAST_KEY(training, exit_after_minutes), at_least(0), "save and exit 0 after this wall time; 0 = never"},
      {FEAST_KEY(training, skip_nonfinite), at_least(0), "non-finite steps skipped before failing"},

      {FEAST_KEY(data, train), non_empty(), "training shards: file, directory or glob"},
      {FEAST_KEY(data, val), any(), "validation shards; empty = no validation"},

      {FEAST_KEY(checkpoint, dir), non_empty(), "checkpoint directory; default <logging.dir>/checkpoints"},
      {FEAST_KEY(checkpoint, interval), at_least(0), "save every N steps and at the end; 0 = only on stop"},
      {FEAST_KEY(checkpoint, keep), at_least(1), "complete checkpoints to keep"},
      {FEAST_KEY(checkpoint, resume), non_empty(), "\"auto\", \"never\" or a checkpoint file or directory"},
      {FEAST_KEY(checkpoint, async), any(), "write checkpoints beside training (copy, then a writer thread)"},

      {FEAST_KEY(logging, dir), non_empty(), "run directory (metrics.jsonl, logs)"},
      {FEAST_KEY(logging, interval), at_least(1), "progress line every N steps"},

      {FEAST_KEY(fault, kill_rank), at_least(-1), "test: this rank SIGKILLs itself at fault.at_step; -1 = none"},
      {FEAST_KEY(fault, stall_rank), at_least(-1), "test: this rank hangs at fault.at_step; -1 = none"},
      {FEAST_KEY(fault, at_step), at_least(0), "test: the step a fault strikes (first attempt only)"},
  };
  return table;
}

#undef FEAST_KEY
#undef FEAST_ROPE_KEY

const KeyDesc* find_key(std::string_view section, std::string_view name) {
  for (const KeyDesc& k : keys()) {
    if (section == k.section && name == k.name) return &k;
  }
  return nullptr;
}

// ---- formatting -------------------------------------------------------------------------------

// Shortest text that reads back to the same double, always with a '.' or exponent so that TOML
// reads it as a float; "1e-4" rather than to_chars' "1e-04".
std::string format_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, end);
  const size_t e = s.find('e');
  if (e == std::string::npos) {
    if (s.find('.') == std::string::npos) s += ".0";
    return s;
  }
  const size_t digits = s[e + 1] == '-' || s[e + 1] == '+' ? e + 2 : e + 1;
  while (digits + 1 < s.size() && s[digits] == '0') s.erase(digits, 1);
  return s;
}

// A number in a range description: "1", "0.5", "2147483647".
std::string format_bound(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}

// A TOML basic string: double quotes, escapes for quotes, backslashes and control characters;
// UTF-8 passes through.
std::string format_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (u < 0x20 || u == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", u);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

std::string describe_rule(const Rule& r) {
  if (!r.choices.empty()) {
    std::string s = "one of ";
    for (size_t i = 0; i < r.choices.size(); ++i) {
      s += (i ? ", " : "") + format_string(r.choices[i]);
    }
    return s;
  }
  if (r.non_empty) return "a non-empty string";
  if (r.min && r.max) {
    return std::string(r.min->strict ? "in (" : "in [") + format_bound(r.min->value) + ", " +
           format_bound(r.max->value) + (r.max->strict ? ")" : "]");
  }
  if (r.min) return (r.min->strict ? "> " : ">= ") + format_bound(r.min->value);
  return "any value";
}

std::string type_name(toml::node_type t) {
  switch (t) {
    case toml::node_type::table: return "table";
    case toml::node_type::array: return "array";
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::date: return "date";
    case toml::node_type::time: return "time";
    case toml::node_type::date_time: return "date-time";
    case toml::node_type::none: break;
  }
  return "nothing";
}

// "string \"300\"" for scalars; just the type for tables and arrays, which can be long.
std::string describe_node(const toml::node& n) {
  std::string s = type_name(n.type());
  if (const auto* v = n.as_string()) return s + " " + format_string(v->get());
  if (const auto* v = n.as_integer()) return s + " " + std::to_string(v->get());
  if (const auto* v = n.as_floating_point()) return s + " " + format_double(v->get());
  if (const auto* v = n.as_boolean()) return s + (v->get() ? " true" : " false");
  if (n.is_value()) {
    std::ostringstream os;
    n.visit([&](const auto& v) { os << v; });
    s += " " + os.str();
  }
  return s;
}

// The value of a key in the config, as TOML text.
std::string value_text(const KeyDesc& k, Config& c) {
  return std::visit(
      [&](auto get) -> std::string {
        const auto& v = get(c);
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return format_string(v);
        } else if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::optional<bool>>) {
          if (!v) return k.inferred ? k.inferred(c) : "false";
          return *v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, double>) {
          return format_double(v);
        } else if constexpr (std::is_same_v<T, std::vector<int>>) {
          std::string out = "[";
          for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
          return out + "]";
        } else {
          return std::to_string(v);
        }
      },
      k.field);
}

// ---- suggestions ------------------------------------------------------------------------------

// Optimal-string-alignment distance: Levenshtein plus adjacent swaps, the commonest typo.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// The valid key nearest to `section.name`, or "" if nothing is close. A right key in the wrong
// section ("training.n_layer") counts as one edit, so the fix is to move it.
std::string suggest_key(std::string_view section, std::string_view name) {
  std::string full = std::string(section) + (section.empty() ? "" : ".") + std::string(name);
  std::string best;
  size_t best_d = std::max<size_t>(2, name.size() / 3) + 1;
  for (const KeyDesc& k : keys()) {
    size_t d = std::min(edit_distance(full, k.full()), edit_distance(name, k.name) + 1);
    if (d < best_d) {
      best_d = d;
      best = k.full();
    }
  }
  return best;
}

std::string suggest_section(std::string_view name) {
  std::string best;
  size_t best_d = std::max<size_t>(2, name.size() / 3) + 1;
  for (const std::string& s : kSections) {
    size_t d = edit_distance(name, s);
    if (d < best_d) {
      best_d = d;
      best = s;
    }
  }
  return best;
}

std::string did_you_mean(const std::string& hint) {
  return hint.empty() ? "" : "; did you mean '" + hint + "'?";
}

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

// ---- assignment -------------------------------------------------------------------------------

[[noreturn]] void fail(const std::string& where, const std::string& message) {
  throw ConfigError(where + ": " + message);
}

[[noreturn]] void wrong_type(const KeyDesc& k, const toml::node& node, const std::string& where,
                             const char* expected) {
  fail(where, "wrong type for " + k.full() + ": expected " + expected + ", got " +
                  describe_node(node));
}

bool in_rule(const Rule& r, double v) {
  if (r.min && (r.min->strict ? !(v > r.min->value) : !(v >= r.min->value))) return false;
  if (r.max && (r.max->strict ? !(v < r.max->value) : !(v <= r.max->value))) return false;
  return true;
}

void check_number(const KeyDesc& k, double v, const std::string& text, const std::string& where) {
  if (!std::isfinite(v) || !in_rule(k.rule, v)) {
    fail(where, k.full() + " = " + text + " is not allowed; expected " +
                    (std::isfinite(v) ? "" : "a finite number ") + describe_rule(k.rule));
  }
}

// Stores `node` into the field of `k`; `where` ("file.toml:7" or "--set k=v") goes into errors.
void assign(Config& c, const KeyDesc& k, const toml::node& node, const std::string& where) {
  std::visit(
      [&](auto get) {
        auto& field = get(c);
        using T = std::decay_t<decltype(field)>;
        if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::optional<bool>>) {
          const auto* b = node.as_boolean();
          if (!b) wrong_type(k, node, where, "boolean");
          field = b->get();
        } else if constexpr (std::is_same_v<T, std::string>) {
          const auto* s = node.as_string();
          if (!s) wrong_type(k, node, where, "string");
          const std::string& v = s->get();
          const Rule& r = k.rule;
          bool ok = !(r.non_empty && v.empty()) &&
                    (r.choices.empty() ||
                     std::find(r.choices.begin(), r.choices.end(), v) != r.choices.end());
          if (!ok) {
            fail(where, k.full() + " = " + format_string(v) + " is not allowed; expected " +
                            describe_rule(r));
          }
          field = v;
        } else if constexpr (std::is_same_v<T, double>) {
          // TOML integers are accepted for floats: "lr = 1" should not need "1.0".
          const auto* i = node.as_integer();
          const auto* f = node.as_floating_point();
          if (!i && !f) wrong_type(k, node, where, "float");
          const double v = i ? static_cast<double>(i->get()) : f->get();
          check_number(k, v, i ? std::to_string(i->get()) : format_double(v), where);
          field = v;
        } else if constexpr (std::is_same_v<T, std::vector<int>>) {
          const auto* a = node.as_array();
          if (!a) wrong_type(k, node, where, "array of integers");
          std::vector<int> values;
          for (const toml::node& e : *a) {
            const auto* i = e.as_integer();
            if (!i || i->get() > std::numeric_limits<int>::max()) wrong_type(k, e, where, "array of integers");
            check_number(k, static_cast<double>(i->get()), std::to_string(i->get()), where);
            values.push_back(static_cast<int>(i->get()));
          }
          field = std::move(values);
        } else {
          const auto* i = node.as_integer();
          if (!i) wrong_type(k, node, where, "integer");
          const int64_t v = i->get();
          // int fields are 32-bit: 1e12 must fail here rather than wrap on the cast below.
          if constexpr (std::is_same_v<T, int>) {
            if (v > std::numeric_limits<int>::max() || v < std::numeric_limits<int>::min()) {
              fail(where, k.full() + " = " + std::to_string(v) +
                              " does not fit in a 32-bit integer (max 2147483647)");
            }
          }
          check_number(k, static_cast<double>(v), std::to_string(v), where);
          field = static_cast<T>(v);
        }
      },
      k.field);
}

// ---- parsing ----------------------------------------------------------------------------------

std::string at_line(const std::string& source, const toml::source_region& r) {
  return source + ":" + std::to_string(r.begin.line);
}

bool is_section(const std::string& name) {
  return std::find(kSections.begin(), kSections.end(), name) != kSections.end();
}

// The keys of [section] (and of its sub-tables that are sections themselves).
void apply_section(Config& c, const std::string& section, const toml::table& table, const std::string& source) {
  for (auto&& [key, node] : table) {
    const std::string name(key.str());
    const std::string key_where = at_line(source, key.source());
    const std::string sub = section + "." + name;
    if (is_section(sub)) {
      if (!node.is_table()) fail(key_where, "'" + sub + "' must be a section ([" + sub + "]), got " + describe_node(node));
      apply_section(c, sub, *node.as_table(), source);
      continue;
    }
    const KeyDesc* k = find_key(section, name);
    if (!k) {
      std::string hint = suggest_key(section, name);
      std::vector<std::string> valid;
      for (const KeyDesc& d : keys()) {
        if (section == d.section) valid.push_back(d.name);
      }
      fail(key_where, "unknown key '" + section + "." + name + "'; " +
                          (hint.empty() ? "valid keys in [" + section + "]: " + join(valid)
                                        : "did you mean '" + hint + "'?"));
    }
    assign(c, *k, node, key_where);
    c.origin[k->full()] = key_where;
  }
}

void apply_file(Config& c, const toml::table& root, const std::string& source) {
  for (auto&& [section_key, section_node] : root) {
    const std::string section(section_key.str());
    const std::string where = at_line(source, section_key.source());
    const bool known = is_section(section) && section.find('.') == std::string::npos;
    if (!known && !section_node.is_table()) {
      fail(where, "unknown key '" + section + "' outside any section" +
                      did_you_mean(suggest_key("", section)));
    }
    if (!known) {
      std::string hint = suggest_section(section);
      std::vector<std::string> top;
      for (const std::string& name : kSections)
        if (name.find('.') == std::string::npos) top.push_back(name);
      fail(where, "unknown section '[" + section + "]'; " +
                      (hint.empty() ? "valid sections: " + join(top) : "did you mean '[" + hint + "]'?"));
    }
    if (!section_node.is_table()) {
      fail(where, "'" + section + "' must be a section ([" + section + "]), got " +
                      describe_node(section_node));
    }
    apply_section(c, section, *section_node.as_table(), source);
  }
}

std::string trim(std::string_view s) {
  const char* ws = " \t\r\n";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return "";
  return std::string(s.substr(b, s.find_last_not_of(ws) - b + 1));
}

void apply_override(Config& c, const std::string& text) {
  const std::string where = "--set " + text;
  const size_t eq = text.find('=');
  const std::string lhs = trim(std::string_view(text).substr(0, eq));
  const size_t dot = lhs.rfind('.');  // the key's section may itself be dotted (model.rope_scaling)
  if (eq == std::string::npos || dot == std::string::npos) {
    fail("--set '" + text + "'", "expected section.key=value, e.g. --set training.steps=100");
  }
  const std::string section = lhs.substr(0, dot), name = lhs.substr(dot + 1);
  const KeyDesc* k = find_key(section, name);
  if (!k) {
    fail(where, "unknown key '" + lhs + "'" + did_you_mean(suggest_key(section, name)));
  }
  const std::string value = trim(std::string_view(text).substr(eq + 1));
  if (value.empty()) fail(where, "missing value (write \"\" for an empty string)");

  // The value is TOML ("3e-4", "\"a b\"", "1_000"); what TOML rejects is a bare word taken as a
  // string, so paths and names need no shell-escaped quotes. Text that starts like a TOML string,
  // array or table was meant as TOML, and its syntax error is the more useful message.
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value, std::string_view("--set"));
  } catch (const toml::parse_error& e) {
    if (std::string_view("\"'[{").find(value[0]) != std::string_view::npos) {
      fail(where, "bad TOML value: " + std::string(e.description()));
    }
    parsed = toml::table{{"v", value}};
  }
  if (parsed.size() != 1) fail(where, "the value must be a single TOML value");
  assign(c, *k, *parsed.get("v"), where);
  c.origin[k->full()] = "--set";
}

// Rules that tie two keys; the message names both and where each was set.
void validate_cross(const Config& c) {
  auto fail2 = [&](const std::string& a, const std::string& va, const std::string& relation,
                   const std::string& b, const std::string& vb) {
    fail(c.where(a), a + " = " + va + " must be " + relation + " " + b + " = " + vb + " (" +
                         c.where(b) + ")");
  };
  const ModelConfig& m = c.model;
  if ((c.fault.kill_rank >= 0 || c.fault.stall_rank >= 0) && c.fault.at_step < 1) {
    const std::string key = c.fault.kill_rank >= 0 ? "fault.kill_rank" : "fault.stall_rank";
    fail(c.where(key), key + " is set but fault.at_step = " + std::to_string(c.fault.at_step) +
                           "; give the step (>= 1) at which the fault strikes");
  }
  if (m.n_embd % m.n_head != 0) {
    fail2("model.n_embd", std::to_string(m.n_embd), "divisible by", "model.n_head",
          std::to_string(m.n_head));
  }
  if (c.training.seq_len > m.max_seq_len) {
    fail2("training.seq_len", std::to_string(c.training.seq_len), "<=", "model.max_seq_len",
          std::to_string(m.max_seq_len));
  }
  if (c.training.min_lr > c.training.lr) {
    fail2("training.min_lr", format_double(c.training.min_lr), "<=", "training.lr",
          format_double(c.training.lr));
  }
  if (!m.is_llama()) {
    // GPT-2 has no rotary embeddings, grouped-query attention or optional q/k/v biases: a key
    // given another value than its default is a config meant for another family. (A resolved
    // config lists every key with its value, so the defaults themselves must pass.)
    static const Config defaults;
    Config current = c, reference = defaults;
    for (const KeyDesc& k : keys()) {
      if (!k.rule.llama_only || value_text(k, current) == value_text(k, reference)) continue;
      fail(c.where(k.full()), k.full() + " = " + value_text(k, current) + " applies to model.arch = \"llama\", but " +
                                  "model.arch = \"" + m.arch + "\" (" + c.where("model.arch") +
                                  "); remove it or set model.arch = \"llama\"");
    }
    return;
  }
  if (m.kv_heads() > m.n_head || m.n_head % m.kv_heads() != 0) {
    fail2("model.n_kv_head", std::to_string(m.n_kv_head), "a divisor of", "model.n_head", std::to_string(m.n_head));
  }
  if (m.head_dim() % 2 != 0) {
    fail(c.where("model.n_embd"), "rotary embeddings need an even head size, but model.n_embd / model.n_head = " +
                                      std::to_string(m.n_embd) + " / " + std::to_string(m.n_head) + " = " +
                                      std::to_string(m.head_dim()));
  }
  const RopeScaling& r = m.rope_scaling;
  if (r.rope_type == "llama3" && !(r.low_freq_factor < r.high_freq_factor)) {
    fail2("model.rope_scaling.low_freq_factor", format_double(r.low_freq_factor), "<",
          "model.rope_scaling.high_freq_factor", format_double(r.high_freq_factor));
  }
}

}  // namespace

int Config::micro_batches_per_rank(int dp) const {
  if (training.batch_size == 0) return parallel.num_micro_batches;
  const int64_t per_step = int64_t{dp} * parallel.micro_batch_size;
  if (training.batch_size % per_step != 0)
    throw ConfigError(where("training.batch_size") + ": training.batch_size = " + std::to_string(training.batch_size) +
                      " is not divisible by dp * parallel.micro_batch_size = " + std::to_string(dp) + " * " +
                      std::to_string(parallel.micro_batch_size) + "; choose a batch size that is a multiple of " +
                      std::to_string(per_step) + " or another micro_batch_size (" +
                      where("parallel.micro_batch_size") + ")");
  return static_cast<int>(training.batch_size / per_step);
}

std::string Config::where(const std::string& key) const {
  auto it = origin.find(key);
  return it == origin.end() ? "default" : it->second;
}

Config parse_config(const std::string& toml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides) {
  Config c;
  for (const KeyDesc& k : keys()) c.origin[k.full()] = "default";
  toml::table root;
  try {
    root = toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    throw ConfigError(source_name + ":" + std::to_string(b.line) + ":" +
                      std::to_string(b.column) + ": TOML syntax error: " +
                      std::string(e.description()));
  }
  apply_file(c, root, source_name);
  for (const std::string& o : overrides) apply_override(c, o);
  validate_cross(c);
  if (c.checkpoint.dir.empty()) {
    c.checkpoint.dir = c.logging.dir + "/checkpoints";
    c.origin["checkpoint.dir"] = "inferred from logging.dir";
  }
  return c;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  if (path.empty()) return parse_config("", "(no config file)", overrides);
  if (std::filesystem::is_directory(path)) {
    throw ConfigError("cannot read config file '" + path + "': it is a directory");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("cannot read config file '" + path + "': " + std::strerror(errno));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw ConfigError("cannot read config file '" + path + "': read failed");
  return parse_config(text, path, overrides);
}

std::string to_toml(const Config& config) {
  // The accessors hand out mutable references; reading through a copy keeps `config` const.
  Config c = config;
  std::string out =
      "# feast config, fully resolved (docs/config.md describes every key).\n"
      "# Each comment ends with where the value came from when it is not the default.\n";
  for (const std::string& section : kSections) {
    out += "\n[" + section + "]\n";
    for (const KeyDesc& k : keys()) {
      if (section != k.section) continue;
      std::string line = std::string(k.name) + " = " + value_text(k, c);
      line.resize(std::max<size_t>(line.size() + 1, 32), ' ');
      line += std::string("# ") + k.doc;
      std::string from = c.where(k.full());
      if (from != "default") line += " [" + from + "]";
      if (from == "default" && k.inferred) line += " [inferred from model.arch]";
      out += line + "\n";
    }
  }
  return out;
}

Config with_inferred_values(const Config& config, const InferredValues& v) {
  Config c = config;
  ParallelConfig& p = c.parallel;
  TrainingConfig& t = c.training;
  const auto n = [](int64_t x) { return std::to_string(x); };
  if (p.dp == 0) {
    if (v.dp > 0) {
      p.dp = v.dp;
      c.origin["parallel.dp"] = "inferred: world size " + n(v.world_size) + " / (tp " + n(p.tp) + " * pp " + n(p.pp) + ")";
    } else {
      c.origin["parallel.dp"] = "inferred at launch: world size / (tp * pp)";
    }
  }
  if (t.batch_size > 0) {
    if (v.micro_batches > 0) {
      p.num_micro_batches = v.micro_batches;
      c.origin["parallel.num_micro_batches"] = "inferred: training.batch_size " + n(t.batch_size) + " / (dp " +
                                               n(p.dp) + " * micro_batch_size " + n(p.micro_batch_size) + ")";
    } else {
      c.origin["parallel.num_micro_batches"] = "inferred at launch from training.batch_size";
    }
  } else if (p.dp > 0) {
    t.batch_size = int64_t{p.dp} * p.num_micro_batches * p.micro_batch_size;
    c.origin["training.batch_size"] = "inferred: dp " + n(p.dp) + " * num_micro_batches " + n(p.num_micro_batches) +
                                      " * micro_batch_size " + n(p.micro_batch_size);
  } else {
    c.origin["training.batch_size"] = "inferred at launch: dp * num_micro_batches * micro_batch_size";
  }
  if (t.threads == 0) {
    if (v.threads > 0) {
      t.threads = v.threads;
      c.origin["training.threads"] = "inferred: " + v.threads_from;
    } else {
      c.origin["training.threads"] = "inferred at launch: OMP_NUM_THREADS or the rank's share of its CPUs";
    }
  }
  return c;
}

std::string config_value(const Config& config, const std::string& key) {
  Config c = config;
  for (const KeyDesc& k : keys())
    if (k.full() == key) return value_text(k, c);
  throw ConfigError("unknown key '" + key + "'");
}

std::vector<std::string> config_keys() {
  std::vector<std::string> out;
  for (const KeyDesc& k : keys()) out.push_back(k.full());
  return out;
}

}  // namespace feast
