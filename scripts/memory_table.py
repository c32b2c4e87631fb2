#!/usr/bin/env python3
"""Measures what each way of saving memory saves and costs, against what `trainer plan` predicts:
the table of docs/memory.md.

A GPT-2 of 8 layers, n_embd 512, seq_len 512 (byte vocabulary, the synthetic corpus) trained on
4 ranks at dp 4 for a few steps per setting: ZeRO 0, 1, 2 and 3, then ZeRO 1 with selective and
full recomputation and with the optimizer offloaded, then ZeRO 3 with all of it. For each run:
rank 0's memory by part as the run measured it (summary.json's high-water marks), the
activations one micro-batch keeps, the mean step time after the first step, and `trainer plan`'s
prediction of the same layout (`--json`). Prints a Markdown table.

usage: scripts/memory_table.py --trainer build/trainer --corpus DIR [--out DIR] [--steps N]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

MODEL = ["model.arch=gpt2", "model.n_layer=8", "model.n_head=8", "model.n_embd=512", "model.vocab_size=256",
         "model.max_seq_len=512"]
REFERENCE = "ZeRO 1"  # the default: the settings' step times are given against it
SETTINGS = [  # (label, zero stage, recompute, offload)
    ("ZeRO 0", 0, "none", False),
    ("ZeRO 1", 1, "none", False),
    ("ZeRO 2", 2, "none", False),
    ("ZeRO 3", 3, "none", False),
    ("ZeRO 1 + selective recompute", 1, "selective", False),
    ("ZeRO 1 + full recompute", 1, "full", False),
    ("ZeRO 1 + offload", 1, "none", True),
    ("ZeRO 3 + full recompute + offload", 3, "full", True),
]
MIB = 1024.0 * 1024.0
# The demo's config, its model and layout overridden: the rest (optimizer, schedule) as users get it.
BASE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs", "demo.toml")


def settings_overrides(zero, recompute, offload):
    return [f"parallel.zero_stage={zero}", f"training.recompute={recompute}",
            f"parallel.offload_optimizer={'true' if offload else 'false'}"]


def common(corpus, steps):
    return MODEL + [f"data.train={corpus}/train_*.bin", "data.val=\"\"", f"training.steps={steps}",
                    "training.seq_len=512", "training.batch_size=8", "parallel.tp=1", "parallel.pp=1",
                    "parallel.dp=4", "parallel.micro_batch_size=1", "training.threads=1",
                    "training.warmup_steps=1", "checkpoint.interval=0", "training.eval_interval=0"]


def sets(overrides):
    out = []
    for o in overrides:
        out += ["--set", o]
    return out


def run(trainer, corpus, steps, out, label, zero, recompute, offload):
    run_dir = os.path.join(out, label.replace(" ", "_").replace("+", "p"))
    overrides = common(corpus, steps) + settings_overrides(zero, recompute, offload) + [f"logging.dir=\"{run_dir}\""]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    with open(run_dir + ".log", "w") as log:
        subprocess.run(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "4", trainer, BASE] + sets(overrides),
                       stdout=log, stderr=subprocess.STDOUT, env=env, check=True)
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    plan = subprocess.run([trainer, "plan", BASE, "--gpus", "4", "--json", "--threads", "1"] + sets(
        common(corpus, steps) + settings_overrides(zero, recompute, offload)),
        capture_output=True, text=True, check=True, env=dict(env, FEAST_PLAN_CONSTANTS="/nonexistent"))
    want = {"tp": 1, "pp": 1, "dp": 4, "zero_stage": zero, "micro_batch_size": 1, "recompute": recompute,
            "offload_optimizer": offload}
    planned = next(l for l in json.loads(plan.stdout) if all(l.get(k) == v for k, v in want.items()))
    return summary, planned


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--corpus", required=True, help="a prepared corpus (train_*.bin), e.g. build/tests/corpus")
    ap.add_argument("--out", default=None, help="run directories (default: a temporary one)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--only", nargs="+", metavar="TEXT",
                    help="run only the settings whose label contains one of these (ZeRO 1, the step-time "
                         "reference, always runs)")
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="feast-memory-")
    os.makedirs(out, exist_ok=True)
    rows = []
    chosen = [st for st in SETTINGS
              if st[0] == REFERENCE or not a.only or any(text in st[0] for text in a.only)]
    for label, zero, recompute, offload in chosen:
        print(f"running {label} ...", file=sys.stderr, flush=True)
        s, p = run(os.path.abspath(a.trainer), os.path.abspath(a.corpus), a.steps, out, label, zero, recompute, offload)
        # [parameters, gradients, optimizer, activations, workspace, communication, device peak]
        measured = s["memory_high_water_bytes_per_rank"][0][:6]
        pm = p["memory_bytes"]
        planned = [pm[k] for k in ("parameters", "gradients", "optimizer", "activations", "workspace", "communication")]
        rows.append((label, measured, planned, sum(measured), sum(planned), s["activation_bytes_per_micro_batch"][0],
                     s["offloaded_bytes_per_rank"][0], s["ms_per_step"]))
    base_ms = next(r[7] for r in rows if r[0] == REFERENCE)
    print("| setting | parameters | gradients | optimizer | activations (per micro-batch) | workspace | "
          "comm buffers | total measured | total planned | plan error | host (offloaded) | step time | vs ZeRO 1 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, m, p, tm, tp, per_mb, host, ms in rows:
        print(f"| {label} | {m[0] / MIB:.1f} | {m[1] / MIB:.1f} | {m[2] / MIB:.1f} | {m[3] / MIB:.1f} "
              f"({per_mb / MIB:.1f}) | {m[4] / MIB:.1f} | {m[5] / MIB:.1f} | {tm / MIB:.1f} | {tp / MIB:.1f} | "
              f"{100 * (tp - tm) / tm:+.2f}% | {host / MIB:.1f} | {ms / 1000:.2f} s | {100 * (ms / base_ms - 1):+.1f}% |")
    print(f"\nMiB on rank 0; step time: the mean of the steps after the first; runs in {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
