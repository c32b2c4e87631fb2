// `trainer tokenize --tokenizer FOLDER [--bos] [--decode]`: text on stdin to ids on stdout, or
// ids back to text; a way to check a tokenizer against Hugging Face's from a shell.
#pragma once

#include <string>
#include <vector>

namespace feast {

// args: everything after the verb. Returns the process exit code; throws feast::Error on bad
// flags, a missing or malformed tokenizer, invalid UTF-8 or ids outside the vocabulary.
int tokenize_command(const std::vector<std::string>& args);

}  // namespace feast
