#!/usr/bin/env bash
# tokenize_cli.sh TRAINER: `trainer tokenize` on the Hugging Face fixture tokenizers:
#  1. stdin is one text, kept byte for byte (CRLF, trailing newlines and spaces): the ids are
#     Hugging Face's (from tests/fixtures/hf/tokenizers/cases.json), printed on one line, and
#     --decode gives the exact bytes back, with no newline added;
#  2. --bos puts the tokenizer's BOS id first, and is refused for a tokenizer without one;
#  3. errors (missing folder, invalid UTF-8, bad ids) exit non-zero with one "error:" line on
#     stderr and nothing on stdout; --help prints the usage and exits 0.
set -uo pipefail
trainer=$1
fixtures=$(cd "$(dirname "$0")/../fixtures/hf/tokenizers" && pwd) || exit 1
work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 1. Hugging Face's ids, one line, and an exact round trip.
expect_ids() {  # FOLDER TEXT IDS
  printf '%s' "$2" > "$work/in"
  "$trainer" tokenize --tokenizer "$fixtures/$1" < "$work/in" > "$work/ids" 2> "$work/err" ||
    fail "$1: exit $? for $(printf %q "$2"): $(cat "$work/err")"
  printf '%s\n' "$3" | cmp -s - "$work/ids" || fail "$1: $(printf %q "$2") gave '$(cat "$work/ids")', expected '$3'"
  [[ ! -s $work/err ]] || fail "$1: stderr not empty: $(cat "$work/err")"
}
expect_ids bpe-gpt2 'hello world' '257 75 75 78 267 273 75 67'
expect_ids bpe-gpt2 $'line one\r\nline two\r\n' '75 260 68 266 77 68 201 198 75 260 68 256 86 78 201 198'
expect_ids bpe-gpt2 'a<|endoftext|>b' '64 317 65'
expect_ids bpe-llama3 $'line one\r\nline two\r\n' '75 260 68 334 68 201 198 75 260 68 256 86 78 201 198'
expect_ids sentencepiece 'hello world' '395 260 301 399 269 278 393'
expect_ids sentencepiece '<s>hi</s>' '1 406 403 2'
expect_ids sentencepiece '' ''
echo "ok: ids are Hugging Face's"

for tok in bpe-gpt2 bpe-llama3 sentencepiece byte; do
  folder=$fixtures/$tok
  [[ $tok == byte ]] && folder=byte
  for text in 'hello world' $'trailing newline\n' $'crlf\r\nlines\r\n\r\n' '  spaces around  ' $'\n\nleading newlines' \
              $'caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82\t\n' $'<s> x </s>\n'; do
    printf '%s' "$text" > "$work/in"
    "$trainer" tokenize --tokenizer "$folder" < "$work/in" > "$work/ids" || fail "$tok: encode $(printf %q "$text")"
    [[ $(wc -l < "$work/ids") -eq 1 ]] || fail "$tok: not one line of ids: $(cat "$work/ids")"
    grep -Eq '^[0-9]+( [0-9]+)*$' "$work/ids" || fail "$tok: not ids separated by single spaces: $(cat "$work/ids")"
    "$trainer" tokenize --tokenizer "$folder" --decode < "$work/ids" > "$work/out" || fail "$tok: decode"
    cmp -s "$work/in" "$work/out" || fail "$tok: $(printf %q "$text") came back as $(printf %q "$(cat "$work/out")")"
  done
done
echo "ok: decode gives back every text byte for byte"

# 2. --bos.
for pair in bpe-gpt2:317 bpe-llama3:384 sentencepiece:1; do
  tok=${pair%%:*} bos=${pair##*:}
  plain=$(printf 'hi there' | "$trainer" tokenize --tokenizer "$fixtures/$tok") || fail "$tok: encode"
  with=$(printf 'hi there' | "$trainer" tokenize --tokenizer "$fixtures/$tok" --bos) || fail "$tok: --bos"
  [[ $with == "$bos $plain" ]] || fail "$tok --bos: '$with', expected '$bos $plain'"
done
echo "ok: --bos puts the BOS id first"

# 3. Errors: exit non-zero, one error line on stderr, nothing on stdout.
expect_error() {  # REGEX INPUT ARGS...
  local regex=$1 input=$2
  shift 2
  printf "$input" | "$trainer" tokenize "$@" > "$work/out" 2> "$work/err"
  local code=$?
  [[ $code -ne 0 ]] || fail "tokenize $* succeeded"
  [[ ! -s $work/out ]] || fail "tokenize $*: stdout not empty: $(cat "$work/out")"
  [[ $(grep -c '^error: ' "$work/err") -eq 1 ]] || fail "tokenize $*: not one error line: $(cat "$work/err")"
  grep -Eq -- "$regex" "$work/err" || fail "tokenize $*: message does not match '$regex': $(cat "$work/err")"
}
expect_error "tokenizer $work/missing: no such file or folder" 'x' --tokenizer "$work/missing"
mkdir "$work/empty"
expect_error "tokenizer folder $work/empty has no tokenizer: looked for tokenizer.model" 'x' --tokenizer "$work/empty"
for tok in bpe-gpt2 bpe-llama3 sentencepiece; do
  expect_error 'invalid UTF-8 at byte offset 3' 'abc\377def' --tokenizer "$fixtures/$tok"
  expect_error "'x1' \(input word 2\) is not a token id" '5 x1 7' --tokenizer "$fixtures/$tok" --decode
  expect_error 'cannot decode token id 100000' '5 100000' --tokenizer "$fixtures/$tok" --decode
done
expect_error 'has no beginning-of-sequence token' 'x' --tokenizer byte --bos
expect_error 'tokenizer FOLDER is required' 'x'
expect_error "unknown option '--frobnicate'" 'x' --tokenizer byte --frobnicate
expect_error "unknown option '--decod'; did you mean '--decode'?" 'x' --tokenizer byte --decod
echo "ok: errors exit non-zero with one message"

out=$("$trainer" tokenize --help) || fail "--help exited $?"
[[ $out == usage:* ]] || fail "--help: $out"
echo "ok: --help"
