#include "cli/options.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/nearest_word.h"

namespace feast {

namespace {

// The leading number of `value` and how many characters it took (0: none).
double leading_number(const std::string& value, size_t& used) {
  used = 0;
  try {
    return std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
    return 0;
  }
}

std::string format_limit(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}

// An integer option without a max of its own fills an int.
constexpr double kIntMax = 2147483647;
double max_of(const Option& o) { return o.kind == ValueKind::kInteger && !std::isfinite(o.max) ? kIntMax : o.max; }

// "a whole number >= 1", "a number in [0, 1]".
std::string expected(const Option& o) {
  const bool whole = o.kind == ValueKind::kInteger;
  std::string what = whole ? "a whole number" : "a number";
  // A max that only keeps the value exact in a double (2^53) or in an int says nothing worth saying.
  const bool lo = std::isfinite(o.min), hi = std::isfinite(o.max) && o.max != kIntMax && o.max < 9e15;
  if (lo && hi) return what + " in [" + format_limit(o.min) + ", " + format_limit(o.max) + "]";
  if (lo) return what + " >= " + format_limit(o.min);
  if (hi) return what + " <= " + format_limit(o.max);
  return what;
}

std::string join(const std::vector<std::string>& items, const std::string& last_separator) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i)
    s += (i == 0 ? "" : i + 1 == items.size() ? last_separator : ", ") + items[i];
  return s;
}

}  // namespace

uint64_t parse_size(const std::string& what, const std::string& value) {
  size_t used = 0;
  const double number = leading_number(value, used);
  std::string unit = value.substr(used);
  for (char& ch : unit) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KB") scale = 1e3;
  else if (unit == "MB") scale = 1e6;
  else if (unit == "GB") scale = 1e9;
  else if (unit == "TB") scale = 1e12;
  else if (unit == "K" || unit == "KIB") scale = 1024.0;
  else if (unit == "M" || unit == "MIB") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "GIB") scale = 1024.0 * 1024 * 1024;
  if (used == 0 || scale == 0 || !(number > 0))
    throw ConfigError(what + ": expected a size such as 5GB, 500MB or 2GiB, got '" + value + "'");
  return static_cast<uint64_t>(number * scale);
}

double parse_bandwidth(const std::string& what, const std::string& value) {
  std::string v = value;
  if (v.size() > 2 && v.compare(v.size() - 2, 2, "/s") == 0) v.resize(v.size() - 2);
  size_t used = 0;
  const double number = leading_number(v, used);
  const std::string unit = v.substr(used);
  double scale = 0;
  const std::string prefixes = "KMGT";
  if (unit.empty() || unit == "B") {
    scale = 1;
  } else {
    const size_t k = prefixes.find(char(std::toupper(static_cast<unsigned char>(unit[0]))));
    const std::string rest = unit.substr(1);
    if (k != std::string::npos) {
      const double dec = std::pow(1e3, double(k + 1)), bin = std::pow(1024.0, double(k + 1));
      if (rest == "B") scale = dec;
      else if (rest == "iB") scale = bin;
      else if (rest == "b" || rest == "bit") scale = dec / 8;  // bits
    }
  }
  if (used == 0 || scale == 0 || !(number > 0))
    throw ConfigError(what + ": expected a bandwidth such as 450GB/s or 400Gb/s, got '" + value + "'");
  return number * scale;
}

double parse_duration(const std::string& what, const std::string& value) {
  size_t used = 0;
  const double number = leading_number(value, used);
  const std::string unit = value.substr(used);
  double scale = 0;
  if (unit == "s") scale = 1;
  else if (unit == "ms") scale = 1e-3;
  else if (unit == "us" || unit == "\xc2\xb5s") scale = 1e-6;
  else if (unit == "ns") scale = 1e-9;
  if (used == 0 || scale == 0 || !(number >= 0))
    throw ConfigError(what + ": expected a time such as 5us, 1.5ms or 2s, got '" + value + "'");
  return number * scale;
}

std::string usage(const CommandLine& cl) {
  std::string out = "usage: " + cl.synopsis + "\n";
  if (!cl.description.empty()) out += cl.description + (cl.description.back() == '\n' ? "" : "\n");
  std::vector<std::pair<std::string, std::string>> rows;
  for (const Option& o : cl.options) rows.emplace_back(o.name + (o.metavar.empty() ? "" : " " + o.metavar), o.help);
  if (cl.takes_config)
    rows.emplace_back("--set section.key=value", "set a config key (TOML value; bare words are strings); repeatable");
  size_t width = 0;
  for (const auto& [left, help] : rows) width = std::max(width, left.size());
  width = std::min<size_t>(width, 26);
  for (const auto& [left, help] : rows) {
    std::string line = "  " + left;
    line.resize(std::max(line.size() + 2, width + 4), ' ');
    // Continuation lines of the help line up under its first line.
    for (char ch : help) {
      line += ch;
      if (ch == '\n') line.append(width + 4, ' ');
    }
    out += line + "\n";
  }
  if (!cl.epilogue.empty()) out += cl.epilogue + (cl.epilogue.back() == '\n' ? "" : "\n");
  return out;
}

