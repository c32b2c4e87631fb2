#!/usr/bin/env bash
# hf_bad_input.sh TRAINER MPIEXEC WORK: Hugging Face import, export, eval and generate on bad
# input. Each case must exit non-zero with one message naming the file or key and the problem;
# under mpirun every rank must exit, with the message printed once.
set -u
trainer=$1 mpiexec=$2 work=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
fixtures=tests/fixtures/hf
rm -rf "$work" && mkdir -p "$work"
status=0
fails() {  # fails REGEX COMMAND...
  local regex=$1 out code
  shift
  out=$("$@" 2>&1); code=$?
  if [[ $code -eq 0 ]]; then
    echo "FAIL (exit 0): $*"; status=1
  elif ! grep -Eq -- "$regex" <<<"$out"; then
    echo "FAIL (message): $*"; echo "  wanted: $regex"; echo "  got: ${out:0:400}"; status=1
  else
    echo "ok: $(grep -E -m1 -- "$regex" <<<"$out" | cut -c1-160)"
  fi
}
on_data=(--set "data.train=$fixtures/finetune-gpt2-tiny.bin" --set training.seq_len=16 --set training.steps=1
         --set "logging.dir=$work/run" --set checkpoint.resume=never --set training.eval_interval=0)

fails "no/such/config.json: cannot read" "$trainer" --set model.init_from=no/such "${on_data[@]}"
fails "model.n_layer = 3 conflicts with model.init_from's config.json, which has \"n_layer\" = 2" \
  "$trainer" --set "model.init_from=$fixtures/gpt2-tiny" --set model.n_layer=3 "${on_data[@]}"

# Weights that do not match their config.json: the tensor and both shapes are named.
mkdir -p "$work/wide" && cp "$fixtures/gpt2-tiny/model.safetensors" "$work/wide/"
sed 's/"n_embd": 32/"n_embd": 64/' "$fixtures/gpt2-tiny/config.json" > "$work/wide/config.json"
fails "tensor transformer.wte.weight has shape \(320, 32\), but the model's config.json and \[model\] need \(320, 64\)" \
  "$trainer" --set "model.init_from=$work/wide" "${on_data[@]}"
# A truncated weights file: the file and what is wrong.
mkdir -p "$work/truncated" && cp "$fixtures/gpt2-tiny/config.json" "$work/truncated/"
head -c 5000 "$fixtures/gpt2-tiny/model.safetensors" > "$work/truncated/model.safetensors"
fails "truncated/model.safetensors: .*(past the end|end of the file|truncated)" \
  "$trainer" --set "model.init_from=$work/truncated" "${on_data[@]}"
# The same at tp 2 x pp 2: every rank stops (no hang), the message once.
out=$(timeout 120 "$mpiexec" --oversubscribe --bind-to none -np 4 "$trainer" --set "model.init_from=$work/truncated" \
      --set parallel.tp=2 --set parallel.pp=2 "${on_data[@]}" 2>&1); code=$?
count=$(grep -c "runs past the end of the file" <<<"$out")
if [[ $code -eq 0 || $code -eq 124 || $count -ne 1 ]]; then
  echo "FAIL (mpirun -np 4): exit $code, message $count times: ${out:0:400}"; status=1
else
  echo "ok (mpirun -np 4, exit $code): the truncated file named once"
fi
# No weights at all.
mkdir -p "$work/noweights" && cp "$fixtures/gpt2-tiny/config.json" "$work/noweights/"
fails "noweights.*model.safetensors" "$trainer" --set "model.init_from=$work/noweights" "${on_data[@]}"
# A shard of the sharded Llama missing.
mkdir -p "$work/shard" && cp "$fixtures/llama-tiny/"* "$work/shard/" && rm "$work/shard/model-00002-of-00003.safetensors"
fails "model-00002-of-00003.safetensors" "$trainer" --set "model.init_from=$work/shard" \
  --set "data.train=$fixtures/finetune-llama-tiny.bin" --set training.seq_len=16 --set training.steps=1 \
  --set "logging.dir=$work/run2" --set checkpoint.resume=never --set training.eval_interval=0

