"""The report on a systems sweep: throughput, efficiency, time split, pipeline idle, memory.

Owns the pictures of a sweep over layouts and rank counts (each against the planner's prediction
when the sweep ran `trainer plan`), the markers and labels of a layout, and the sweep's section
of the report with the planned step time's error.
"""

import matplotlib.pyplot as plt
import numpy as np

from .figures import DPI, Skip, new_figure, plot_loss_curves, save
from .runs import MEMORY_PARTS, MIB, rank_memory
from .tables import run_table

SPLIT_PARTS = [("compute_s", "compute", "#4c72b0"), ("tp_comm_s", "tp comm", "#dd8452"),
               ("pp_idle_s", "pp idle", "#c44e52"), ("dp_comm_s", "dp comm", "#55a868"),
               ("optimizer_s", "optimizer", "#8172b3"), ("data_s", "data", "#937860"),
               ("other_s", "other", "#bbbbbb")]


def short_label(run):
    s = run.summary
    if s.get("tp") is not None:
        m = s.get("micro_batches")
        ps = " ps" if s.get("dp_sync") == "parameter-server" else ""
        return f"tp{s['tp']} pp{s['pp']} dp{s['dp']}" + (f" m{m}" if m else "") + ps
    return run.name


def layout_marker(run):
    tp, pp, dp = (run.get(k) or 1 for k in ("tp", "pp", "dp"))
    mixed = sum(1 for d in (tp, pp, dp) if d > 1)
    if mixed > 1:
        return "D", "#8172b3", "mixed"
    if tp > 1:
        return "s", "#dd8452", "tensor"
    if pp > 1:
        return "^", "#c44e52", "pipeline"
    if dp > 1:
        return "o", "#55a868", "data"
    return "*", "#4c72b0", "1 rank"


def ranks_of(run):
    return int(run.get("world_size") or run.get("np") or 1)


def plot_throughput(sweep, out):
    """Tokens/s and E of every layout, grouped by rank count: bars measured, hollow markers
    planned, dashes the linear scaling of the best 1-rank run."""
    runs = sorted((r for r in sweep.finished() if r.get("tokens_per_s")), key=lambda r: (ranks_of(r), r.name))
    if len(runs) < 2:
        raise Skip("fewer than 2 finished runs with a measured tokens/s")
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(max(6.0, 1.2 + 0.55 * len(runs)), 6.2), dpi=DPI, sharex=True)
    x = np.arange(len(runs))
    seen = set()
    for i, r in enumerate(runs):
        _, color, kind = layout_marker(r)
        label = kind if kind not in seen else None
        seen.add(kind)
        a1.bar(i, r.get("tokens_per_s"), color=color, width=0.7, label=label)
        a2.bar(i, r.get("efficiency") or 0.0, color=color, width=0.7)
        if r.get("plan_tokens_per_s"):
            a1.plot(i, r.get("plan_tokens_per_s"), "D", mfc="none", mec="black", ms=6,
                    label="planned" if "planned" not in seen else None)
            seen.add("planned")
        if r.get("plan_efficiency") is not None:
            a2.plot(i, r.get("plan_efficiency"), "D", mfc="none", mec="black", ms=6)
    one = [r.get("tokens_per_s") for r in runs if ranks_of(r) == 1]
    groups = sorted({ranks_of(r) for r in runs})
    for n in groups:
        idx = [i for i, r in enumerate(runs) if ranks_of(r) == n]
        lo, hi = idx[0] - 0.45, idx[-1] + 0.45
        if one:
            a1.plot([lo, hi], [max(one) * n] * 2, "--", color="gray", lw=1,
                    label="linear scaling of 1 rank" if n == groups[0] else None)
        for ax in (a1, a2):
            ax.axvline(hi + 0.05, color="black", lw=0.5, alpha=0.3)
        a2.annotate(f"{n} rank{'s' if n > 1 else ''}", ((lo + hi) / 2, 1.02), ha="center", fontsize=8,
                    xycoords=("data", "data"))
    a1.set_ylabel("tokens/s")
    a1.set_title("throughput at a fixed global batch, by rank count", fontsize=10)
    a1.legend(fontsize=7, ncol=3)
    a1.grid(True, axis="y", alpha=0.3)
    a2.set_ylabel("E = compute / (compute\n+ comm + idle)")
    a2.set_ylim(0, 1.1)
    a2.grid(True, axis="y", alpha=0.3)
    a2.set_xticks(x)
    a2.set_xticklabels([short_label(r).replace(" dp", "\ndp") for r in runs], fontsize=7)
    return save(fig, out, f"{sweep.name}_throughput_efficiency.png")


