// `trainer generate CONFIG --prompt TEXT`: text from the configured model with a key/value
// cache (model/kv_cache_decoder.h) on one process. The weights are those a run of the config
// would start from or reached: the checkpoint checkpoint.resume names (or the newest in
// checkpoint.dir), else model.init_from, else the random initialisation (with a warning).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "checkpoint/checkpoint_file.h"
#include "checkpoint/checkpoint_store.h"
#include "interop/hf/generation_config.h"
#include "interop/hf/model_weights.h"
#include "core/error.h"
#include "core/log.h"
#include "data/tokenizer/chat_template.h"
#include "data/tokenizer/tokenizer.h"
#include "model/architecture.h"
#include "model/kv_cache_decoder.h"
#include "model/token_sampling.h"
#include "train/checkpointing.h"
#include "cli/verb.h"

namespace feast {
namespace {

namespace fs = std::filesystem;

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    long v = -1;
    try {
      v = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 0 || v > INT32_MAX)
      throw ConfigError("generate: --prompt-ids expects comma-separated token ids, got '" + item + "' in '" + text + "'");
    ids.push_back(int32_t(v));
  }
  if (ids.empty()) throw ConfigError("generate: --prompt-ids is empty");
  return ids;
}

// The checkpoint a run of this config would resume, if any: the newest of the candidates
// resume_from_checkpoint would try.
std::optional<std::string> checkpoint_to_use(const Config& config) {
  if (!may_resume(config)) return std::nullopt;
  const std::vector<std::string> found = checkpoint_candidates(config);
  if (found.empty()) return std::nullopt;
  return found.front();
}

