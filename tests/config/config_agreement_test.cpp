// Ranks started with different configs are found before anything is built (config/config_agreement.h).
#include <gtest/gtest.h>

#include <string>

#include "config/config_agreement.h"

namespace feast {
namespace {

Config parse(const std::vector<std::string>& overrides) { return parse_config("", "demo.toml", overrides); }

TEST(ConfigAgreement, TheFirstDifferingKeyIsNamedWithBothValues) {
  const std::string reference = agreed_config_text(parse({"training.steps=2"}));
  EXPECT_EQ(config_disagreement(parse({"training.steps=2"}), 3, reference, 0), "");
  const std::string why = config_disagreement(parse({"training.lr=0.5", "training.steps=4"}), 3, reference, 0);
  EXPECT_EQ(why.rfind("rank 3 runs another config than rank 0: training.steps = 4 here (--set), 2 on rank 0; ", 0), 0u)
      << why;
  EXPECT_NE(why.find("same config file and --set options"), std::string::npos) << why;
  // A key only one side has (another version of feast) counts as a difference.
  EXPECT_NE(config_disagreement(parse({}), 1, "", 0).find("(not a key there)"), std::string::npos);
}

TEST(ConfigAgreement, NodeLocalPathsMayDifferButNotInWhetherTheyAreSet) {
  const std::string reference = agreed_config_text(parse({"data.train=/node0/train.bin", "model.tokenizer=/a"}));
  EXPECT_EQ(reference.find("/node0"), std::string::npos);
  EXPECT_EQ(config_disagreement(parse({"data.train=/node1/train.bin", "model.tokenizer=/b"}), 1, reference, 0), "");
  // Set on one rank and not on another, a path decides which collectives the ranks join.
  const std::string with_val = agreed_config_text(parse({"data.val=/v.bin"}));
  EXPECT_NE(config_disagreement(parse({"data.val=\"\""}), 1, with_val, 0).find("data.val = (unset) here"),
            std::string::npos);
  const std::string plain = agreed_config_text(parse({"logging.dir=/a", "checkpoint.dir=/a/c"}));
  EXPECT_NE(config_disagreement(parse({"logging.dir=/a", "checkpoint.dir=/a/c", "checkpoint.resume=never"}), 1, plain, 0)
                .find("checkpoint.resume = \"never\" here"),
            std::string::npos);
  EXPECT_EQ(config_disagreement(parse({"logging.dir=/elsewhere", "checkpoint.dir=/b"}), 1, plain, 0), "");
  EXPECT_NE(config_disagreement(parse({"logging.dir=/a", "checkpoint.dir=/a/c", "checkpoint.interval=7"}), 1, plain, 0)
                .find("checkpoint.interval = 7"),
            std::string::npos);
}

}  // namespace
}  // namespace feast
