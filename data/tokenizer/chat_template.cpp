#include "data/tokenizer/chat_template.h"

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <sstream>

#include <minja/minja.hpp>

#include "core/error.h"
#include "data/tokenizer/hf_json.h"

namespace feast {
namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

// The parsed template, rendered with the variables transformers gives it (minja's own
// chat_template class would also probe the template's tool-calling abilities, printing to stderr
// where it cannot: feast renders the template as written and needs none of that).
struct ChatTemplate::Engine {
  std::shared_ptr<minja::TemplateNode> root;
  std::string bos_token, eos_token;
};

namespace {

fs::path folder_of(const std::string& path) {
  const fs::path p(path);
  return fs::is_directory(p) ? p : p.parent_path();
}

nlohmann::json tokenizer_config(const fs::path& dir) {
  const fs::path p = dir / "tokenizer_config.json";
  return fs::is_regular_file(p) ? read_json(p.string()) : nlohmann::json::object();
}

// The template's source and where it came from, or "" when the folder has none.
std::pair<std::string, std::string> template_source(const fs::path& dir, const nlohmann::json& config) {
  const fs::path jinja = dir / "chat_template.jinja";
  if (fs::is_regular_file(jinja)) {
    std::ifstream in(jinja, std::ios::binary);
    if (!in) throw DataError(jinja.string() + ": cannot open");
    return {std::string(std::istreambuf_iterator<char>(in), {}), jinja.string()};
  }
  if (!config.contains("chat_template")) return {"", ""};
  const nlohmann::json& t = config["chat_template"];
  const std::string where = (dir / "tokenizer_config.json").string() + " (chat_template)";
  if (t.is_string()) return {t.get<std::string>(), where};
  if (t.is_array()) {  // named templates: transformers takes "default" when no name is given
    for (const nlohmann::json& named : t)
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
          named["template"].is_string())
        return {named["template"].get<std::string>(), where};
    throw DataError(where + ": a list of named templates without one named \"default\"");
  }
  throw DataError(where + ": neither a string nor a list of named templates");
}

ordered_json to_json(const std::vector<ChatMessage>& messages) {
  ordered_json out = ordered_json::array();
  for (const ChatMessage& m : messages) out.push_back({{"role", m.role}, {"content", m.content}});
  return out;
}

}  // namespace

bool ChatTemplate::available(const std::string& folder) {
  try {
    const fs::path dir = folder_of(folder);
    return !template_source(dir, tokenizer_config(dir)).first.empty();
  } catch (const DataError&) {
    return false;
  }
}

ChatTemplate ChatTemplate::load(const std::string& folder) {
  const fs::path dir = folder_of(folder);
  const nlohmann::json config = tokenizer_config(dir);
  const auto [source, where] = template_source(dir, config);
  if (source.empty())
    throw DataError(dir.string() + ": no chat template (neither chat_template.jinja nor \"chat_template\" in "
                                   "tokenizer_config.json); chat data needs the tokenizer of a chat model");
  ChatTemplate t;
  t.folder_ = dir.string();
  try {
    // transformers' environment: trim_blocks and lstrip_blocks, no trailing newline kept.
    const minja::Options options{/*trim_blocks=*/true, /*lstrip_blocks=*/true, /*keep_trailing_newline=*/false};
    t.engine_ = std::make_shared<const Engine>(
        Engine{minja::Parser::parse(source, options), config_token(config, "bos_token").value_or(""),
               config_token(config, "eos_token").value_or("")});
  } catch (const std::exception& e) {
    throw DataError(where + ": the chat template does not parse: " + e.what());
  }
  // transformers passes every special token of the tokenizer to the template by name, and
  // tools and documents as None when there are none.
  t.special_tokens_ = ordered_json::object();
  for (const char* key : {"unk_token", "pad_token"}) t.special_tokens_[key] = config_token(config, key).value_or("");
  t.special_tokens_["tools"] = nullptr;
  t.special_tokens_["documents"] = nullptr;
  return t;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  try {
    auto context = minja::Context::make(
        ordered_json{{"messages", to_json(messages)}, {"add_generation_prompt", add_generation_prompt}});
    context->set("bos_token", engine_->bos_token);
    context->set("eos_token", engine_->eos_token);
    for (const auto& item : special_tokens_.items()) context->set(item.key(), minja::Value(item.value()));
    // transformers' strftime_now(format): the local time now.
    context->set("strftime_now",
                 minja::Value::callable([](const std::shared_ptr<minja::Context>&, minja::ArgumentsValue& args) {
                   args.expectArgs("strftime_now", {1, 1}, {0, 0});
                   const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
                   std::tm local{};
                   localtime_r(&now, &local);
                   std::ostringstream s;
                   s << std::put_time(&local, args.args[0].get<std::string>().c_str());
                   return minja::Value(s.str());
                 }));
    return engine_->root->render(context);
  } catch (const std::exception& e) {
    throw DataError(folder_ + ": the chat template failed on this conversation: " + e.what());
  }
}