int run_generate(const Args& args, const VerbContext&) {
  const Config config = load_config(args.config_path(), args.overrides());
  std::optional<std::string> prompt;
  std::optional<std::vector<int32_t>> prompt_ids;
  if (args.has("--prompt")) prompt = args.text("--prompt");
  if (args.has("--prompt-ids")) prompt_ids = parse_ids(args.text("--prompt-ids"));
  std::optional<std::string> chat;  // a user message, rendered by the model's chat template
  if (args.has("--chat")) chat = args.text("--chat");
  const int max_new = int(args.integer("--max-new-tokens", 64));
  SamplingOptions sampling;
  sampling.seed = uint64_t(args.integer("--seed", int64_t(config.training.seed)));
  sampling.temperature = args.number("--temperature", sampling.temperature);
  sampling.top_k = int(args.integer("--top-k", sampling.top_k));
  sampling.top_p = args.number("--top-p", sampling.top_p);
  const bool bos = args.flag("--bos"), ignore_eos = args.flag("--ignore-eos"), print_ids = args.flag("--ids"),
             show_special = args.flag("--special");
  if (int(prompt.has_value()) + int(prompt_ids.has_value()) + int(chat.has_value()) != 1)
    throw ConfigError(
        "generate: give exactly one of --prompt TEXT, --prompt-ids LIST and --chat MESSAGE (trainer generate --help)");
  if (args.has("--system") && !chat) throw ConfigError("generate: --system goes with --chat MESSAGE");
  if (chat && (bos || print_ids))
    throw ConfigError(std::string("generate: --chat renders the model's chat template, which places its own tokens; ") +
                      (bos ? "--bos" : "--ids") + " is for --prompt");
  validate_sampling_options(sampling);
  const ModelConfig& model = config.model;

  const std::string found_folder = tokenizer_folder(model.tokenizer, model.init_from);
  const std::string tok_folder = found_folder.empty() ? "byte" : found_folder;
  // Bytes are the tokenizer only of byte-level models: a Hugging Face model without tokenizer
  // files would otherwise read a prompt as byte ids it never saw.
  const bool text_needed = prompt.has_value() || chat.has_value() || !print_ids;
  if (text_needed && tok_folder == "byte" && model.tokenizer != "byte" && model.vocab_size != 256)
    throw ConfigError("generate: no tokenizer for this model (model.vocab_size = " + std::to_string(model.vocab_size) +
                      "): model.tokenizer is not set and " +
                      (model.init_from.empty() ? std::string("there is no model.init_from")
                                               : model.init_from + " holds no tokenizer files") +
                      "; set model.tokenizer=FOLDER, or give --prompt-ids and --ids");
  std::unique_ptr<Tokenizer> tokenizer;
  try {
    tokenizer = load_tokenizer(tok_folder);
  } catch (const DataError& e) {
    if (prompt || chat || !print_ids) throw ConfigError(std::string("generate: ") + e.what());
  }
  if (tokenizer && tokenizer->vocab_size() > model.vocab_size)
    throw ConfigError("generate: the tokenizer (" + tok_folder + ") has " + std::to_string(tokenizer->vocab_size()) +
                      " tokens, more than model.vocab_size = " + std::to_string(model.vocab_size) +
                      "; set model.tokenizer to the model's tokenizer");
  std::vector<int32_t> context;
  std::optional<int32_t> chat_stop;  // --chat: the token that ends the assistant's turn
  if (prompt) {
    if (bos) {
      const auto b = tokenizer->bos_id();
      if (!b) throw ConfigError("generate: --bos, but the tokenizer (" + tok_folder + ") has no BOS token");
      context.push_back(*b);
    }
    const std::vector<int32_t> ids = tokenizer->encode(*prompt);
    context.insert(context.end(), ids.begin(), ids.end());
    if (context.empty()) throw ConfigError("generate: the prompt is empty; give some text or --bos");
  } else if (chat) {
    // The conversation so far and the template's generation prompt (the assistant's turn opening).
    try {
      const ChatTemplate tmpl = ChatTemplate::load(tok_folder);
      std::vector<ChatMessage> messages;
      if (args.has("--system")) messages.push_back({"system", args.text("--system")});
      messages.push_back({"user", *chat});
      context = tokenizer->encode(tmpl.render(messages, /*add_generation_prompt=*/true));
      // The reply ends where the template ends a turn: its first special token (<|im_end|>,
      // <|eot_id|>, </s>), which the model learnt to write there.
      for (const int32_t id : tokenizer->encode(tmpl.end_of_turn()))
        if (tokenizer->is_special(id)) {
          chat_stop = id;
          break;
        }
    } catch (const DataError& e) {
      throw ConfigError(std::string("generate: --chat: ") + e.what());
    }
  } else {
    context = *prompt_ids;
  }
  for (int32_t id : context)
    if (id >= model.vocab_size)
      throw ConfigError("generate: prompt token " + std::to_string(id) + " is outside the vocabulary (model.vocab_size = " +
                        std::to_string(model.vocab_size) + ")");
  if (int(context.size()) >= model.max_seq_len)
    throw ConfigError("generate: the prompt has " + std::to_string(context.size()) +
                      " tokens; the model's context (model.max_seq_len) is " + std::to_string(model.max_seq_len));

  // The weights, whole, on this process.
  std::optional<ModelWeights> weights;
  const std::optional<std::string> checkpoint = checkpoint_to_use(config);
  try {
    if (checkpoint) {
      // The checkpoint must be of the configured model (eval and resume check the same).
      const std::vector<std::string> differences =
          model_differences(config, read_checkpoint_meta(*checkpoint), *checkpoint);
      if (!differences.empty()) {
        std::string list;
        for (const std::string& d : differences) list += "\n  " + d;
        throw ConfigError("generate: " + *checkpoint + " holds another model than the config describes:" + list);
      }
      log::note("generate: weights of " + *checkpoint +
                (config.lora.enabled() ? " (LoRA adapters, merged into " +
                                             (model.init_from.empty() ? std::string("the seed's base") : model.init_from) + ")"
                                       : ""));
    } else if (!model.init_from.empty()) {
      log::note("generate: weights from " + model.init_from);
    } else {
      log::note("generate: warning: no checkpoint and no model.init_from: the model is its random initialisation");
    }
    weights.emplace(model, lora_spec(config), config.training.seed, checkpoint);  // verified as a resume verifies it
  } catch (const CheckpointError& e) {
    throw ConfigError(std::string("generate: ") + e.what());
  }
  const ParamTable table = decoder_param_table(model);
  const KvCacheDecoder::WeightSource source = [&](const std::string& name, std::span<const int64_t>, float* out) {
    const std::vector<float> v = weights->tensor(table.at(name));
    std::copy(v.begin(), v.end(), out);
  };
  // The cache holds the positions this generation can reach, not the model's whole context.
  KvCacheDecoder decoder(model, source, int(std::min<int64_t>(model.max_seq_len, int64_t(context.size()) + max_new)));
  weights.reset();  // the decoder holds its own copy of the weights now

  // Generation stops at the tokenizer's end-of-text token and at every token the model folder's
  // generation_config.json names (a chat model's end-of-turn marker among them), as
  // transformers' generate() does.
  std::vector<int32_t> stop;
  if (!ignore_eos) {
    if (tokenizer && tokenizer->eos_id()) stop.push_back(*tokenizer->eos_id());
    if (chat_stop) stop.push_back(*chat_stop);
    try {
      for (const std::string& folder : {model.init_from, found_folder})
        for (const int32_t id : hf_stop_token_ids(folder)) stop.push_back(id);
    } catch (const DataError& e) {
      throw ConfigError(std::string("generate: ") + e.what() + " (--ignore-eos generates without stop tokens)");
    }
  }
  std::vector<int32_t> generated;
  std::vector<float> logits = decoder.forward(context);
  for (int k = 0; k < max_new; ++k) {
    const int32_t next = sample_token(logits, sampling, uint64_t(k));
    generated.push_back(next);
    if (std::find(stop.begin(), stop.end(), next) != stop.end()) break;
    if (decoder.position() >= model.max_seq_len) {
      log::note("generate: stopped after " + std::to_string(generated.size()) +
                 " tokens: the context (model.max_seq_len) is full");
      break;
    }
    if (k + 1 < max_new) logits = decoder.forward(std::span(&next, 1));
  }
  // The whole sequence, as Hugging Face's generate() returns it: the prompt, then what followed;
  // for --chat the reply alone.
  std::vector<int32_t> all = chat ? std::vector<int32_t>{} : context;
  all.insert(all.end(), generated.begin(), generated.end());
  if (print_ids) {
    std::string line;
    for (size_t i = 0; i < all.size(); ++i) {
      if (i) line += ' ';
      line += std::to_string(all[i]);
    }
    std::printf("%s\n", line.c_str());
  } else {
    // Special tokens (the stop token, chat markers) are structure, not text: left out unless
    // asked for, as Hugging Face's decode(skip_special_tokens=True) leaves them.
    if (!show_special) std::erase_if(all, [&](int32_t id) { return tokenizer->is_special(id); });
    const std::string text = tokenizer->decode(all);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

Verb generate_verb() {
  Verb v;
  v.name = "generate";
  v.summary = "continue a prompt with the configured model (key/value cache, one process)";
  v.single_process = true;
  CommandLine& cl = v.command_line;
  cl.verb = "generate";
  cl.synopsis =
      "trainer generate CONFIG.toml [--set section.key=value ...]\n"
      "                        (--prompt TEXT | --prompt-ids 1,2,3 | --chat MESSAGE [--system TEXT])\n"
      "                        [--max-new-tokens N]\n"
      "                        [--temperature T] [--top-k K] [--top-p P] [--seed S] [--bos] [--ignore-eos]\n"
      "                        [--special] [--ids]";
  cl.description =
      "Continues the prompt with the configured model on one process, with a key/value cache. Weights:\n"
      "the checkpoint checkpoint.resume names (or the newest in checkpoint.dir), else model.init_from.";
  cl.takes_config = true;
  cl.options = {
      {"--prompt", ValueKind::kText, "TEXT", "encoded with model.tokenizer (or model.init_from's tokenizer)"},
      {"--prompt-ids", ValueKind::kText, "LIST", "token ids, used verbatim (no BOS added)"},
      {"--chat", ValueKind::kText, "MESSAGE",
       "a user message, rendered with the model's chat template (its tokenizer folder's\n"
       "chat_template.jinja or tokenizer_config.json) and the generation prompt; the reply stops at\n"
       "the template's end-of-turn token and is printed alone"},
      {"--system", ValueKind::kText, "TEXT", "a system message before the --chat message"},
      {"--bos", ValueKind::kFlag, "", "put the tokenizer's BOS token before a --prompt text"},
      {"--max-new-tokens", ValueKind::kInteger, "N", "tokens to generate (default 64); fewer when the context is full",
       {}, 1},
      {"--temperature", ValueKind::kNumber, "T", "0 = greedy; otherwise sample from softmax(logits / T) (default 1)"},
      {"--top-k", ValueKind::kInteger, "K", "sample among the K most likely tokens (default 0: all)", {}, 0},
      {"--top-p", ValueKind::kNumber, "P", "sample within the smallest set of probability >= P (default 1)"},
      {"--seed", ValueKind::kInteger, "S", "seed of the draws (default training.seed)", {}, 0, 9.007199254740992e15},
      {"--ignore-eos", ValueKind::kFlag, "",
       "go on past the stop tokens (end-of-text; generation_config.json's eos_token_id)"},
      {"--special", ValueKind::kFlag, "", "print special tokens (end-of-text, chat markers) in the text"},
      {"--ids", ValueKind::kFlag, "", "print ids (space-separated) instead of text"},
  };
  cl.epilogue =
      "Prints the whole sequence, the prompt and its continuation, on stdout: as text, or with --ids as\n"
      "token ids (the prompt's ids first, as Hugging Face's generate() returns them); with --chat, the\n"
      "reply alone.";
  v.run = run_generate;
  return v;
}

}  // namespace feast
