"""The table of runs: which columns each kind of report shows, and each cell as text.

Owns the columns of a systems, scaling-law or other table, a cell's value from a run (memory in
MiB, rounded rates and losses) and the formatting of numbers; page.py writes the tables out.
"""

import math

from .runs import MEMORY_PARTS, MIB, rank_memory


def fmt(v, digits=4):
    """A cell's number as text, one format throughout: thousands separated by commas from 1,000
    up (9,521 beside 18,892, never 9521), a power of ten beyond 10^15 and below 10^-3, else
    `digits` significant digits."""
    if v is None or v == "":
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        v = float(v)
    if isinstance(v, float):
        if not math.isfinite(v):  # a diverged run's loss, say: int() cannot take it
            return str(v)
        if v != 0 and not 1e-3 <= abs(v) < 1e15:
            return f"{v:.3g}"
        text = f"{v:.{digits}g}"
        return f"{v:,.0f}" if abs(float(text)) >= 1000 else text
    return str(v)


def table_columns(kind, runs):
    if kind == "systems":
        cols = [("run", "run"), ("np", "ranks"), ("micro_batches", "m"), ("tokens_per_s", "tokens/s"),
                ("ms_per_step", "ms/step"), ("efficiency", "E"), ("pp_idle_fraction", "idle"),
                ("pp_idle_formula", "(p-1)/(m+p-1)"), ("memory_total_max", "MiB/rank")]
        if any(r.get("plan_tokens_per_s") for r in runs):
            cols += [("plan_tokens_per_s", "planned tokens/s"), ("plan_efficiency", "planned E"),
                     ("plan_memory_sum", "planned MiB")]
    elif kind == "scaling-law":
        cols = [("run", "run"), ("model", "model"), ("parameters", "N"), ("budget", "budget C"),
                ("steps", "steps"), ("tokens_seen", "tokens D"), ("compute_6ND", "6ND"),
                ("final_loss", "train loss"), ("final_val_loss", "val loss"), ("seconds", "s")]
    else:
        cols = [("run", "run"), ("world_size", "ranks"), ("steps", "steps"), ("tokens_per_s", "tokens/s"),
                ("efficiency", "E"), ("final_loss", "loss"), ("final_val_loss", "val loss")]
    return cols


def cell(run, key):
    if key == "run":
        return run.name
    if key == "np":
        return run.get("world_size") or run.get("np")
    if key == "memory_total_max":
        m = rank_memory(run)
        return round(sum(m) / MIB, 2) if m else None
    if key == "plan_memory_sum":
        parts = [run.get(f"plan_memory_{p}") for p in MEMORY_PARTS]
        return round(sum(parts) / MIB, 2) if all(p is not None for p in parts) else None
    if key in ("efficiency", "pp_idle_fraction", "pp_idle_formula", "mfu", "plan_efficiency"):
        v = run.get(key)
        return round(v, 3) if isinstance(v, float) else v
    if key in ("tokens_per_s", "plan_tokens_per_s", "ms_per_step"):
        v = run.get(key)
        return round(v, 1 if key == "ms_per_step" else 0) if isinstance(v, float) else v
    if key in ("budget", "compute_6ND"):
        v = run.get(key)
        return f"{v:.3g}" if key == "budget" and isinstance(v, float) else f"{v:.4g}" if isinstance(v, float) else v
    if key in ("final_loss", "final_val_loss"):
        v = run.get(key)
        return round(v, 4) if isinstance(v, float) else v
    return run.get(key)


def run_table(kind, runs):
    cols = table_columns(kind, runs)
    rows = []
    for r in runs:
        status = r.row.get("status", r.summary.get("ended", ""))
        row = [fmt(cell(r, k)) for k, _ in cols]
        if status and status != "finished":
            row[0] += f" ({status}: {r.row.get('error', '')})"
        rows.append(row)
    return [h for _, h in cols], rows
