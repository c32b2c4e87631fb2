// Reading a config: the TOML file, the --set overrides (TOML values, bare words taken as
// strings), relative paths resolved against the file's folder, and model.init_from's
// config.json; then the rules of validate.h. Errors are ConfigErrors that name the key, where it
// was set (file:line or --set) and what would be accepted, with the nearest valid key for a typo.
#include "config/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string_view>
#include <type_traits>

#include "config/key_table.h"
#include "config/validate.h"
#include "core/error.h"
#include "core/nearest_word.h"
#include "interop/hf/hf_config.h"

namespace feast {

using namespace config_table;

namespace {

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
// The valid key nearest to `section.name`, or "" if nothing is close. A right key in the wrong
// section ("training.n_layer") counts as one edit, so the fix is to move it.
std::string suggest_key(std::string_view section, std::string_view name) {
  std::string full = std::string(section) + (section.empty() ? "" : ".") + std::string(name);
  std::string best;
  size_t best_d = nearest_word_limit(name) + 1;
  for (const KeyDesc& k : keys()) {
    size_t d = std::min(edit_distance(full, k.full()), edit_distance(name, k.name) + 1);
    if (d < best_d) {
      best_d = d;
      best = k.full();
    }
  }
  return best;
}

std::string suggest_section(std::string_view name) { return nearest_word(name, kSections); }

std::string did_you_mean(const std::string& hint) {
  return hint.empty() ? "" : "; did you mean '" + hint + "'?";
}

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}
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
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          const auto* a = node.as_array();
          if (!a) wrong_type(k, node, where, "array of strings");
          std::vector<std::string> values;
          for (const toml::node& e : *a) {
            const auto* s = e.as_string();
            if (!s) wrong_type(k, e, where, "array of strings");
            values.push_back(s->get());
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
std::string at_line(const std::string& source, const toml::source_region& r) {
  return source + ":" + std::to_string(r.begin.line);
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
  // So is a number given to a key that takes no string ("1e400" for a float is out of range,
  // not a string).
  const bool number_meant = !std::holds_alternative<std::string& (*)(Config&)>(k->field) &&
                            std::string_view("0123456789+-.").find(value[0]) != std::string_view::npos;
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value, std::string_view("--set"));
  } catch (const toml::parse_error& e) {
    if (number_meant || std::string_view("\"'[{").find(value[0]) != std::string_view::npos) {
      fail(where, "bad TOML value for " + k->full() + ": " + std::string(e.description()));
    }
    parsed = toml::table{{"v", value}};
  }
  if (parsed.size() != 1) fail(where, "the value must be a single TOML value");
  assign(c, *k, *parsed.get("v"), where);
  c.origin[k->full()] = "--set";
}

// training.seq_len left at its default follows a model whose context is shorter (an imported
// model with 32 positions, a Mistral window of 32): the default is a convenience, not a demand.
void infer_seq_len(Config& c) {
  if (c.where("training.seq_len") != "default" || c.training.seq_len <= c.model.max_seq_len) return;
  c.training.seq_len = c.model.max_seq_len;
  c.origin["training.seq_len"] = "inferred: model.max_seq_len is below the default";
}

// The config as written and overridden, validated, before paths are resolved and defaults that
// follow other keys are inferred.
Config parse_unresolved(const std::string& toml_text, const std::string& source_name,
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
  // A parameter server takes ZeRO's place: an unset zero_stage follows it.
  if (c.parallel.dp_sync == "parameter-server" && c.where("parallel.zero_stage") == "default") {
    c.parallel.zero_stage = 0;
    c.origin["parallel.zero_stage"] = "implied by parallel.dp_sync = \"parameter-server\"";
  }
  // With model.init_from the [model] keys are known only once its config.json is read
  // (apply_init_from checks them then).
  if (c.model.init_from.empty()) {
    infer_seq_len(c);
    validate_config(c);
  }
  return c;
}

