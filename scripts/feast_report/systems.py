"""The report on a systems sweep: throughput, efficiency, time split, pipeline idle, memory.

Owns the pictures of a sweep over layouts and rank counts (each against the planner's prediction
when the sweep ran `trainer plan`), the markers and labels of a layout, and the sweep's section
of the report with the planned step time's error.
"""

import matplotlib.pyplot as plt
import numpy as np

from .figures import Skip, label_points, log_axes, loss_curves_figure, new_figure
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


# A marker per run where the runs are named in a legend rather than beside their points.
RUN_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "<", ">", "p", "h", "*"]


def ranks_of(run):
    return int(run.get("world_size") or run.get("np") or 1)


def throughput_figure(sweep):
    """Tokens/s and E of every layout, grouped by rank count: bars measured, hollow markers
    planned, dashes the linear scaling of the best 1-rank run."""
    runs = sorted((r for r in sweep.finished() if r.get("tokens_per_s")), key=lambda r: (ranks_of(r), r.name))
    if len(runs) < 2:
        raise Skip("fewer than 2 finished runs with a measured tokens/s")
    fig, (a1, a2) = new_figure(1, width=max(6.0, 1.2 + 0.55 * len(runs)), height=6.2, nrows=2, sharex=True)
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
    return fig


def time_split_figure(sweep):
    runs = [r for r in sweep.finished() if r.get("ms_per_step")]
    if not runs or all(r.get("compute_s") is None for r in runs):
        raise Skip("no run reports a time split (compute_s, tp_comm_s, ...)")
    fig, ax = new_figure(height=max(2.5, 1.0 + 0.3 * len(runs)))
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
    ax.set_title("where a step's time goes", fontsize=10)
    # Beside the bars, an entry a line: one row of eight above them was wider than the picture.
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.grid(True, axis="x", alpha=0.3)
    return fig


def pipeline_idle_figure(sweep):
    runs = [r for r in sweep.finished() if (r.get("pp") or 1) > 1 and r.get("pp_idle_fraction") is not None]
    if not runs:
        raise Skip("no finished run with pp > 1 reports pp_idle_fraction")
    fig, ax = new_figure(width=5.6, height=4.6)
    colors = {2: "#4c72b0", 4: "#c44e52", 8: "#55a868"}
    seen = set()
    points, dots = [], []
    for r in runs:
        p, m = int(r.get("pp")), int(r.get("micro_batches") or 0)
        x, y = r.get("pp_idle_formula"), r.get("pp_idle_fraction")
        label = f"p = {p}" if p not in seen else None
        seen.add(p)
        dots += ax.plot(x, y, "o", color=colors.get(p, "gray"), ms=7, label=label)
        points.append((x, y, f"p{p} m{m}" + (f" dp{int(r.get('dp'))}" if (r.get("dp") or 1) > 1 else "")
                       + (f" tp{int(r.get('tp'))}" if (r.get("tp") or 1) > 1 else "")))
    top = max(0.05, max(max(r.get("pp_idle_formula"), r.get("pp_idle_fraction")) for r in runs) * 1.15)
    ax.plot([0, top], [0, top], "--", color="gray", lw=1, label="measured = formula")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("formula (p-1)/(m+p-1)")
    ax.set_ylabel("measured pipeline idle / step")
    ax.set_title("pipeline idle: measured against the formula", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    if label_points(ax, points, fontsize=7) is None:
        # Too close together to label: a marker per run and the names in the legend.
        for dot in dots:
            dot.remove()
        for i, (r, (x, y, text)) in enumerate(zip(runs, points)):
            ax.plot(x, y, RUN_MARKERS[i % len(RUN_MARKERS)], color=colors.get(int(r.get("pp")), "gray"), ms=7,
                    label=f"{r.name}: {text}")
        fig.set_layout_engine("constrained")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), ncol=1 + len(runs) // 26)
    return fig


