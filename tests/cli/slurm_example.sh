#!/usr/bin/env bash
# slurm_example.sh TRAINER MPIEXEC SOURCE_DIR CORPUS WORK: configs/slurm/train.sbatch as far as one
# machine without Slurm allows. Its #SBATCH lines use options sbatch has; run with stand-ins for
# srun (mpirun, 2 ranks), scancel and scontrol, the signal Slurm sends before the time limit
# (SIGUSR1 to the batch script) reaches every rank, which save a checkpoint and exit 75, and the
# script requeues the job and exits 75.
set -u
trainer=$1 mpiexec=$2 src=$3 corpus=$4 work=$5
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
rm -rf "$work" && mkdir -p "$work/bin"
script=$src/configs/slurm/train.sbatch
status=0
fail() { echo "FAIL: $*"; status=1; }

bash -n "$script" || fail "syntax"
known="job-name nodes ntasks-per-node gpus-per-node cpus-per-task time signal requeue output"
while read -r option; do
  [[ " $known " == *" $option "* ]] || fail "#SBATCH --$option is not an option this test knows sbatch has"
done < <(sed -n 's/^#SBATCH --\([a-z-]*\).*/\1/p' "$script")
grep -q '^#SBATCH --signal=B:USR1@' "$script" || fail "no --signal=B:USR1 (the batch script must get the signal)"

# Stand-ins: srun runs the ranks through mpirun (its own options dropped) and records its pid;
# scancel --signal=USR1 signals that mpirun, which forwards SIGUSR1 to the ranks.
cat >"$work/bin/srun" <<SH
#!/usr/bin/env bash
while [[ \$1 == --* ]]; do shift; done
echo \$\$ >"$work/srun.pid"
exec "$mpiexec" --oversubscribe --bind-to none -np 2 "\$@"
SH
cat >"$work/bin/scancel" <<SH
#!/usr/bin/env bash
echo "scancel \$*" >>"$work/slurm.log"
kill -USR1 "\$(cat "$work/srun.pid")"
SH
cat >"$work/bin/scontrol" <<SH
#!/usr/bin/env bash
echo "scontrol \$*" >>"$work/slurm.log"
SH
chmod +x "$work"/bin/*

cd "$src" || exit 1
PATH=$work/bin:$PATH SLURM_JOB_ID=4242 FEAST_TRAINER=$trainer bash "$script" configs/demo.toml \
  --set training.device=cpu --set parallel.tp=2 --set parallel.pp=1 --set training.steps=100000 \
  --set training.eval_interval=0 --set data.train="$corpus/train_*.bin" --set data.val="$corpus/val_*.bin" \
  --set logging.dir="$work/run" --set checkpoint.resume=never >"$work/job.out" 2>&1 &
job=$!
for _ in $(seq 600); do  # until the job has trained a few steps (at most 60 s)
  [[ -f $work/run/metrics.jsonl && $(wc -l <"$work/run/metrics.jsonl") -ge 3 ]] && break
  sleep 0.1
done
kill -USR1 "$job"  # what Slurm does at the --signal time
wait "$job"
code=$?
cat "$work/job.out"
[[ $code -eq 75 ]] || fail "the batch script exited $code, expected 75 (stopped after saving)"
grep -q "scancel --signal=USR1 4242" "$work/slurm.log" || fail "the signal was not passed to the ranks"
grep -q "scontrol requeue 4242" "$work/slurm.log" || fail "the job was not requeued"
ls "$work"/run/checkpoints/step_*.h5 >/dev/null 2>&1 || fail "no checkpoint was saved before exiting"
exit $status
