"""What a sweep records: reading a run's JSON files back, and results.csv.

Owns the row of a point (its identifying columns, summary.json's scalars, the time split and
memory flattened, compute_6ND, the plan_* columns), the column order of results.csv (written
whole and atomically; cli.py rewrites it after every run) and the short description of a row in
the progress lines.
"""

import csv
import json
import os

# The summary.json keys in the order the CSV shows them (others follow, sorted).
SUMMARY_ORDER = [
    "ended", "world_size", "tp", "pp", "dp", "zero_stage", "dp_sync", "schedule", "micro_batch_size",
    "micro_batches", "seq_len", "tokens_per_step", "arch", "n_layer", "n_head", "n_embd", "vocab_size",
    "parameters", "flops_per_token", "first_step", "steps", "measured_steps", "tokens_seen", "train_seconds",
    "final_loss", "final_val_loss", "compute_6ND", "tokens_per_s", "ms_per_step", "compute_s", "tp_comm_s",
    "pp_idle_s", "dp_comm_s", "optimizer_s", "data_s", "other_s", "dp_reduce_s", "dp_reduce_exposed_s",
    "pp_idle_fraction", "pp_idle_formula",
    "efficiency", "mfu", "peak_tflops_per_rank", "peak_source", "memory_parameters_max", "memory_gradients_max",
    "memory_optimizer_max", "memory_activations_max", "memory_workspace_max", "memory_communication_max", "memory_total_max"]
# The parts of summary.json's memory_bytes_per_rank, in its order (report.py reads them too).
MEMORY_PARTS = ["parameters", "gradients", "optimizer", "activations", "workspace", "communication"]


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def row_of(sweep, point, status, error, seconds, plan):
    row = {"run": point.name, "status": status, "error": error, **point.columns}
    run_dir = sweep.out / "runs" / point.name
    summary = read_json(run_dir / "summary.json") if status == "finished" else None
    if summary:
        for k, v in summary.items():
            if k in ("time_split", "dp_reductions") and isinstance(v, dict):
                row.update(v)
            elif k == "memory_bytes_per_rank" and isinstance(v, list) and v:
                for i, part in enumerate(MEMORY_PARTS):  # a run of an older trainer reports fewer parts
                    row[f"memory_{part}_max"] = max(r[i] if i < len(r) else 0.0 for r in v)
                row["memory_total_max"] = max(sum(r) for r in v)
            elif not isinstance(v, (dict, list)):
                row[k] = v
        if summary.get("parameters") and summary.get("tokens_seen"):
            row["compute_6ND"] = 6.0 * summary["parameters"] * summary["tokens_seen"]
    row["seconds"] = round(seconds, 2) if seconds is not None else ""
    row["run_dir"] = os.path.relpath(run_dir, sweep.out)
    if plan:
        row.update(plan)
    return row


def write_csv(path, rows):
    head = ["run", "status", "error", "np"]
    ident = list(dict.fromkeys(k for r in rows for k in r if k not in head and (
        k in ("layout", "model", "budget", "parameters_expected") or "." in k)))
    rest = set(k for r in rows for k in r) - set(head) - set(ident)
    summary = [k for k in SUMMARY_ORDER if k in rest]
    plan = sorted(k for k in rest if k.startswith("plan_"))
    tail = [k for k in ("seconds", "run_dir") if k in rest]
    other = sorted(rest - set(summary) - set(plan) - set(tail))
    columns = head + ident + summary + other + plan + tail
    tmp = path.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k, "")) for k in columns})
    os.replace(tmp, path)


def describe(row):
    bits = []
    if row.get("tokens_per_s") not in (None, ""):
        bits.append(f"{float(row['tokens_per_s']):.0f} tok/s")
    if row.get("efficiency") not in (None, ""):
        bits.append(f"E {float(row['efficiency']):.2f}")
    if row.get("final_val_loss") not in (None, ""):
        bits.append(f"val loss {float(row['final_val_loss']):.4f}")
    elif row.get("final_loss") not in (None, ""):
        bits.append(f"loss {float(row['final_loss']):.4f}")
    return ", ".join(bits)