def memory_figure(sweep):
    runs = [r for r in sweep.finished() if rank_memory(r)]
    if not runs:
        raise Skip("no run reports memory_bytes_per_rank")
    fig, ax = new_figure(height=max(2.0, 1.0 + 0.3 * len(runs)))
    y = np.arange(len(runs))
    left = np.zeros(len(runs))
    colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860"]
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
    ax.set_title("memory per rank", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.grid(True, axis="x", alpha=0.3)
    return fig


def planned_figure(sweep):
    runs = [r for r in sweep.finished() if r.get("plan_time_step_s") and r.get("ms_per_step")]
    if not runs:
        errors = {r.get("plan_error") for r in sweep.runs if r.get("plan_error")}
        why = f" ({sorted(errors)[0]})" if errors else ""
        raise Skip("the sweep has no planned columns: run it with plan = true and a trainer with `trainer plan`"
                   + why)
    fig, (a1, a2) = new_figure(2, width=10, height=4.4)
    mem = [r for r in runs if rank_memory(r) and all(r.get(f"plan_memory_{p}") is not None for p in MEMORY_PARTS)]
    # (axes, [(planned, measured, run)]): step time on a1, memory on a2.
    panels = [(a1, [(1e3 * r.get("plan_time_step_s"), r.get("ms_per_step"), r) for r in runs])]
    if mem:
        panels.append((a2, [(sum(r.get(f"plan_memory_{k}") for k in MEMORY_PARTS) / MIB, sum(rank_memory(r)) / MIB, r)
                            for r in mem]))

    def draw(style):
        drawn = []
        for ax, pts in panels:
            for x, y, r in pts:
                marker, color = style(r)
                drawn += ax.plot(x, y, marker, color=color, ms=7, label=r.name if ax is a1 else None)
        return drawn

    dots = draw(lambda r: layout_marker(r)[:2])
    for ax, pts in panels:
        vals = [v for x, y, _ in pts for v in (x, y)]
        lo, hi = min(vals), max(vals)
        ax.plot([lo * 0.8, hi * 1.2], [lo * 0.8, hi * 1.2], "--", color="gray", lw=1)
        ax.grid(True, which="both", alpha=0.3)
    log_axes(a1)
    a1.set_xlabel("planned ms per step")
    a1.set_ylabel("measured ms per step")
    a1.set_title("ms per step: measured against planned", fontsize=10)
    if mem:
        a2.set_xlabel("planned MiB (largest rank)")
        a2.set_ylabel("reported MiB (largest rank)")
        a2.set_title("memory: reported against planned", fontsize=10)
    else:
        a2.axis("off")
        a2.text(0.5, 0.5, "no planned memory parts", ha="center")
    labels = []
    for ax, pts in panels:
        placed = label_points(ax, [(x, y, r.name) for x, y, r in pts])
        if placed is None:
            break
        labels += placed
    else:
        return fig
    # Too many runs, too close together, to write each name beside its point (a sweep of 16 was
    # unreadable): a colour per run and the names in one legend beside the panels.
    for artist in labels + dots:
        artist.remove()
    colors = plt.get_cmap("tab20")
    index = {r.name: i for i, r in enumerate(runs)}
    draw(lambda r: (layout_marker(r)[0], colors(index[r.name] % 20)))
    fig.set_layout_engine("constrained")
    a2.legend(*a1.get_legend_handles_labels(), fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0),
              ncol=1 + len(runs) // 26, title="run (marker: parallelism)", title_fontsize=7)
    return fig


def systems_figures(sweep):
    """(file name, caption, build) of each picture of a systems sweep, in the report's order."""
    n = sweep.name
    return [(f"{n}_loss_curves.png", "loss curves",
             lambda: loss_curves_figure(sweep.finished(), f"training loss of the {len(sweep.finished())} layouts (the "
                                        "same math at every layout: the curves coincide)")),
            (f"{n}_throughput_efficiency.png", "throughput and E against ranks", lambda: throughput_figure(sweep)),
            (f"{n}_time_split.png", "time split per layout", lambda: time_split_figure(sweep)),
            (f"{n}_pipeline_idle.png", "pipeline idle: measured against (p-1)/(m+p-1)",
             lambda: pipeline_idle_figure(sweep)),
            (f"{n}_memory.png", "memory per rank", lambda: memory_figure(sweep)),
            (f"{n}_measured_vs_planned.png", "measured against planned", lambda: planned_figure(sweep))]


def report_systems(rep, sweep):
    s = rep.section(f"Systems scaling: {sweep.name}", sweep.description)
    s["tables"].append(run_table("systems", sweep.runs))
    rep.pictures(s, systems_figures(sweep))
    idle = [(r.name, r.get("pp_idle_fraction"), r.get("pp_idle_formula")) for r in sweep.finished()
            if (r.get("pp") or 1) > 1 and r.get("pp_idle_fraction") is not None]
    rep.numbers[sweep.name] = {"kind": "systems", "pipeline_idle": idle}
    planned = [r for r in sweep.finished() if r.get("plan_time_step_s") and r.get("ms_per_step")]
    if planned:
        err = [abs(1e3 * r.get("plan_time_step_s") - r.get("ms_per_step")) / r.get("ms_per_step") for r in planned]
        s["facts"].append(f"planned step time vs measured: median relative error {100 * float(np.median(err)):.0f}% "
                          f"over {len(err)} runs (max {100 * max(err):.0f}%)")
        rep.numbers[sweep.name]["plan_step_error_median"] = float(np.median(err))
