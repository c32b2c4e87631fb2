#!/usr/bin/env bash
# A checkpoint is a plain HDF5 file other tools read: h5dump -H lists its datasets and root
# attributes, h5dump prints the step; `trainer inspect` reports the step, the saved layout and
# every tensor verified; after a byte of a tensor is flipped it names that tensor and exits 1.
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
