// `trainer tokenize`: the tokenizer of a model folder on stdin/stdout. Stdout carries only the
// result (ids, or the decoded text byte for byte) so scripts can compare it; errors are thrown
// for main to print on stderr.
#include <cctype>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include "cli/verb.h"
#include "core/error.h"
#include "core/log.h"
#include "data/tokenizer/tokenizer.h"

namespace feast {

namespace {

std::string read_stdin() {
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) text.append(buf, n);
  if (std::ferror(stdin)) throw Error("tokenize: cannot read stdin");
  return text;
}

void write_stdout(const std::string& s) {
  if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size() || std::fflush(stdout) != 0)
    throw Error("tokenize: cannot write stdout");
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (true) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i == text.size()) break;
    size_t end = i;
    while (end < text.size() && !std::isspace(static_cast<unsigned char>(text[end]))) ++end;
    const std::string word = text.substr(i, end - i);
    try {
      size_t used = 0;
      const long long v = std::stoll(word, &used);
      if (used != word.size() || v < INT32_MIN || v > INT32_MAX) throw std::out_of_range(word);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      throw DataError("tokenize --decode: '" + word.substr(0, 40) + "' (input word " +
                      std::to_string(ids.size() + 1) + ") is not a token id; give integers separated by spaces");
    }
    i = end;
  }
  return ids;
}

int run_tokenize(const Args& args, const VerbContext&) {
  const std::string folder = args.text("--tokenizer");
  const bool bos = args.flag("--bos"), decode = args.flag("--decode");
  if (!args.has("--tokenizer"))
    throw ConfigError("tokenize: --tokenizer FOLDER is required (trainer tokenize --help)");
  if (bos && decode) throw ConfigError("tokenize: --bos applies to encoding, not to --decode");
  const auto tokenizer = load_tokenizer(folder);
  const std::string input = read_stdin();
  if (decode) {
    write_stdout(tokenizer->decode(parse_ids(input)));
    return 0;
  }
  std::vector<int32_t> ids;
  if (bos) {
    const auto id = tokenizer->bos_id();
    if (!id) throw DataError("tokenize --bos: tokenizer " + folder + " (" + tokenizer->kind() +
                      ") has no beginning-of-sequence token; leave out --bos");
    ids.push_back(*id);
  }
  const std::vector<int32_t> text_ids = tokenizer->encode(input);
  ids.insert(ids.end(), text_ids.begin(), text_ids.end());
  std::string out;
  out.reserve(ids.size() * 6 + 1);
  for (size_t k = 0; k < ids.size(); ++k) {
    if (k) out += ' ';
    out += std::to_string(ids[k]);
  }
  out += '\n';
  write_stdout(out);
  return 0;
}

}  // namespace

Verb tokenize_verb() {
  Verb v;
  v.name = "tokenize";
  v.summary = "text on stdin -> token ids on stdout, or back with --decode";
  v.single_process = true;
  CommandLine& cl = v.command_line;
  cl.verb = "tokenize";
  cl.synopsis =
      "trainer tokenize --tokenizer FOLDER [--bos] < text        prints the ids\n"
      "       trainer tokenize --tokenizer FOLDER --decode < ids        prints the text";
  cl.description =
      "Encoding reads all of stdin as one UTF-8 text (newlines, CR and trailing spaces included) and\n"
      "prints its ids on one line, separated by spaces. Special tokens written in the text (such as\n"
      "<|endoftext|> or <s>) become their ids, as Hugging Face's encode(text, add_special_tokens=False).";
  cl.options = {
      {"--tokenizer", ValueKind::kText, "FOLDER",
       "a Hugging Face model folder (tokenizer.json, tokenizer.model or vocab.json +\n"
       "merges.txt), one of those files, or \"byte\""},
      {"--bos", ValueKind::kFlag, "", "put the tokenizer's beginning-of-sequence id first"},
      {"--decode", ValueKind::kFlag, "", "read whitespace-separated ids and print their text exactly (no newline added)"},
  };
  v.run = run_tokenize;
  return v;
}

}  // namespace feast
