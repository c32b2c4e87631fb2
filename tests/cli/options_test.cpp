// The one command-line parser: typed values and their bounds, --name=value, flags, positional
// arguments, CONFIG.toml with --set, and the messages for what is wrong (the nearest option for a
// misspelt one, the usage after it).
#include "cli/options.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace feast {
namespace {

CommandLine demo(bool takes_config = false) {
  CommandLine cl;
  cl.verb = "demo";
  cl.synopsis = "trainer demo [options] FILE...";
  cl.description = "A verb for the tests.";
  cl.options = {
      {"--count", ValueKind::kInteger, "N", "how many", {}, 1},
      {"--scale", ValueKind::kNumber, "X", "a factor\nin [0, 1]", {}, 0, 1},
      {"--mode", ValueKind::kText, "fast|slow", "which way", {"fast", "slow"}},
      {"--memory", ValueKind::kSize, "SIZE", "a size"},
      {"--bw", ValueKind::kBandwidth, "BW", "a bandwidth"},
      {"--latency", ValueKind::kDuration, "TIME", "a time"},
      {"--quiet", ValueKind::kFlag, "", "say less"},
  };
  cl.positional = "input files";
  cl.min_positional = 1;
  cl.max_positional = -1;
  cl.takes_config = takes_config;
  cl.hints["--old"] = "it is a verb now: trainer demo-old";
  return cl;
}

std::string error_of(const CommandLine& cl, const std::vector<std::string>& argv) {
  try {
    parse_command_line(cl, argv);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(Options, TypedValuesInBothForms) {
  const Args a = parse_command_line(demo(), {"a.txt", "--count", "3", "--scale=0.5", "--mode", "slow", "--memory",
                                             "2GiB", "--bw", "400Gb/s", "--latency=5us", "--quiet", "b.txt"});
  EXPECT_EQ(a.integer("--count", 0), 3);
  EXPECT_DOUBLE_EQ(a.number("--scale", 0), 0.5);
  EXPECT_EQ(a.text("--mode"), "slow");
  EXPECT_DOUBLE_EQ(a.number("--memory", 0), 2.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(a.number("--bw", 0), 50e9);
  EXPECT_DOUBLE_EQ(a.number("--latency", 0), 5e-6);
  EXPECT_TRUE(a.flag("--quiet"));
  EXPECT_EQ(a.positional(), (std::vector<std::string>{"a.txt", "b.txt"}));
  // Defaults for what was not given.
  const Args b = parse_command_line(demo(), {"a.txt"});
  EXPECT_FALSE(b.has("--count"));
  EXPECT_EQ(b.integer("--count", 7), 7);
  EXPECT_EQ(b.text("--mode", "fast"), "fast");
}

TEST(Options, BadValuesNameTheOptionAndWhatItTakes) {
  const CommandLine cl = demo();
  EXPECT_NE(error_of(cl, {"a", "--count", "0"}).find("demo: --count: expected a whole number >= 1, got '0'"),
            std::string::npos);
  EXPECT_NE(error_of(cl, {"a", "--count", "2.5"}).find("expected a whole number >= 1, got '2.5'"), std::string::npos);
  EXPECT_NE(error_of(cl, {"a", "--count", "3000000000"}).find("got '3000000000'"), std::string::npos);  // not an int
  EXPECT_NE(error_of(cl, {"a", "--scale", "1.5"}).find("--scale: expected a number in [0, 1], got '1.5'"),
            std::string::npos);
  EXPECT_NE(error_of(cl, {"a", "--mode", "medium"}).find("--mode: expected fast or slow, got 'medium'"),
            std::string::npos);
  EXPECT_NE(error_of(cl, {"a", "--memory", "lots"}).find("expected a size such as 5GB"), std::string::npos);
  EXPECT_NE(error_of(cl, {"a", "--count"}).find("--count needs a value (--count N)"), std::string::npos);
  EXPECT_NE(error_of(cl, {"a", "--quiet=yes"}).find("--quiet takes no value"), std::string::npos);
}

TEST(Options, AnUnknownOptionNamesTheNearestAndPrintsTheUsage) {
  const std::string e = error_of(demo(), {"a", "--cuont", "3"});
  EXPECT_NE(e.find("demo: unknown option '--cuont'; did you mean '--count'?"), std::string::npos) << e;
  EXPECT_NE(e.find("\nusage: trainer demo [options] FILE..."), std::string::npos) << e;
  // Nothing near: no guess.
  EXPECT_EQ(error_of(demo(), {"a", "--frobnicate"}).find("did you mean"), std::string::npos);
  // An argument with a meaning elsewhere says where.
  EXPECT_NE(error_of(demo(), {"a", "--old"}).find("unknown option '--old': it is a verb now: trainer demo-old"),
            std::string::npos);
}

TEST(Options, PositionalCounts) {
  EXPECT_NE(error_of(demo(), {"--quiet"}).find("demo: name input files"), std::string::npos);
  CommandLine one = demo();
  one.max_positional = 1;
  EXPECT_NE(error_of(one, {"a", "b"}).find("more than one input files given ('a' and 'b')"), std::string::npos);
}

TEST(Options, ConfigAndSet) {
  const CommandLine cl = demo(/*takes_config=*/true);
  const Args a = parse_command_line(cl, {"run.toml", "--set", "training.steps=5", "--set=training.lr=1e-3"});
  EXPECT_EQ(a.config_path(), "run.toml");
  EXPECT_EQ(a.overrides(), (std::vector<std::string>{"training.steps=5", "training.lr=1e-3"}));
  EXPECT_NE(error_of(cl, {"a.toml", "b.toml"}).find("more than one config file given ('a.toml' and 'b.toml')"),
            std::string::npos);
  // The value went into the next argument: say how to write it.
  EXPECT_NE(error_of(cl, {"a.toml", "--set", "training.steps", "10"})
                .find("--set 'training.steps' is not section.key=value; write --set training.steps=10"),
            std::string::npos);
  EXPECT_NE(error_of(cl, {"a.toml", "--set"}).find("--set needs a value"), std::string::npos);
  EXPECT_NE(error_of(cl, {"a.toml", "--sett", "x=1"}).find("did you mean '--set'?"), std::string::npos);
}

TEST(Options, UsageListsEveryOptionAlignedWithItsHelp) {
  const std::string u = usage(demo(true));
  EXPECT_EQ(u.rfind("usage: trainer demo [options] FILE...\nA verb for the tests.\n", 0), 0u) << u;
  for (const char* name : {"--count N", "--scale X", "--mode fast|slow", "--memory SIZE", "--quiet", "--set section.key=value"})
    EXPECT_NE(u.find(std::string("  ") + name), std::string::npos) << name << " in:\n" << u;
  // A help of two lines continues under its first.
  const size_t first = u.find("a factor\n");
  ASSERT_NE(first, std::string::npos) << u;
  const size_t column = first - u.rfind('\n', first) - 1;
  EXPECT_EQ(u.substr(first + 9, column), std::string(column, ' ')) << u;
}

TEST(Options, HelpIsAskedAnywhere) {
  EXPECT_TRUE(wants_help({"a", "--help"}));
  EXPECT_TRUE(wants_help({"-h"}));
  EXPECT_FALSE(wants_help({"--helpful"}));
}

}  // namespace
}  // namespace feast
