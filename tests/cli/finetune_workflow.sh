#!/usr/bin/env bash
# finetune_workflow.sh TRAINER MPIEXEC WORK: docs/finetune.md's path, run on the tiny Hugging Face
# fixtures with the shipped configs/finetune-{gpt2,llama}.toml: import, prepare data (plain text
# and prompt/completion), fine-tune with 3D parallelism (tp 2 x pp 2 x dp 2 on 8 ranks),
# evaluate at two layouts (the same val_loss), export, re-import the export (the same val_loss
# again: bit-identical weights), and generate.
set -euo pipefail
trainer=$1 mpiexec=$2 work=$3
fixtures=tests/fixtures/hf
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpi=("$mpiexec" --oversubscribe --bind-to none)
rm -rf "$work" && mkdir -p "$work"

# Instruction data: 60 prompt/completion pairs, some with non-ASCII text.
for i in $(seq 1 60); do
  printf '{"prompt": "Question %d: what is %d plus %d? ", "completion": "It is %d. Très bien! 👍"}\n' \
    "$i" "$i" "$((i % 7))" "$((i + i % 7))"
done > "$work/sft.jsonl"

val_loss() { grep -E '^val_loss=' <<<"$1" | tail -1 | cut -d= -f2; }

for family in gpt2 llama; do
  model=$fixtures/$family-tiny
  config=configs/finetune-$family.toml
  echo "== $family: prepare data"
  "$trainer" prepare-data --quiet --tokenizer "$model" --out "$work/$family-text" --val-fraction 0.2 "$fixtures/corpus.txt"
  "$trainer" prepare-data --quiet --tokenizer "$model" --out "$work/$family-sft" --val-fraction 0.2 "$work/sft.jsonl"
  ls "$work/$family-sft"/train_*.mask "$work/$family-sft"/val_*.mask > /dev/null  # prompt tokens are masked out
  "$trainer" check-data "$work/$family-sft" --tokenizer "$model"

  common=(--set "model.init_from=$model" --set training.seq_len=32 --set parallel.micro_batch_size=1
          --set training.threads=1)
  for data in text sft; do
    echo "== $family: fine-tune on $data with tp 2 x pp 2 x dp 2"
    run=$work/$family-$data-run
    out=$("${mpi[@]}" -np 8 "$trainer" "$config" "${common[@]}" --set "data.train=$work/$family-$data/train_*.bin" \
          --set "data.val=$work/$family-$data/val_*.bin" --set training.steps=6 --set training.batch_size=8 \
          --set training.warmup_steps=1 --set training.lr=1e-3 --set training.min_lr=1e-4 \
          --set training.eval_interval=3 --set training.eval_batches=0 --set checkpoint.interval=6 \
          --set "logging.dir=$run" 2>&1) || { echo "$out"; exit 1; }
    grep -E "^model: weights from $model" <<<"$out"
    grep -E "^done: 6 steps" <<<"$out"
    test -f "$run/checkpoints/step_00000006.h5"
  done
  # Loss masks at every layout: the same losses on one rank as at tp 2 x pp 2 x dp 2.
  one_rank=$("$trainer" "$config" "${common[@]}" --set "data.train=$work/$family-sft/train_*.bin" \
             --set "data.val=$work/$family-sft/val_*.bin" --set training.steps=6 --set training.batch_size=8 \
             --set training.warmup_steps=1 --set training.lr=1e-3 --set training.min_lr=1e-4 \
             --set training.eval_interval=3 --set training.eval_batches=0 --set parallel.tp=1 --set parallel.pp=1 \
             --set "logging.dir=$work/$family-sft-one-rank" 2>&1) || { echo "$one_rank"; exit 1; }
  losses() { grep -o '"loss": *[0-9.e+-]*' "$1/metrics.jsonl" | cut -d: -f2 | tr -d ' '; }
  paste <(losses "$work/$family-sft-run") <(losses "$work/$family-sft-one-rank") |
    awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $2) { print "loss differs at step " NR ": " $1 " vs " $2; bad = 1 } }
         END { exit bad + (NR != 6) }'
  echo "masked training: the same 6 losses on 1 rank and on 8"
  run=$work/$family-sft-run
  eval_args=(--set "data.val=$work/$family-sft/val_*.bin" --set training.eval_batches=0)

  echo "== $family: evaluate the checkpoint at two layouts"
  one=$("$trainer" eval "$config" "${common[@]}" "${eval_args[@]}" --set parallel.tp=1 --set parallel.pp=1 \
        --set "checkpoint.resume=$run/checkpoints")
  grep -E "^eval: weights of the checkpoint at step 6" <<<"$one"
  # The resolved config is named, not printed (it is a hundred lines), and nothing says "starting fresh".
  grep -q '^resolved config: `trainer print-config` with the same arguments prints it' <<<"$one"
  if grep -qE '^\[model\]|starting fresh' <<<"$one"; then echo "eval printed the config or 'starting fresh'"; exit 1; fi
  four=$("${mpi[@]}" -np 4 "$trainer" eval "$config" "${common[@]}" "${eval_args[@]}" --set parallel.tp=2 \
         --set parallel.pp=2 --set "checkpoint.resume=$run/checkpoints")
  a=$(val_loss "$one") b=$(val_loss "$four")
  echo "val_loss on 1 rank $a, at tp 2 x pp 2 $b"
  awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-5 * a) }'

  echo "== $family: export, re-import"
  "$trainer" export "$run/checkpoints" --out "$work/$family-export"
  for f in config.json model.safetensors; do test -f "$work/$family-export/$f"; done
  ls "$work/$family-export"/tokenizer* > /dev/null
  # Files training does not change travel with the export as they are (sampling defaults, chat
  # template, the tokenizer's own files).
  for f in generation_config.json tokenizer_config.json special_tokens_map.json; do
    cmp "$model/$f" "$work/$family-export/$f" || { echo "FAIL: the export's $f differs from $model's"; exit 1; }
  done
  again=$("$trainer" eval "$config" "${common[@]}" "${eval_args[@]}" --set parallel.tp=1 --set parallel.pp=1 \
          --set "model.init_from=$work/$family-export" --set checkpoint.resume=never)
  c=$(val_loss "$again")
  echo "val_loss of the re-imported export $c"
  [[ $c == "$a" ]]

  echo "== $family: generate"
  gen=("$trainer" generate "$config" --set "model.init_from=$work/$family-export" --set checkpoint.resume=never
       --set training.seq_len=32)
  prompt="Question 3: what is 3 plus 3? "
  # Greedy text is the greedy ids (the prompt's, then 8 new ones) decoded: the text and --ids
  # paths agree.
  all_ids=$("${gen[@]}" --prompt "$prompt" --max-new-tokens 8 --temperature 0 --ignore-eos --ids)
  prompt_ids=$(printf '%s' "$prompt" | "$trainer" tokenize --tokenizer "$work/$family-export")
  [[ $all_ids == "$prompt_ids "* ]] || { echo "--ids does not start with the prompt's ids"; exit 1; }
  [[ $(wc -w <<<"$all_ids") -eq $(( $(wc -w <<<"$prompt_ids") + 8 )) ]]
  new_ids=${all_ids#"$prompt_ids "}
  text=$("${gen[@]}" --prompt "$prompt" --max-new-tokens 8 --temperature 0 --ignore-eos --special)
  expected=$(echo "$all_ids" | "$trainer" tokenize --tokenizer "$work/$family-export" --decode)
  [[ $text == "$expected" ]] || { echo "generate's text differs from its ids decoded"; exit 1; }
  sampled=$("${gen[@]}" --prompt "Question 3" --max-new-tokens 8 --temperature 0.7 --top-k 5 --top-p 0.9 --ignore-eos --ids)
  again=$("${gen[@]}" --prompt "Question 3" --max-new-tokens 8 --temperature 0.7 --top-k 5 --top-p 0.9 --ignore-eos --ids)
  [[ $sampled == "$again" ]] || { echo "sampling with the same seed differs"; exit 1; }
  echo "greedy ids: $new_ids; sampled: $sampled"
done
echo "finetune workflow: ok"