// Paths written in a config file are relative to the file's directory, as most tools read
// them, so a config runs from any directory; --set values and defaults stay relative to the
// current directory. A path key's origin says which applies.
void resolve_relative_paths(Config& c, const std::string& config_path) {
  const std::filesystem::path base = std::filesystem::path(config_path).parent_path();
  if (base.empty()) return;  // the file is in the current directory: nothing changes
  const std::string file_origin = config_path + ":";
  const auto resolve = [&](const std::string& key, std::string& value) {
    if (value.empty() || std::filesystem::path(value).is_absolute() || !c.where(key).starts_with(file_origin)) return;
    value = (base / value).lexically_normal().string();
  };
  resolve("model.init_from", c.model.init_from);
  if (c.model.tokenizer != "byte") resolve("model.tokenizer", c.model.tokenizer);
  resolve("data.train", c.data.train);
  resolve("data.val", c.data.val);
  resolve("logging.dir", c.logging.dir);
  resolve("checkpoint.dir", c.checkpoint.dir);
  if (c.checkpoint.resume != "auto" && c.checkpoint.resume != "never") resolve("checkpoint.resume", c.checkpoint.resume);
}

// model.init_from: the [model] keys its config.json determines. A key the config left at its
// default takes the folder's value; one it set must agree, since a silently ignored n_layer or a
// silently overridden vocab_size would build a model the weights do not fit.
void apply_init_from(Config& c) {
  if (c.model.init_from.empty()) return;
  std::vector<HfConfigValue> values;
  try {
    values = read_hf_config(c.model.init_from);
  } catch (const DataError& e) {
    throw ConfigError(std::string(e.what()) + " [model.init_from at " + c.where("model.init_from") + "]");
  }
  const std::string file = c.model.init_from + "/config.json";
  for (const HfConfigValue& v : values) {
    const size_t dot = v.key.rfind('.');
    const KeyDesc* k = find_key(v.key.substr(0, dot), v.key.substr(dot + 1));
    FEAST_CHECK(k, "config.json maps to unknown key " << v.key);
    const toml::table parsed = toml::parse("v = " + v.toml, std::string_view("config.json"));
    Config from_file = c;
    const std::string where = file + " (\"" + v.hf_key + "\")";
    assign(from_file, *k, *parsed.get("v"), where);
    if (c.where(v.key) == "default") {
      assign(c, *k, *parsed.get("v"), where);
      c.origin[v.key] = where;
      continue;
    }
    const std::string mine = value_text(*k, c), theirs = value_text(*k, from_file);
    if (mine != theirs && !v.advisory)
      fail(c.where(v.key), v.key + " = " + mine + " conflicts with model.init_from's config.json, which has \"" +
                               v.hf_key + "\" = " + theirs + " (" + file + "); remove " + v.key +
                               " from the config to use the model as it is");
  }
  infer_seq_len(c);
  validate_config(c);
}

}  // namespace

Config parse_config(const std::string& toml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides) {
  Config c = parse_unresolved(toml_text, source_name, overrides);
  apply_init_from(c);
  infer_checkpoint_dir(c);
  return c;
}

Config parse_saved_config(const std::string& toml_text, const std::string& source_name) {
  Config c = parse_unresolved(toml_text, source_name, {});
  if (!c.model.init_from.empty()) validate_config(c);  // parse_unresolved left it to the import
  infer_checkpoint_dir(c);
  return c;
}

std::optional<Config> read_saved_config(const std::string& toml_text, const std::string& source_name) {
  if (toml_text.empty()) return std::nullopt;
  try {
    return parse_saved_config(toml_text, source_name);
  } catch (const ConfigError&) {
    return std::nullopt;
  }
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
  Config c = parse_unresolved(text, path, overrides);
  c.source = path;
  resolve_relative_paths(c, path);
  apply_init_from(c);
  infer_checkpoint_dir(c);
  return c;
}

}  // namespace feast
