#!/usr/bin/env bash
# A checkpoint is a plain HDF5 file other tools read: h5dump -H lists its datasets and root
# attributes, h5dump prints the step; `trainer inspect` reports the step, the saved layout and
# every tensor verified; after a byte of a tensor is flipped it names that tensor and exits 1, and
# export and generate refuse the file as a resume does (though they never use that tensor). A
# truncated file named as checkpoint.resume is said to be no readable checkpoint, with the fix.
source "$(dirname "$0")/common.sh"
"${mpi8[@]}" "$trainer" "${base[@]}" --set training.steps=5 --set logging.dir="$work/run" > "$work/run.log" 2>&1 ||
  fail "the run failed: $(tail -5 "$work/run.log")"
file=$work/run/checkpoints/step_00000005.h5
h5dump -H "$file" > "$work/header.txt" || fail "h5dump -H cannot read $file"
for want in 'DATASET "wte.weight"' 'GROUP "exp_avg_sq"' 'ATTRIBUTE "tokens_seen"' 'ATTRIBUTE "crc32"' 'H5T_IEEE_F32LE' \
            'DATASPACE  SIMPLE { ( 256, 128 ) / ( 256, 128 ) }'; do
  grep -qF "$want" "$work/header.txt" || fail "h5dump -H shows no $want"
done
h5dump -a /step "$file" | grep -q "(0): 5" || fail "h5dump does not show step 5"
"$trainer" inspect "$file" > "$work/inspect.txt" || fail "inspect failed on a good checkpoint"
grep -q "step 5, tokens seen 10240" "$work/inspect.txt" || fail "inspect: no step line"
grep -q "saved at layout: tp2 pp2 dp2 zero1" "$work/inspect.txt" || fail "inspect: no layout line"
grep -q "checksums: all 208 tensors verified" "$work/inspect.txt" || fail "inspect: not all verified"
grep -q '^\[model\]' "$work/inspect.txt" || fail "inspect: no config"

# Flip one byte inside optim/exp_avg/layers.2.mlp.fc.weight (h5dump -p gives the data's offset).
tensor=/optim/exp_avg/layers.2.mlp.fc.weight
address=$(h5dump -p -H -d $tensor "$file" | sed -n 's/.*OFFSET \([0-9]*\).*/\1/p' | head -1)
[[ -n $address ]] || fail "h5dump -p shows no storage offset for $tensor"
cp "$file" "$work/bad.h5"
at=$((address + 100))
byte=$(od -An -tu1 -j $at -N1 "$file" | tr -d ' ')
printf "\\x$(printf %02x $((byte ^ 255)))" | dd of="$work/bad.h5" bs=1 seek=$at conv=notrunc status=none
"$trainer" inspect "$work/bad.h5" --no-config > "$work/bad.txt" && fail "inspect passed a corrupt checkpoint"
grep -q "optim/exp_avg/layers.2.mlp.fc.weight .*CHECKSUM MISMATCH" "$work/bad.txt" || fail "inspect did not name the tensor: $(grep -v ' ok$' "$work/bad.txt")"
echo "h5dump reads it; inspect verifies it and names a corrupt tensor"

"$trainer" export "$file" --out "$work/export" > "$work/export.txt" 2>&1 || fail "export failed: $(tail -3 "$work/export.txt")"
"$trainer" export "$work/bad.h5" --out "$work/export-bad" > "$work/export-bad.txt" 2>&1 && fail "export passed a corrupt checkpoint"
grep -qF "$work/bad.h5: checksum mismatch in dataset ${tensor#/}" "$work/export-bad.txt" ||
  fail "export did not name the tensor: $(cat "$work/export-bad.txt")"
[[ ! -e $work/export-bad/model.safetensors ]] || fail "export wrote the weights of a corrupt checkpoint"
generate=("$trainer" generate "${base[@]}" --prompt-ids 1,2,3 --max-new-tokens 2 --ids)
"${generate[@]}" --set "checkpoint.resume=$file" > "$work/generate.txt" 2>&1 || fail "generate failed: $(tail -3 "$work/generate.txt")"
"${generate[@]}" --set "checkpoint.resume=$work/bad.h5" > "$work/generate-bad.txt" 2>&1 && fail "generate used a corrupt checkpoint"
grep -qF "$work/bad.h5: checksum mismatch in dataset ${tensor#/}" "$work/generate-bad.txt" ||
  fail "generate did not name the tensor: $(cat "$work/generate-bad.txt")"
echo "export and generate refuse it too"

head -c 100000 "$file" > "$work/short.h5"
"$trainer" "${base[@]}" --set parallel.tp=1 --set parallel.pp=1 --set "checkpoint.resume=$work/short.h5" \
  --set "logging.dir=$work/short-run" > "$work/short.txt" 2>&1 && fail "a run resumed a truncated checkpoint"
grep -qF "$work/short.h5 is not a readable feast checkpoint (truncated or corrupt HDF5 file: truncated file: eof = 100000" \
  "$work/short.txt" || fail "no plain statement for a truncated file: $(cat "$work/short.txt")"
grep -qF "point it at another checkpoint (step_*.h5), or at its directory \"$work\"" "$work/short.txt" ||
  fail "no fix for a truncated file: $(cat "$work/short.txt")"
echo "a truncated checkpoint.resume file is named as no readable checkpoint, with the fix"
