#!/usr/bin/env python3
"""Records what a trainer binary computes over a grid of runs, for checking that a change which
must not change behaviour (a refactor) did not: run it with the old binary and the new one into
two folders, then `diff OLD/record.txt NEW/record.txt` must print nothing.

The grid: both model families; 1 to 8 ranks over every axis (tensor, pipeline and data
parallel); ZeRO 0, 1 and 2; both pipeline schedules; the parameter server, dense and sparse; a
padded vocabulary; uneven stage splits; other rank orders; bf16 gradient reductions; resumes at
another layout. Every run trains a small model for a few steps on the synthetic corpus, with
validation, and saves a checkpoint after its last step. For each run the record holds every
step's loss, gradient norm, learning rate and validation loss (as %.17g, so every bit counts),
and the SHA-256 of every dataset of the final checkpoint (weights, AdamW master weights and
moments: every rank's share of the state) printed as float32 text that reads back exactly. The
synthetic corpus itself is hashed too.

usage: scripts/behaviour_grid.py --trainer build/trainer --out /tmp/grid-old [--only REGEX] [--list]
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

STEPS = 4

MODELS = {
    "gpt2": ["model.arch=gpt2", "model.n_layer=4", "model.n_head=4", "model.n_embd=32",
             "model.vocab_size=256", "model.max_seq_len=32"],
    "llama": ["model.arch=llama", "model.n_layer=4", "model.n_head=8", "model.n_kv_head=4",
              "model.n_embd=32", "model.intermediate_size=48", "model.vocab_size=256",
              "model.max_seq_len=32"],
}


def common(data):
    return [f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin",
            f"training.steps={STEPS}", "training.seq_len=16", "training.batch_size=24",
            "training.warmup_steps=2", "training.lr=3e-3", "training.eval_interval=2",
            "training.eval_batches=1", "training.threads=1", "parallel.micro_batch_size=2",
            "parallel.dp=0", "logging.interval=1", "logging.quiet=true", "logging.tensorboard=false",
            f"checkpoint.interval={STEPS}", "checkpoint.resume=never"]


def layout(tp, pp, dp, zero=None, schedule=None, extra=()):
    s = [f"parallel.tp={tp}", f"parallel.pp={pp}"]
    if zero is not None:
        s.append(f"parallel.zero_stage={zero}")
    if schedule:
        s.append(f"parallel.schedule={schedule}")
    return tp * pp * dp, s + list(extra)


def grid():
    """(name, family, np, --set values) for every plain run."""
    runs = []
    for fam in MODELS:
        layouts = {}
        for zero in (0, 1, 2):
            layouts[f"tp1pp1dp1-z{zero}"] = layout(1, 1, 1, zero)
            layouts[f"dp2-z{zero}"] = layout(1, 1, 2, zero)
            layouts[f"dp3-z{zero}"] = layout(1, 1, 3, zero)
            layouts[f"dp4-z{zero}"] = layout(1, 1, 4, zero)
            layouts[f"tp2dp2-z{zero}"] = layout(2, 1, 2, zero)
            layouts[f"tp2dp3-z{zero}"] = layout(2, 1, 3, zero)
            layouts[f"pp2dp3-z{zero}-1f1b"] = layout(1, 2, 3, zero, "1f1b")
            for sched in ("1f1b", "gpipe"):
                layouts[f"pp2dp2-z{zero}-{sched}"] = layout(1, 2, 2, zero, sched)
                layouts[f"tp2pp2dp2-z{zero}-{sched}"] = layout(2, 2, 2, zero, sched)
        for sched in ("1f1b", "gpipe"):
            layouts[f"pp2-{sched}"] = layout(1, 2, 1, 1, sched)
            layouts[f"pp4-{sched}"] = layout(1, 4, 1, 1, sched)
            layouts[f"tp2pp2-{sched}"] = layout(2, 2, 1, 1, sched)
        layouts["tp2"] = layout(2, 1, 1)
        layouts["tp4"] = layout(4, 1, 1)
        layouts["tp4dp2-z1"] = layout(4, 1, 2, 1)
        layouts["pp3-uneven"] = layout(1, 3, 1, 1, "1f1b")
        layouts["tp2pp3-uneven"] = layout(2, 3, 1, 1, "1f1b")
        layouts["pp2-split31"] = layout(1, 2, 1, 1, "1f1b", ["parallel.stage_layers=[3,1]"])
        layouts["pp2dp2-split13-gpipe"] = layout(1, 2, 2, 2, "gpipe", ["parallel.stage_layers=[1,3]"])
        layouts["tp2-padded-vocab"] = layout(2, 1, 1, 1, None, ["model.vocab_size=300"])
        layouts["tp2pp2dp2-padded-vocab"] = layout(2, 2, 2, 1, "1f1b", ["model.vocab_size=300"])
        layouts["tp2pp2dp2-order-dp-tp-pp"] = layout(2, 2, 2, 1, "1f1b", ["parallel.order=dp-tp-pp"])
        layouts["tp2pp2dp2-order-pp-dp-tp"] = layout(2, 2, 2, 2, "1f1b", ["parallel.order=pp-dp-tp"])
        layouts["dp2-bf16-reduce"] = layout(1, 1, 2, 1, None, ["parallel.grad_reduce_dtype=bf16"])
        layouts["dp2-micro4"] = layout(1, 1, 2, 1, None, ["parallel.micro_batch_size=4"])
        layouts["dp2-no-clip"] = layout(1, 1, 2, 1, None, ["training.grad_clip=0"])
        ps = ["parallel.dp_sync=parameter-server"]
        layouts["ps-dp2"] = layout(1, 1, 2, None, None, ps)
        layouts["ps-dp3"] = layout(1, 1, 3, None, None, ps)
        layouts["ps-tp2dp2"] = layout(2, 1, 2, None, None, ps)
        layouts["ps-pp2dp2"] = layout(1, 2, 2, None, "1f1b", ps)
        layouts["ps-sparse-dp2"] = layout(1, 1, 2, None, None, ps + ["parallel.ps_sparse_embedding=true", "model.tie_embeddings=false"])
        layouts["ps-sparse-tp2dp2"] = layout(2, 1, 2, None, None, ps + ["parallel.ps_sparse_embedding=true", "model.tie_embeddings=false"])
        for name, (np, sets) in layouts.items():
            runs.append((f"{fam}/{name}", fam, np, sets))
    return runs


# (name, family, first part: np and --set values, second part) for resumes at another layout.
def resumes():
    out = []
    pairs = {
        "tp2pp2dp2-to-1": (layout(2, 2, 2, 1, "1f1b"), layout(1, 1, 1, 0)),
        "1-to-tp2pp2dp2-z2": (layout(1, 1, 1, 0), layout(2, 2, 2, 2, "gpipe")),
        "dp4-z2-to-tp2pp2": (layout(1, 1, 4, 2), layout(2, 2, 1, 1, "1f1b")),
        "pp4-to-dp2-z1": (layout(1, 4, 1, 1, "1f1b"), layout(1, 1, 2, 1)),
        "tp4-to-pp2dp3": (layout(4, 1, 1, 1), layout(1, 2, 3, 1, "1f1b")),
    }
    for fam in MODELS:
        for name, (first, second) in pairs.items():
            out.append((f"{fam}/resume-{name}", fam, first, second))
    return out


def run(cmd, log):
    with open(log, "ab") as f:
        f.write(("$ " + " ".join(cmd) + "\n").encode())
        f.flush()
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        sys.exit(f"behaviour_grid: failed ({r.returncode}): {' '.join(cmd)}; see {log}")


def mpirun(np):
    return ["mpirun", "--oversubscribe", "--bind-to", "none", "-x", "OMP_NUM_THREADS=1", "-np", str(np)]


def metrics_lines(name, run_dir):
    lines = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            text = f"{name} step={m['step']} loss={m['loss']:.17g} grad_norm={m['grad_norm']:.17g} lr={m['lr']:.17g}"
            if "val_loss" in m:
                text += f" val_loss={m['val_loss']:.17g}"
            lines.append(text)
    return lines


def checkpoint_lines(name, run_dir):
    ckpt_dir = os.path.join(run_dir, "checkpoints")
    files = sorted(f for f in os.listdir(ckpt_dir) if f.endswith(".h5"))
    path = os.path.join(ckpt_dir, files[-1])
    listing = subprocess.run(["h5dump", "-n", path], check=True, capture_output=True, text=True).stdout
    datasets = re.findall(r"^ dataset\s+(\S+)$", listing, re.M)
    groups = sorted({os.path.dirname(d) for d in datasets})
    lines = []
    for group in groups:
        # The group's datasets only (-A 0: attributes hold paths), float32 printed with 9
        # significant digits, which read back to the same bits; one hash per dataset, so a
        # difference names the tensor.
        text = subprocess.run(["h5dump", "-A", "0", "-m", "%.9g", "-y", "-w", "0", "-g", group, path],
                              check=True, capture_output=True, text=True).stdout
        for m in re.finditer(r'DATASET "([^"]+)" \{(.*?)\n\s*\}\n', text, re.S):
            digest = hashlib.sha256(m.group(2).encode()).hexdigest()[:32]
            lines.append(f"{name} {files[-1]} {group}/{m.group(1)} sha256={digest}")
    if not datasets or len(lines) != len(datasets):
        sys.exit(f"behaviour_grid: read {len(lines)} of the {len(datasets)} datasets of {path}")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="runs whose name matches this regex")
    ap.add_argument("--list", action="store_true", help="list the runs and exit")
    a = ap.parse_args()
    trainer = os.path.abspath(a.trainer)
    runs = [r for r in grid() if re.search(a.only, r[0])]
    res = [r for r in resumes() if re.search(a.only, r[0])]
    if a.list:
        for name, _, np, sets in runs:
            print(f"{name} np={np} {' '.join(sets)}")
        for name, _, first, second in res:
            print(f"{name} np={first[0]}->{second[0]}")
        print(f"{len(runs)} runs and {len(res)} resumes")
        return
    out = os.path.abspath(a.out)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    log = os.path.join(out, "commands.log")
    env_ok = os.environ.get("OMPI_ALLOW_RUN_AS_ROOT")
    if os.geteuid() == 0 and not env_ok:
        os.environ.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    data = os.path.join(out, "data")
    run([trainer, "prepare-data", "--synthetic", "--tokens", "60000", "--out", data], log)
    record = []
    for f in sorted(os.listdir(data)):
        with open(os.path.join(data, f), "rb") as fh:
            record.append(f"data {f} sha256={hashlib.sha256(fh.read()).hexdigest()[:32]}")

    total = len(runs) + len(res)
    for i, (name, fam, np, sets) in enumerate(runs, 1):
        run_dir = os.path.join(out, "runs", name)
        print(f"[{i}/{total}] {name} (np {np})", flush=True)
        args = [f"--set={s}" for s in MODELS[fam] + common(data) + sets + [f"logging.dir={run_dir}"]]
        run(mpirun(np) + [trainer] + args, log)
        record += metrics_lines(name, run_dir) + checkpoint_lines(name, run_dir)
    for i, (name, fam, first, second) in enumerate(res, len(runs) + 1):
        print(f"[{i}/{total}] {name} (np {first[0]} -> {second[0]})", flush=True)
        first_dir = os.path.join(out, "runs", name, "first")
        second_dir = os.path.join(out, "runs", name, "second")
        base = MODELS[fam] + common(data)
        run(mpirun(first[0]) + [trainer] + [f"--set={s}" for s in base + first[1] + [
            f"logging.dir={first_dir}", f"training.exit_at_step={STEPS // 2}"]], log)
        run(mpirun(second[0]) + [trainer] + [f"--set={s}" for s in base + second[1] + [
            f"logging.dir={second_dir}", f"checkpoint.resume={first_dir}/checkpoints"]], log)
        record += metrics_lines(name + "/first", first_dir) + metrics_lines(name + "/second", second_dir)
        record += checkpoint_lines(name, second_dir)
    with open(os.path.join(out, "record.txt"), "w") as f:
        f.write("\n".join(record) + "\n")
    print(f"behaviour_grid: {len(runs)} runs and {len(res)} resumes recorded in {out}/record.txt "
          f"({len(record)} lines)")


if __name__ == "__main__":
    main()