ChatTemplate::Rendered ChatTemplate::render_for_training(const std::vector<ChatMessage>& messages) const {
  Rendered r;
  r.text = render(messages, false);
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role != "assistant") continue;
    const std::vector<ChatMessage> before(messages.begin(), messages.begin() + long(i));
    const std::string through = render({messages.begin(), messages.begin() + long(i) + 1}, false);
    // The reply starts where the generation prompt ends. A template whose generation prompt is
    // not how it renders a past reply (a reasoning model's "<think>" opening) counts the whole
    // turn from where the turns before it end, its opening included.
    std::string prompt = render(before, true);
    if (!through.starts_with(prompt)) prompt = render(before, false);
    if (!through.starts_with(prompt) || !r.text.starts_with(through))
      throw DataError(folder_ + ": the chat template does not render the turns before assistant message " +
                      std::to_string(i + 1) + " as the start of the conversation, so which tokens are the "
                      "assistant's cannot be told");
    r.assistant.emplace_back(prompt.size(), through.size());
  }
  return r;
}

std::string ChatTemplate::end_of_turn() const {
  // A reply that cannot occur in a template: what follows it, up to the next turn's start.
  static const std::string kReply = "\x01reply\x01";
  const std::string with = render({{"user", "q"}, {"assistant", kReply}, {"user", "q"}}, false);
  const std::string without = render({{"user", "q"}, {"assistant", kReply}}, false);
  const size_t at = without.find(kReply);
  if (at == std::string::npos) return "";
  const std::string after = without.substr(at + kReply.size());
  // The part of it the next turn does not begin again: up to where the longer rendering differs.
  size_t n = 0;
  const std::string next = with.substr(at + kReply.size());
  while (n < after.size() && n < next.size() && after[n] == next[n]) ++n;
  return after.substr(0, n);
}

EncodedChat encode_chat(const Tokenizer& tok, const ChatTemplate::Rendered& chat) {
  EncodedChat out;
  out.ids = tok.encode(chat.text);
  out.counted.assign(out.ids.size(), 0);
  const size_t n = out.ids.size();
  // Where token i begins: the bytes of the ids before it (non-decreasing in i).
  auto start = [&](size_t i) { return tok.decode(std::span<const int32_t>(out.ids.data(), i)).size(); };
  // The first token whose end lies beyond `offset` (n when none): the token holding that byte.
  auto token_holding = [&](size_t offset) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
      const size_t mid = (lo + hi) / 2;
      if (start(mid + 1) > offset) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  };
  for (const auto& [begin, end] : chat.assistant) {
    if (end <= begin) continue;
    const size_t first = token_holding(begin), last = token_holding(end - 1);
    for (size_t i = first; i <= last && i < n; ++i) out.counted[i] = 1;
  }
  return out;
}

std::vector<ChatMessage> parse_chat_messages(const nlohmann::json& messages) {
  if (!messages.is_array()) throw DataError("\"messages\" is not a JSON array of {\"role\", \"content\"} objects");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const nlohmann::json& m = messages[i];
    const std::string which = "message " + std::to_string(i + 1);
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string())
      throw DataError(which + " is not an object with string \"role\" and \"content\" fields");
    out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return out;
}

}  // namespace feast