# eval without validation data; export of nothing; generate with bad flags.
fails "data.val is not set" "$trainer" eval --set "model.init_from=$fixtures/gpt2-tiny"
fails "export: no/such.h5: no such checkpoint file or directory" "$trainer" export no/such.h5 --out "$work/x"
fails "export: --out FOLDER is required" "$trainer" export no/such.h5
fails "export: --dtype: expected float32, fp32, bfloat16, bf16, float16 or fp16, got 'int8'" "$trainer" export no/such.h5 --out "$work/x" --dtype int8
fails "give exactly one of --prompt TEXT, --prompt-ids LIST and --chat MESSAGE" "$trainer" generate --set "model.init_from=$fixtures/gpt2-tiny"
fails "--temperature" "$trainer" generate --set "model.init_from=$fixtures/gpt2-tiny" --prompt hi --temperature -1
fails "prompt token 999 is outside the vocabulary \(model.vocab_size = 320\)" \
  "$trainer" generate --set "model.init_from=$fixtures/gpt2-tiny" --prompt-ids 1,999
mkdir -p "$work/notok" && cp "$fixtures/llama-tiny/"*.json "$fixtures/llama-tiny/"*.safetensors "$work/notok/"
fails "no tokenizer for this model \(model.vocab_size = 1000\).*holds no tokenizer files; set model.tokenizer=FOLDER" \
  "$trainer" generate --set "model.init_from=$work/notok" --prompt hi
fails "the tokenizer .* has 1000 tokens, more than model.vocab_size = 320" \
  "$trainer" generate --set "model.init_from=$fixtures/gpt2-tiny" --set "model.tokenizer=$fixtures/llama-tiny" --prompt hi
# LoRA adapters (lora.init_from) that do not fit: another rank, another model's, a folder that is
# not PEFT's; and --merge-lora on a whole model's checkpoint.
lora=(--set "model.init_from=$fixtures/gpt2-tiny" --set lora.rank=4 --set lora.alpha=8
      --set 'lora.targets=["qkv","proj","fc","fc_proj"]' "${on_data[@]}")
fails "adapter_config.json: the adapter has rank r = 4, lora.rank is 8; set lora.rank = 4 to continue it" \
  "$trainer" "${lora[@]}" --set lora.rank=8 --set "lora.init_from=$fixtures/lora/gpt2-tiny-init"
fails "no tensor base_model.model.transformer.h.0.attn.c_attn.lora_A.weight.*lora.init_from at --set" \
  "$trainer" "${lora[@]}" --set "lora.init_from=$fixtures/lora/llama-tiny-init"
fails "gpt2-tiny: not a PEFT adapter folder" "$trainer" "${lora[@]}" --set "lora.init_from=$fixtures/gpt2-tiny"
# A LoRA checkpoint: eval reads its adapters over the base they were trained on; a resume over
# another base of the same shapes (gpt2-hub) is refused, naming both fingerprints.
"$trainer" "${lora[@]}" --set checkpoint.interval=1 --set "logging.dir=$work/lora" >/dev/null 2>&1
out=$("$trainer" eval "${lora[@]}" --set "data.val=$fixtures/finetune-gpt2-tiny.bin" \
      --set "checkpoint.dir=$work/lora/checkpoints" --set checkpoint.resume=auto 2>&1); code=$?
if [[ $code -ne 0 ]] || ! grep -q "eval: weights of the checkpoint at step 1" <<<"$out"; then
  echo "FAIL (eval of a LoRA checkpoint): exit $code: ${out:0:400}"; status=1
else
  echo "ok: eval of a LoRA checkpoint"
fi
fails "the LoRA base: the adapters were trained on weights of crc32 [0-9a-f]{8}.*gpt2-hub\) holds crc32" \
  "$trainer" "${lora[@]}" --set "model.init_from=$fixtures/gpt2-hub" --set "logging.dir=$work/lora2" \
  --set "checkpoint.resume=$work/lora/checkpoints" --set training.steps=2
"$trainer" "${on_data[@]}" --set "model.init_from=$fixtures/gpt2-tiny" --set checkpoint.interval=1 \
  --set "logging.dir=$work/whole" >/dev/null 2>&1
fails "export: --merge-lora merges LoRA adapters, but .* holds a whole model" \
  "$trainer" export "$work/whole/checkpoints" --out "$work/merged" --merge-lora

exit $status
