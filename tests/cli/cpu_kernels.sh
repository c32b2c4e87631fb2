#!/usr/bin/env bash
# cpu_kernels.sh TRAINER MPIEXEC CORPUS WORK (from the source tree): the CPU's BLAS kernels as a
# user sees them.
#  1. `trainer --version` names them, and they use the widest vector extension /proc/cpuinfo
#     reports (Debian 12's OpenBLAS picks SSE3 kernels for a current Xeon when left alone): both
#     OpenBLAS's and, where the build has oneDNN, oneDNN's (the float32 products);
#  2. a user's OPENBLAS_CORETYPE is kept, said to be the user's, and warned of when narrower;
#     FEAST_CPU_GEMM=openblas gives every product to OpenBLAS; any other value is refused;
#  3. under mpirun every rank runs the same kernels: the banner names them, no rank differs, and
#     summary.json records them.
set -uo pipefail
trainer=$1 mpiexec=$2 corpus=$3 work=$4
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work" || exit 1
unset OPENBLAS_CORETYPE FEAST_CPU_GEMM DNNL_MAX_CPU_ISA
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

"$trainer" --version > "$work/version" 2>&1 || fail "--version exited $?: $(cat "$work/version")"
python3 - "$work/version" <<'PY' || fail "the kernels: $(cat "$work/version")"
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"OpenBLAS \S+ (\w+) kernels \((AVX-512|AVX2|AVX|SSE); ([^)]*)\)", text)
assert m, "--version names no OpenBLAS kernels"
flags = set()
for line in open("/proc/cpuinfo"):
    if line.split(":")[0].strip() in ("flags", "Features"):
        flags = set(line.split(":", 1)[1].split())
        break
widest = ("AVX-512" if "avx512f" in flags else "AVX2" if {"avx2", "fma"} <= flags else "AVX" if "avx" in flags
          else "SSE")
assert m[2] == widest, f"{m[1]} kernels use {m[2]}; this CPU has {widest}"
assert "warning" not in text, text
print(f"ok: {m[1]} kernels ({m[2]}; {m[3]})")
d = re.search(r"oneDNN \S+ (\w+) kernels \((AVX-512|AVX2|AVX|SSE)\) for float32 products", text)
if d:
    assert d[2] == widest, f"oneDNN's {d[1]} kernels use {d[2]}; this CPU has {widest}"
    print(f"ok: oneDNN {d[1]} kernels ({d[2]}) for float32 products")
else:
    assert "oneDNN" not in text, text
    print("ok: no oneDNN in this build; OpenBLAS does every product")
PY

FEAST_CPU_GEMM=openblas "$trainer" --version > "$work/openblas" 2>&1 || fail "--version with FEAST_CPU_GEMM=openblas exited $?"
grep -q "OpenBLAS .* kernels" "$work/openblas" && ! grep -q "oneDNN" "$work/openblas" ||
  fail "FEAST_CPU_GEMM=openblas: $(cat "$work/openblas")"
FEAST_CPU_GEMM=mkl "$trainer" --version > "$work/bad" 2>&1 && fail "FEAST_CPU_GEMM=mkl was accepted: $(cat "$work/bad")"
grep -q 'FEAST_CPU_GEMM=mkl: must be "onednn" or "openblas"' "$work/bad" || fail "FEAST_CPU_GEMM=mkl: $(cat "$work/bad")"
echo "ok: FEAST_CPU_GEMM"

OPENBLAS_CORETYPE=PRESCOTT "$trainer" --version > "$work/user" 2>&1 || fail "--version with OPENBLAS_CORETYPE exited $?"
grep -q "Prescott kernels (SSE; OPENBLAS_CORETYPE=PRESCOTT, set by the user)" "$work/user" ||
  fail "the user's OPENBLAS_CORETYPE: $(cat "$work/user")"
if grep -qE '^(flags|Features).* avx( |$)' /proc/cpuinfo; then
  grep -q "warning: this CPU has AVX.*which these kernels do not use: unset OPENBLAS_CORETYPE" "$work/user" ||
    fail "no warning for narrow kernels: $(cat "$work/user")"
fi
echo "ok: the user's OPENBLAS_CORETYPE"

"$mpiexec" --oversubscribe --bind-to none -np 2 "$trainer" configs/demo.toml --set parallel.tp=1 --set parallel.pp=1 \
  --set "data.train=$corpus/train_*.bin" --set "data.val=$corpus/val_*.bin" --set training.steps=2 \
  --set training.eval_interval=0 --set checkpoint.interval=0 --set checkpoint.resume=never \
  --set "logging.dir=$work/run" > "$work/train" 2>&1 || fail "training exited $?: $(tail -5 "$work/train")"
grep -qE "^cpu kernels: (oneDNN|OpenBLAS) .* kernels \(" "$work/train" || fail "the banner names no kernels: $(head -3 "$work/train")"
grep -q "different CPU kernels" "$work/train" && fail "ranks differ: $(grep different "$work/train")"
python3 -c "
import json, sys
s = json.load(open(sys.argv[1]))
assert ' kernels (' in s['cpu_kernels'], s.get('cpu_kernels')
" "$work/run/summary.json" || fail "summary.json: no cpu_kernels"
echo "ok: every rank's kernels, in the banner and summary.json"