std::string Args::text(const std::string& name, const std::string& fallback) const {
  const auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second.text;
}

int64_t Args::integer(const std::string& name, int64_t fallback) const {
  const auto it = values_.find(name);
  return it == values_.end() ? fallback : static_cast<int64_t>(it->second.number);
}

double Args::number(const std::string& name, double fallback) const {
  const auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second.number;
}

bool wants_help(const std::vector<std::string>& argv) {
  return std::any_of(argv.begin(), argv.end(), [](const std::string& a) { return a == "--help" || a == "-h"; });
}

Args parse_command_line(const CommandLine& cl, const std::vector<std::string>& argv) {
  const auto fail = [&](const std::string& what) -> ConfigError {
    return ConfigError(cl.verb + ": " + what + "\n" + usage(cl));
  };
  std::vector<std::string> names;
  for (const Option& o : cl.options) names.push_back(o.name);
  if (cl.takes_config) names.push_back("--set");
  names.push_back("--help");

  Args args;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.size() < 2 || a[0] != '-') {
      if (cl.takes_config) {
        if (!args.config_path_.empty())
          throw ConfigError(cl.verb + ": more than one config file given ('" + args.config_path_ + "' and '" + a +
                            "'); a config key is set with --set section.key=value");
        args.config_path_ = a;
      } else {
        args.positional_.push_back(a);
      }
      continue;
    }
    // --name value, or --name=value.
    std::string name = a, value;
    const size_t eq = a.find('=');
    const bool inline_value = a.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inline_value) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
    }
    if (cl.takes_config && name == "--set") {
      if (!inline_value) {
        if (i + 1 >= argv.size()) throw fail("--set needs a value: --set section.key=value");
        value = argv[++i];
      }
      if (value.find('=') == std::string::npos) {
        // "--set training.steps 10": the value went into the next argument.
        const bool next_is_value = !inline_value && i + 1 < argv.size() && argv[i + 1].rfind("--", 0) != 0;
        throw fail("--set '" + value + "' is not section.key=value" +
                   (next_is_value ? "; write --set " + value + "=" + argv[i + 1] : "; for example --set training.steps=100"));
      }
      args.overrides_.push_back(value);
      continue;
    }
    const auto option = std::find_if(cl.options.begin(), cl.options.end(), [&](const Option& o) { return o.name == name; });
    if (option == cl.options.end()) {
      if (const auto hint = cl.hints.find(name); hint != cl.hints.end()) throw fail("unknown option '" + name + "': " + hint->second);
      const std::string near = nearest_word(name, names);
      throw fail("unknown option '" + name + "'" + (near.empty() ? "" : "; did you mean '" + near + "'?"));
    }
    const Option& o = *option;
    Args::Value v;
    if (o.kind == ValueKind::kFlag) {
      if (inline_value) throw fail(o.name + " takes no value, got '" + a + "'");
      args.values_[o.name] = v;
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argv.size()) throw fail(o.name + " needs a value (" + o.name + " " + o.metavar + ")");
      value = argv[++i];
    }
    v.text = value;
    const std::string what = cl.verb + ": " + o.name;
    switch (o.kind) {
      case ValueKind::kFlag:
        break;
      case ValueKind::kText:
        if (!o.choices.empty() && std::find(o.choices.begin(), o.choices.end(), value) == o.choices.end())
          throw ConfigError(what + ": expected " + join(o.choices, " or ") + ", got '" + value + "'");
        break;
      case ValueKind::kInteger:
      case ValueKind::kNumber: {
        size_t used = 0;
        v.number = leading_number(value, used);
        const bool whole = o.kind != ValueKind::kInteger || (v.number == std::floor(v.number) && std::abs(v.number) < 9.007199254740992e15);
        if (used == 0 || used != value.size() || !std::isfinite(v.number) || !whole || v.number < o.min || v.number > max_of(o))
          throw ConfigError(what + ": expected " + expected(o) + ", got '" + value + "'");
        break;
      }
      case ValueKind::kSize:
        v.number = double(parse_size(what, value));
        break;
      case ValueKind::kBandwidth:
        v.number = parse_bandwidth(what, value);
        break;
      case ValueKind::kDuration:
        v.number = parse_duration(what, value);
        break;
    }
    args.values_[o.name] = v;
  }
  const int n = int(args.positional_.size());
  if (!cl.takes_config && n < cl.min_positional)
    throw fail("name " + cl.positional + (cl.min_positional > 1 ? " (" + std::to_string(cl.min_positional) + ")" : ""));
  if (!cl.takes_config && cl.max_positional >= 0 && n > cl.max_positional) {
    if (cl.max_positional == 0) throw fail("takes no argument '" + args.positional_.front() + "'");
    throw fail("more than one " + cl.positional + " given ('" + args.positional_[0] + "' and '" +
               args.positional_[1] + "')");
  }
  return args;
}

}  // namespace feast
