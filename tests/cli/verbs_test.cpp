// The verb table as a user meets it, in-process: every verb and every benchmark answers --help
// with its own usage, and a misspelt option of each names the option meant. Table-driven, so a
// verb added to the table is checked without a line here.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/verb.h"
#include "core/error.h"

namespace feast {
namespace {

// The verbs, and the benchmarks as "bench NAME".
std::vector<std::pair<std::vector<std::string>, const Verb*>> every_command() {
  std::vector<std::pair<std::vector<std::string>, const Verb*>> out;
  for (const Verb& v : verbs()) {
    if (v.modes.empty()) out.push_back({{v.name}, &v});
    for (const Verb& m : v.modes) out.push_back({{v.name, m.name}, &m});
  }
  return out;
}

std::string joined(const std::vector<std::string>& words) {
  std::string s;
  for (const std::string& w : words) s += (s.empty() ? "" : " ") + w;
  return s;
}

TEST(Verbs, EveryVerbAndBenchmarkAnswersHelpWithItsOwnUsage) {
  const auto commands = every_command();
  ASSERT_GE(commands.size(), 16u);
  for (const auto& [words, verb] : commands) {
    std::vector<std::string> argv = words;
    argv.push_back("--help");
    ::testing::internal::CaptureStdout();
    const int code = dispatch(argv, {});
    const std::string out = ::testing::internal::GetCapturedStdout();
    EXPECT_EQ(code, 0) << joined(words);
    EXPECT_EQ(out.rfind("usage: ", 0), 0u) << joined(words) << ":\n" << out;
    // Its own usage: the synopsis names the verb, or in brackets one that may be left out
    // (`trainer [train] CONFIG.toml`, `trainer bench [step]`).
    std::vector<std::string> optional = words;
    optional.back() = "[" + optional.back() + "]";
    EXPECT_TRUE(out.find("trainer " + joined(words)) != std::string::npos ||
                out.find("trainer " + joined(optional)) != std::string::npos)
        << joined(words) << ":\n" << out;
    for (const Option& o : verb->command_line.options)
      EXPECT_NE(out.find("  " + o.name), std::string::npos) << joined(words) << " does not list " << o.name;
  }
}

TEST(Verbs, AMisspeltOptionOfEveryVerbNamesTheNearestAndTheUsage) {
  for (const auto& [words, verb] : every_command()) {
    const CommandLine& cl = verb->command_line;
    const std::string meant = cl.options.empty() ? "--set" : cl.options.front().name;
    const std::string typo = meant + meant.back();  // one letter too many
    std::vector<std::string> argv = words;
    argv.push_back(typo);
    try {
      dispatch(argv, {});
      ADD_FAILURE() << joined(argv) << " was accepted";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(cl.verb + ": unknown option '" + typo + "'; did you mean '" + meant + "'?"), std::string::npos)
          << what;
      EXPECT_NE(what.find("\nusage: "), std::string::npos) << what;
    }
  }
}

TEST(Verbs, TheOverviewListsEveryVerbAndAMisspeltVerbIsNamed) {
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(dispatch({"--help"}, {}), 0);
  const std::string out = ::testing::internal::GetCapturedStdout();
  for (const Verb& v : verbs()) EXPECT_NE(out.find("\n  " + v.name + " "), std::string::npos) << v.name;
  try {
    dispatch({"evl", "configs/demo.toml"}, {});
    ADD_FAILURE() << "a misspelt verb was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown command 'evl'; did you mean 'eval'?"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace feast
