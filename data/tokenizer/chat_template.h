// A model's chat template: the Jinja template a Hugging Face tokenizer folder carries
// (chat_template.jinja, or "chat_template" in tokenizer_config.json), rendered by minja
// (third_party/minja, Google's C++ engine made for these templates) with the variables
// transformers' apply_chat_template gives it: messages, add_generation_prompt, and the special
// tokens (bos_token, eos_token, unk_token, pad_token). prepare-data renders chat records with it
// and counts only the assistant turns in the loss; generate --chat renders a prompt with it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/tokenizer/tokenizer.h"

namespace feast {

// One turn: role "system", "user" or "assistant" (any role the template accepts), its text.
struct ChatMessage {
  std::string role;
  std::string content;
};

class ChatTemplate {
 public:
  // The template of a tokenizer folder: FOLDER/chat_template.jinja when present, else
  // tokenizer_config.json's "chat_template" (a string, or a list of {"name", "template"} of
  // which "default" is taken). Throws DataError naming the folder when it has none, or the
  // template when it does not parse.
  static ChatTemplate load(const std::string& folder);
  // Whether `folder` (a tokenizer folder, or a file in one) holds a chat template.
  static bool available(const std::string& folder);

  // transformers' apply_chat_template(messages, tokenize=False, add_generation_prompt=...).
  // Throws DataError with the template's own message (raise_exception) or the engine's.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  // A conversation rendered for training, and the byte ranges of its assistant turns in it:
  // each from where the rendering of the turns before it with the generation prompt ends, to
  // where the rendering through it ends (the reply and the template's end-of-turn text); where
  // the generation prompt is not how the template opens a past reply (reasoning models' "<think>"),
  // from where the turns before it end, the turn's opening included. Throws DataError when the
  // template does not render each conversation's turns as a prefix of the whole (then no range
  // can be told).
  struct Rendered {
    std::string text;
    std::vector<std::pair<size_t, size_t>> assistant;  // [begin, end) byte offsets
  };
  Rendered render_for_training(const std::vector<ChatMessage>& messages) const;

  // The text the template writes right after an assistant reply, up to the next turn (ChatML's
  // "<|im_end|>\n", Llama 3's "<|eot_id|>"): where a generated reply ends.
  std::string end_of_turn() const;

  const std::string& folder() const { return folder_; }

 private:
  struct Engine;
  std::shared_ptr<const Engine> engine_;
  std::string folder_;
  nlohmann::ordered_json special_tokens_;  // unk_token, pad_token as the template sees them
};

// A rendered conversation's ids (tok.encode of the whole text, as transformers tokenizes a
// rendered chat) and per id whether it counts in the loss: 1 where the token's bytes overlap an
// assistant turn's range. A token's bytes are found by decoding the ids before it (a binary
// search per range boundary), so merges across a boundary are handled: such a token counts.
struct EncodedChat {
  std::vector<int32_t> ids;
  std::vector<uint8_t> counted;
};
EncodedChat encode_chat(const Tokenizer& tok, const ChatTemplate::Rendered& chat);

// Reads a JSON array of {"role", "content"} objects (a chat record's "messages"). Throws
// DataError saying what is wrong with which message.
std::vector<ChatMessage> parse_chat_messages(const nlohmann::json& messages);

}  // namespace feast
