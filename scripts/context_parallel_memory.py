#!/usr/bin/env python3
"""The longest sequence that fits a fixed memory per rank, with context parallelism of 1, 2 and 4.

For each cp degree, a binary search over training.seq_len (multiples of --step) for the largest
whose busiest rank's memory, as the trainer itself allocates and reports it at start (every
buffer is allocated before the first step: a step never allocates), stays within --budget-mib.
Each probe starts the real trainer under mpirun with cp ranks, reads its start-up memory table
and stops it there. One micro-batch of one sequence, no tensor or pipeline parallelism, so the
sequence is all that grows.

    scripts/context_parallel_memory.py [--config configs/llama-demo.toml] [--budget-mib 128]
"""
import argparse
import os
import re
import signal
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def busiest_rank_mib(args, cp, seq_len):
    """Total MiB of the busiest rank at seq_len, or None if the run refused the layout."""
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(cp), args.trainer, args.config,
           "--set", "parallel.tp=1", "--set", "parallel.pp=1", "--set", "parallel.dp=1",
           "--set", f"parallel.cp={cp}", "--set", "parallel.micro_batch_size=1", "--set", "training.batch_size=1",
           "--set", "training.steps=1", "--set", "training.eval_interval=0",
           "--set", f"training.seq_len={seq_len}", "--set", f"model.max_seq_len={seq_len}",
           "--set", f"data.train={args.data}", "--set", 'data.val=""', "--set", "logging.tensorboard=false",
           "--set", f"logging.dir={args.work}/cp{cp}_{seq_len}", "--set", "checkpoint.resume=never"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                         start_new_session=True)
    totals, in_table, log = [], False, []
    for line in p.stdout:
        log.append(line)
        if line.startswith("memory per rank (MiB)"):
            in_table = True
            continue
        if in_table:
            m = re.match(r"\s*[\d,-]+ \|.*\|\s*([\d.]+)\s*$", line)
            if not m:
                break
            totals.append(float(m.group(1)))
    os.killpg(p.pid, signal.SIGTERM)
    p.wait()
    if not totals:
        sys.stderr.write(f"cp {cp} seq_len {seq_len}: no memory table\n" + "".join(log[-5:]))
        return None
    return max(totals)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=os.path.join(ROOT, "configs/llama-demo.toml"))
    ap.add_argument("--trainer", default=os.path.join(ROOT, "build/trainer"))
    ap.add_argument("--data", default=os.path.join(ROOT, "build/tests/corpus/train_*.bin"))
    ap.add_argument("--budget-mib", type=float, default=128)
    ap.add_argument("--step", type=int, default=256, help="seq_len granularity (2 cp must divide it)")
    ap.add_argument("--max", type=int, default=1 << 17)
    ap.add_argument("--cps", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--work", default="/tmp/feast_cp_memory")
    args = ap.parse_args()
    print(f"{args.config}: the largest seq_len whose busiest rank needs at most {args.budget_mib:g} MiB")
    print(f"{'cp':>3} {'seq_len':>8} {'MiB':>8} {'next step MiB':>14}")
    for cp in args.cps:
        lo, hi = 0, args.max // args.step  # in units of step: lo fits (0 = nothing yet), hi + 1 does not
        probed = {}  # units -> the busiest rank's MiB (None: the run failed); each launched once

        def mib_at(units):
            if units not in probed:
                probed[units] = busiest_rank_mib(args, cp, units * args.step)
            return probed[units]

        while lo < hi:
            mid = (lo + hi + 1) // 2
            mib = mib_at(mid)
            if mib is not None and mib <= args.budget_mib:
                lo = mid
            else:
                hi = mid - 1
        fits, above = probed.get(lo), mib_at(lo + 1)
        print(f"{cp:>3} {lo * args.step:>8} {fits or float('nan'):>8.1f} {above or float('nan'):>14.1f}", flush=True)


if __name__ == "__main__":
    main()