def plot_time_split(sweep, out):
    runs = [r for r in sweep.finished() if r.get("ms_per_step")]
    if not runs or all(r.get("compute_s") is None for r in runs):
        raise Skip("no run reports a time split (compute_s, tp_comm_s, ...)")
    fig, ax = new_figure(height=0.9 + 0.32 * len(runs))
    y = np.arange(len(runs))
    left = np.zeros(len(runs))
    for key, label, color in SPLIT_PARTS:
        vals = np.array([1e3 * (r.get(key) or 0.0) for r in runs])
        ax.barh(y, vals, left=left, color=color, label=label, height=0.7)
        left += vals
    planned = [(i, 1e3 * r.get("plan_time_step_s")) for i, r in enumerate(runs) if r.get("plan_time_step_s")]
    if planned:
        ax.plot([p[1] for p in planned], [p[0] for p in planned], "k|", ms=14, mew=2, label="planned step")
    ax.set_yticks(y)
    ax.set_yticklabels([f"{r.name} (np {int(r.get('world_size') or r.get('np'))})" for r in runs], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ms per step (mean over measured steps, averaged over ranks)")
    ax.set_title("where a step's time goes", fontsize=10, pad=22)
    ax.legend(fontsize=7, ncol=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    ax.grid(True, axis="x", alpha=0.3)
    return save(fig, out, f"{sweep.name}_time_split.png")


def plot_pipeline_idle(sweep, out):
    runs = [r for r in sweep.finished() if (r.get("pp") or 1) > 1 and r.get("pp_idle_fraction") is not None]
    if not runs:
        raise Skip("no finished run with pp > 1 reports pp_idle_fraction")
    fig, ax = new_figure(width=5.6, height=4.6)
    colors = {2: "#4c72b0", 4: "#c44e52", 8: "#55a868"}
    seen = set()
    for r in runs:
        p, m = int(r.get("pp")), int(r.get("micro_batches") or 0)
        x, y = r.get("pp_idle_formula"), r.get("pp_idle_fraction")
        label = f"p = {p}" if p not in seen else None
        seen.add(p)
        ax.plot(x, y, "o", color=colors.get(p, "gray"), ms=7, label=label)
        ax.annotate(f"p{p} m{m}" + (f" dp{int(r.get('dp'))}" if (r.get("dp") or 1) > 1 else "")
                    + (f" tp{int(r.get('tp'))}" if (r.get("tp") or 1) > 1 else ""),
                    (x, y), fontsize=7, xytext=(5, 3), textcoords="offset points")
    top = max(0.05, max(max(r.get("pp_idle_formula"), r.get("pp_idle_fraction")) for r in runs) * 1.15)
    ax.plot([0, top], [0, top], "--", color="gray", lw=1, label="measured = formula")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("formula (p-1)/(m+p-1)")
    ax.set_ylabel("measured pipeline idle / step")
    ax.set_title("pipeline idle: measured against the formula", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    return save(fig, out, f"{sweep.name}_pipeline_idle.png")


def plot_memory(sweep, out):
    runs = [r for r in sweep.finished() if rank_memory(r)]
    if not runs:
        raise Skip("no run reports memory_bytes_per_rank")
    fig, ax = new_figure(height=0.9 + 0.32 * len(runs))
    y = np.arange(len(runs))
    left = np.zeros(len(runs))
    colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52"]
    for j, part in enumerate(MEMORY_PARTS):
        vals = np.array([rank_memory(r)[j] / MIB for r in runs])
        ax.barh(y, vals, left=left, color=colors[j], label=part, height=0.7)
        left += vals
    planned = []
    for i, r in enumerate(runs):
        parts = [r.get(f"plan_memory_{p}") for p in MEMORY_PARTS]
        if all(p is not None for p in parts):
            planned.append((i, sum(parts) / MIB))
    if planned:
        ax.plot([p[1] for p in planned], [p[0] for p in planned], "k|", ms=14, mew=2, label="planned")
    ax.set_yticks(y)
    ax.set_yticklabels([r.name for r in runs], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("MiB on the rank that needs the most")
    ax.set_title("memory per rank", fontsize=10, pad=22)
    ax.legend(fontsize=7, ncol=5, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    ax.grid(True, axis="x", alpha=0.3)
    return save(fig, out, f"{sweep.name}_memory.png")


def plot_planned(sweep, out):
    runs = [r for r in sweep.finished() if r.get("plan_time_step_s") and r.get("ms_per_step")]
    if not runs:
        errors = {r.get("plan_error") for r in sweep.runs if r.get("plan_error")}
        why = f" ({sorted(errors)[0]})" if errors else ""
        raise Skip("the sweep has no planned columns: run it with plan = true and a trainer with `trainer plan`"
                   + why)
    fig, (a1, a2) = new_figure(2, width=10, height=4.4)
    pairs = [("ms per step", lambda r: r.get("ms_per_step"), lambda r: 1e3 * r.get("plan_time_step_s"), a1)]
    mem = [r for r in runs if rank_memory(r) and all(r.get(f"plan_memory_{p}") is not None for p in MEMORY_PARTS)]
    for name, meas, plan, ax in pairs:
        for r in runs:
            marker, color, _ = layout_marker(r)
            ax.plot(plan(r), meas(r), marker, color=color, ms=7)
            ax.annotate(r.name, (plan(r), meas(r)), fontsize=6, xytext=(4, 2), textcoords="offset points")
        lo = min(min(plan(r), meas(r)) for r in runs) * 0.8
        hi = max(max(plan(r), meas(r)) for r in runs) * 1.2
        ax.plot([lo, hi], [lo, hi], "--", color="gray", lw=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(f"planned {name}")
        ax.set_ylabel(f"measured {name}")
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(f"{name}: measured against planned", fontsize=10)
    if mem:
        for r in mem:
            marker, color, _ = layout_marker(r)
            p = sum(r.get(f"plan_memory_{k}") for k in MEMORY_PARTS) / MIB
            m = sum(rank_memory(r)) / MIB
            a2.plot(p, m, marker, color=color, ms=7)
            a2.annotate(r.name, (p, m), fontsize=6, xytext=(4, 2), textcoords="offset points")
        vals = [sum(rank_memory(r)) / MIB for r in mem] + \
               [sum(r.get(f"plan_memory_{k}") for k in MEMORY_PARTS) / MIB for r in mem]
        a2.plot([min(vals) * 0.9, max(vals) * 1.1], [min(vals) * 0.9, max(vals) * 1.1], "--", color="gray", lw=1)
        a2.set_xlabel("planned MiB (largest rank)")
        a2.set_ylabel("reported MiB (largest rank)")
        a2.set_title("memory: reported against planned", fontsize=10)
        a2.grid(True, alpha=0.3)
    else:
        a2.axis("off")
        a2.text(0.5, 0.5, "no planned memory parts", ha="center")
    return save(fig, out, f"{sweep.name}_measured_vs_planned.png")


def report_systems(rep, sweep):
    s = rep.section(f"Systems scaling: {sweep.name}", sweep.description)
    s["tables"].append(run_table("systems", sweep.runs))
    rep.picture(s, lambda: plot_loss_curves(sweep.finished(), rep.out, f"{sweep.name}_loss_curves.png",
                                            f"training loss of the {len(sweep.finished())} layouts (the same math "
                                            "at every layout: the curves coincide)"),
                "loss curves")
    rep.picture(s, lambda: plot_throughput(sweep, rep.out), "throughput and E against ranks")
    rep.picture(s, lambda: plot_time_split(sweep, rep.out), "time split per layout")
    rep.picture(s, lambda: plot_pipeline_idle(sweep, rep.out), "pipeline idle: measured against (p-1)/(m+p-1)")
    rep.picture(s, lambda: plot_memory(sweep, rep.out), "memory per rank")
    rep.picture(s, lambda: plot_planned(sweep, rep.out), "measured against planned")
    idle = [(r.name, r.get("pp_idle_fraction"), r.get("pp_idle_formula")) for r in sweep.finished()
            if (r.get("pp") or 1) > 1 and r.get("pp_idle_fraction") is not None]
    rep.numbers[sweep.name] = {"kind": "systems", "pipeline_idle": idle}
    planned = [r for r in sweep.finished() if r.get("plan_time_step_s") and r.get("ms_per_step")]
    if planned:
        err = [abs(1e3 * r.get("plan_time_step_s") - r.get("ms_per_step")) / r.get("ms_per_step") for r in planned]
        s["facts"].append(f"planned step time vs measured: median relative error {100 * float(np.median(err)):.0f}% "
                          f"over {len(err)} runs (max {100 * max(err):.0f}%)")
        rep.numbers[sweep.name]["plan_step_error_median"] = float(np.median(err))
