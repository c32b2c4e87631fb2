#!/usr/bin/env bash
# generate_chat.sh TRAINER FIXTURES WORK: `trainer generate --chat` renders the model's chat
# template (here Llama 3's, on the llama3-tiny fixture) with the generation prompt, and replies
# as a --prompt of that rendered text would continue: the same tokens, printed without the
# prompt; --system adds a system turn; a model whose tokenizer has no template is refused, as are
# --system without --chat and --chat with --prompt.
set -uo pipefail
trainer=$1 fixtures=$2 work=$3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work" && cp -r "$fixtures/llama3-tiny" "$work/model" || exit 1
gen=("$trainer" generate --set "model.init_from=$work/model" --temperature 0 --max-new-tokens 6 --special --ignore-eos)

out=$("${gen[@]}" --chat "hi" 2>&1) && fail "a model without a chat template answered --chat: $out"
grep -q "no chat template" <<< "$out" || fail "message: $out"
echo "ok: --chat on a model without a chat template is refused"

# Llama 3 Instruct's template (tests/fixtures/hf/make_chat_fixtures.py), in the model's folder.
cp "$fixtures/chat/llama3/tokenizer_config.json" "$work/model/tokenizer_config.json" || exit 1
reply=$("${gen[@]}" --chat "hi") || fail "generate --chat: $reply"
rendered=$'<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n'
whole=$("${gen[@]}" --prompt "$rendered") || fail "generate --prompt: $whole"
[[ $whole == "$rendered$reply" ]] || fail "--chat replied '$reply', the rendered prompt continues as '${whole#"$rendered"}'"
echo "ok: --chat replies as the rendered template continues: '$reply'"

with_system=$("${gen[@]}" --chat "hi" --system "Be brief.") || fail "generate --chat --system: $with_system"
rendered=$'<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n'
whole=$("${gen[@]}" --prompt "$rendered") || fail "generate --prompt: $whole"
[[ $whole == "$rendered$with_system" ]] || fail "--system: '$with_system' against '${whole#"$rendered"}'"
echo "ok: --system adds a system turn"

out=$("${gen[@]}" --prompt "x" --system "y" 2>&1) && fail "--system without --chat was accepted"
grep -q -- "--system goes with --chat" <<< "$out" || fail "message: $out"
out=$("${gen[@]}" --prompt "x" --chat "y" 2>&1) && fail "--prompt with --chat was accepted"
grep -q "exactly one of --prompt TEXT, --prompt-ids LIST and --chat MESSAGE" <<< "$out" || fail "message: $out"
echo "ok: --system without --chat, and two prompts, are refused"
