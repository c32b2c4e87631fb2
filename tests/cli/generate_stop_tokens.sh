#!/usr/bin/env bash
# generate_stop_tokens.sh TRAINER FIXTURES WORK: `trainer generate` stops where transformers'
# generate() stops and prints what its decode(skip_special_tokens=True) prints:
#  1. at an eos_token_id of the model folder's generation_config.json, given as a list or as an
#     id (here the token greedy decoding produces first), unless --ignore-eos;
#  2. a generation_config.json whose eos_token_id is no token id is refused, naming the file;
#  3. special tokens (<|endoftext|>) are left out of the text unless --special.
set -uo pipefail
trainer=$1 fixtures=$2 work=$3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work" && cp -r "$fixtures/gpt2-tiny" "$work/model" || exit 1
gen=("$trainer" generate --set "model.init_from=$work/model" --temperature 0)

all=$("${gen[@]}" --prompt-ids 5,6,7 --max-new-tokens 4 --ignore-eos --ids) || fail "generate: $all"
read -r -a ids <<< "$all"
(( ${#ids[@]} == 7 )) || fail "expected 3 + 4 ids, got: $all"
first=${ids[3]}
for eos in "[1, $first]" "$first"; do
  printf '{"bos_token_id": 317, "eos_token_id": %s}\n' "$eos" > "$work/model/generation_config.json"
  stopped=$("${gen[@]}" --prompt-ids 5,6,7 --max-new-tokens 4 --ids) || fail "generate: $stopped"
  [[ $stopped == "5 6 7 $first" ]] || fail "eos_token_id = $eos: generation did not stop at $first: $stopped"
  went_on=$("${gen[@]}" --prompt-ids 5,6,7 --max-new-tokens 4 --ids --ignore-eos)
  [[ $went_on == "$all" ]] || fail "--ignore-eos did not go on past $first: $went_on"
done
echo "ok: generation stops at generation_config.json's eos_token_id (a list or an id): 5 6 7 $first"

printf '{"eos_token_id": "</s>"}\n' > "$work/model/generation_config.json"
out=$("${gen[@]}" --prompt-ids 5,6,7 --max-new-tokens 4 2>&1) && fail "a string eos_token_id was accepted: $out"
grep -q "generation_config.json: eos_token_id holds \"</s>\", which is no token id" <<< "$out" ||
  fail "message: $out"
echo "ok: a malformed eos_token_id is refused, naming the file"

printf '{"eos_token_id": 317}\n' > "$work/model/generation_config.json"
text=$("${gen[@]}" --prompt 'hello<|endoftext|>world' --max-new-tokens 1 --ignore-eos) || fail "generate: $text"
[[ $text == helloworld* && $text != *'<|endoftext|>'* ]] || fail "a special token was printed: $text"
text=$("${gen[@]}" --prompt 'hello<|endoftext|>world' --max-new-tokens 1 --ignore-eos --special)
[[ $text == 'hello<|endoftext|>world'* ]] || fail "--special did not print the special token: $text"
echo "ok: special tokens are left out of the text unless --special"
