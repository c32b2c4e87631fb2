// Chat templates against transformers: for five templates (SmolLM2's and Qwen2's ChatML, Llama 3's
// headers, Mistral's [INST], DeepSeek-R1-Distill's, whose generation prompt opens a "<think>" a
// past reply lacks) on the fixture tokenizers, feast's rendering, with and without the
// generation prompt, equals apply_chat_template's text; the ids of the rendered conversation
// equal apply_chat_template's; the tokens counted in the loss are those overlapping the
// assistant turns (located by transformers' offset mapping in make_chat_fixtures.py, by decoding
// here); and each template's end-of-turn text. Then the refusals.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "data/tokenizer/chat_template.h"
#include "tokenizer_test_helpers.h"

namespace feast {
namespace {

using testing::data_error;
using testing::kFixtures;

const std::string kChat = kFixtures + "/chat";

const nlohmann::json& chat_cases() {
  static const nlohmann::json j = nlohmann::json::parse(testing::read_file(kChat + "/cases.json"));
  return j;
}

TEST(ChatTemplate, RendersAndTokenizesAsTransformersDoes) {
  int checked = 0;
  for (const auto& [name, c] : chat_cases().items()) {
    SCOPED_TRACE(name);
    const std::string folder = kChat + "/" + name;
    ASSERT_TRUE(ChatTemplate::available(folder));
    const ChatTemplate tmpl = ChatTemplate::load(folder);
    const std::unique_ptr<Tokenizer> tok = load_tokenizer(folder);
    EXPECT_EQ(tmpl.end_of_turn(), c["end_of_turn"].get<std::string>());
    for (const nlohmann::json& row : c["conversations"]) {
      const std::vector<ChatMessage> messages = parse_chat_messages(row["messages"]);
      SCOPED_TRACE(row["messages"].dump());
      EXPECT_EQ(tmpl.render(messages, false), row["text"].get<std::string>());
      if (row.contains("generation_text")) {
        EXPECT_EQ(tmpl.render(messages, true), row["generation_text"].get<std::string>());
      }
      const EncodedChat enc = encode_chat(*tok, tmpl.render_for_training(messages));
      EXPECT_EQ(enc.ids, row["ids"].get<std::vector<int32_t>>());
      EXPECT_EQ(enc.counted, row["counted"].get<std::vector<uint8_t>>());
      ++checked;
    }
  }
  EXPECT_EQ(checked, 19);  // 4 conversations for four templates, 3 for Mistral's
}

// The counted tokens are exactly the assistant's text and the end of its turn: decoded, they
// give the replies followed by the template's end-of-turn text.
TEST(ChatTemplate, CountedTokensAreTheRepliesAndTheirEndOfTurn) {
  const std::string folder = kChat + "/smollm2";
  const ChatTemplate tmpl = ChatTemplate::load(folder);
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(folder);
  const std::vector<ChatMessage> messages = {{"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}, {"assistant", "Ciao."}};
  const EncodedChat enc = encode_chat(*tok, tmpl.render_for_training(messages));
  std::vector<int32_t> counted;
  for (size_t i = 0; i < enc.ids.size(); ++i)
    if (enc.counted[i]) counted.push_back(enc.ids[i]);
  EXPECT_EQ(tok->decode(counted), "Hello!<|im_end|>\nCiao.<|im_end|>\n");
}

TEST(ChatTemplate, NamedTemplatesAndTheJinjaFileAreFound) {
  const std::string dir = ::testing::TempDir() + "/feast_chat_named";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  // A list of named templates: "default" is taken.
  testing::write_file(dir + "/tokenizer_config.json",
                      R"({"eos_token": {"content": "E", "special": true}, "chat_template": [)"
                      R"({"name": "tool_use", "template": "T"}, {"name": "default", "template": )"
                      R"("{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{{ eos_token }}{% endfor %}"}]})");
  EXPECT_EQ(ChatTemplate::load(dir).render({{"user", "x"}}, false), "[user]xE");
  // chat_template.jinja wins over tokenizer_config.json's.
  testing::write_file(dir + "/chat_template.jinja", "{% for m in messages %}<{{ m['content'] }}>{% endfor %}");
  EXPECT_EQ(ChatTemplate::load(dir).render({{"user", "x"}}, false), "<x>");
}

TEST(ChatTemplate, RefusalsNameTheFolderAndTheProblem) {
  // A tokenizer folder without a template.
  const std::string plain = kFixtures + "/tokenizers/bpe-gpt2";
  EXPECT_FALSE(ChatTemplate::available(plain));
  EXPECT_NE(data_error([&] { ChatTemplate::load(plain); }).find("no chat template"), std::string::npos);
  // The template's own raise_exception: Mistral's roles must alternate.
  const ChatTemplate mistral = ChatTemplate::load(kChat + "/mistral");
  const std::string e = data_error([&] { mistral.render({{"user", "a"}, {"user", "b"}}, false); });
  EXPECT_NE(e.find("Conversation roles must alternate"), std::string::npos) << e;
  EXPECT_NE(e.find("mistral"), std::string::npos) << e;
  // A template that does not parse.
  const std::string dir = ::testing::TempDir() + "/feast_chat_bad";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  testing::write_file(dir + "/chat_template.jinja", "{% for m in messages %}{{ m['content'] }");
  EXPECT_NE(data_error([&] { ChatTemplate::load(dir); }).find("does not parse"), std::string::npos);
  // Messages that are not {role, content} objects.
  EXPECT_NE(data_error([&] { parse_chat_messages(nlohmann::json::parse(R"([{"role": "user"}])")); }).find("message 1"),
            std::string::npos);
  EXPECT_NE(data_error([&] { parse_chat_messages(nlohmann::json::parse(R"({"role": "user"})")); }).find("not a JSON array"),
            std::string::npos);
}

}  // namespace
}  // namespace feast
