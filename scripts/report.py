#!/usr/bin/python3
"""Turns training runs, sweeps and communication benchmarks into pictures and one HTML report.

    scripts/report.py PATH... --out DIR [--comm FILE ...] [--title TEXT]

Each PATH is a run directory (metrics.jsonl, summary.json), a sweep directory (results.csv and
sweep.json, as scripts/sweep.py writes them), or a saved `trainer bench comm` output (text or
--json). It draws what the data allows, as PNG files in DIR:
  - loss curves of the runs (metrics.jsonl);
  - systems sweeps: throughput and scaling efficiency E against ranks, the time split of each
    layout, measured pipeline idle against (p-1)/(m+p-1), memory per rank, and measured against
    planned step time and memory when the sweep ran `trainer plan` (plan = true);
  - scaling-law sweeps: final validation loss against compute C = 6 N D with the fitted law
    L(C) = a C^-b + c, IsoFLOP profiles (loss against N for each budget, a parabola in log N and
    its minimum) and the compute-optimal N against C;
  - communication: time against message size with the alpha-beta fit, and the library's all-reduce
    against the ring and the parameter server.
A picture that lacks its data is left out with a note saying why. DIR/report.html embeds every
picture (base64) with a table of the runs; DIR/summary.md holds the same tables and fits in
Markdown and DIR/report.json the fitted numbers.
Needs numpy and matplotlib (Debian: python3-numpy, python3-matplotlib); runs with /usr/bin/python3.
"""

import argparse
import base64
import csv
import datetime
import html
import json
import math
import re
import sys
import tomllib
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from feast_sweep.results import read_json  # noqa: E402  (the sweep's own files, read as it reads them)

DPI = 100
SPLIT_PARTS = [("compute_s", "compute", "#4c72b0"), ("tp_comm_s", "tp comm", "#dd8452"),
               ("pp_idle_s", "pp idle", "#c44e52"), ("dp_comm_s", "dp comm", "#55a868"),
               ("optimizer_s", "optimizer", "#8172b3"), ("data_s", "data", "#937860"),
               ("other_s", "other", "#bbbbbb")]
MEMORY_PARTS = ["parameters", "gradients", "optimizer", "activations"]
MIB = 1024.0 * 1024.0


class Skip(Exception):
    """A picture that cannot be drawn from the data at hand; the message says why."""


# ----------------------------------------------------------------------------- reading

def number(text):
    """A CSV cell as a float when it is one, else the text ('' and None stay None)."""
    if text is None or text == "":
        return None
    if isinstance(text, (int, float)):
        return float(text)
    try:
        return float(text)
    except ValueError:
        if text in ("True", "true"):
            return True
        if text in ("False", "false"):
            return False
        return text


def read_metrics(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        pass  # a line cut short by a crash
    except OSError:
        pass
    return rows


def entropy_floor(run_dir):
    """The corpus's entropy floor (nats/token) from the meta.json beside the run's training
    shards, when the data is `trainer prepare-data --synthetic`'s; None otherwise."""
    try:
        with open(Path(run_dir) / "config.toml", "rb") as f:
            cfg = tomllib.load(f)
        train = cfg.get("data", {}).get("train", "")
    except (OSError, tomllib.TOMLDecodeError):
        return None
    if not train:
        return None
    folder = Path(train) if Path(train).is_dir() else Path(train).parent
    if not folder.is_absolute():
        folder = Path(run_dir) / folder
    meta = read_json(folder / "meta.json")
    return meta.get("entropy_floor_nats") if isinstance(meta, dict) else None


class Run:
    def __init__(self, path, name=None, row=None):
        self.dir = Path(path)
        self.name = name or self.dir.name
        self.summary = read_json(self.dir / "summary.json") or {}
        self.metrics = read_metrics(self.dir / "metrics.jsonl")
        self.row = row or {}

    def get(self, key):
        """A value from the sweep's CSV row, else from summary.json."""
        v = self.row.get(key)
        if v is None:
            v = number(self.summary.get(key)) if not isinstance(self.summary.get(key), (dict, list)) else None
            if v is None and isinstance(self.summary.get("time_split"), dict):
                v = number(self.summary["time_split"].get(key))
        return v


class Sweep:
    def __init__(self, path):
        self.dir = Path(path)
        meta = read_json(self.dir / "sweep.json") or {}
        self.name = meta.get("name", self.dir.name)
        self.kind = meta.get("kind", "custom")
        self.description = meta.get("description", "")
        with open(self.dir / "results.csv", newline="") as f:
            self.rows = [{k: number(v) for k, v in r.items()} for r in csv.DictReader(f)]
        self.columns = list(self.rows[0].keys()) if self.rows else []
        self.runs = []
        for r in self.rows:
            run_dir = self.dir / (r.get("run_dir") or f"runs/{r['run']}")
            self.runs.append(Run(run_dir, str(r["run"]), r))
        if self.kind == "custom" and "budget" in self.columns:
            self.kind = "scaling-law"

    def finished(self):
        return [r for r in self.runs if r.row.get("status") == "finished"]


# ----------------------------------------------------------------------------- communication

def parse_comm(path):
    """Rows {op, algorithm, bytes, ranks, time_s, predicted_s, algbw, busbw} from a saved
    `trainer bench comm` output, JSON or the printed tables, plus the alpha-beta fit it reports
    (alpha seconds, beta seconds per byte) when it does."""
    text = Path(path).read_text(errors="replace")
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    rows, fit = [], {}
    if doc is not None:
        def walk(node, context):
            if isinstance(node, dict):
                keys = {k.lower() for k in node}
                if any(k in keys for k in ("bytes", "size", "size_bytes", "message_bytes")) and \
                        any(k.startswith("time") or k in ("seconds", "us", "median_us", "one_way_s") for k in keys):
                    rows.append(comm_row(node, context))
                    return
                for k in ("alpha", "alpha_s", "alpha_us", "beta", "beta_s_per_byte", "bandwidth", "bandwidth_bytes_per_s"):
                    if k in node and not isinstance(node[k], (dict, list)):
                        fit[k] = node[k]
                ctx = dict(context)
                for k in ("op", "collective", "name", "algorithm", "ranks", "world_size", "n"):
                    if k in node and not isinstance(node[k], (dict, list)):
                        ctx[k] = node[k]
                for k, v in node.items():
                    if isinstance(v, (dict, list)):
                        c2 = dict(ctx)
                        if isinstance(v, list) and "op" not in c2 and "collective" not in c2:
                            c2["op"] = k
                        walk(v, c2)
            elif isinstance(node, list):
                for v in node:
                    walk(v, context)
        walk(doc, {})
    else:
        rows, fit = parse_comm_text(text)
    rows = [r for r in rows if r.get("bytes") and r.get("time_s")]
    return rows, normalise_fit(fit)


def comm_row(node, context):
    n = {k.lower(): v for k, v in {**context, **node}.items()}
    op = str(n.get("op") or n.get("collective") or n.get("name") or "")
    algorithm = str(n.get("algorithm") or n.get("algo") or n.get("method") or "")
    op = {"allreduce_algorithms": "allreduce", "pingpong": "ping-pong one way"}.get(op, op)
    size = n.get("bytes", n.get("size", n.get("size_bytes", n.get("message_bytes"))))
    t = None
    for k, scale in (("time_s", 1), ("one_way_s", 1), ("seconds", 1), ("time_us", 1e-6), ("median_us", 1e-6), ("us", 1e-6),
                     ("time_ms", 1e-3), ("time", 1e-6)):
        if k in n and n[k] is not None:
            t = float(n[k]) * scale
            break
    pred = None
    for k, scale in (("predicted_s", 1), ("predicted_us", 1e-6), ("model_us", 1e-6), ("predicted", 1e-6)):
        if k in n and n[k] is not None:
            pred = float(n[k]) * scale
            break
    return {"op": op, "algorithm": algorithm, "bytes": float(size) if size is not None else None, "time_s": t,
            "predicted_s": pred, "ranks": n.get("ranks", n.get("world_size", n.get("n"))),
            "algbw": n.get("algbw", n.get("algbw_gbs")), "busbw": n.get("busbw", n.get("busbw_gbs"))}


def parse_comm_text(text):
    """`trainer bench comm`'s printed tables: a header line naming a bytes column and a time
    column ("time (us)", "one-way (us)"), then rows of as many cells (2 or more spaces apart)
    until a blank line. The line above a table names the collective ("allreduce: busbw = ...");
    a row with an `algorithm` cell is one of the all-reduce ways; a "pred" or "fit" column is the
    alpha-beta model's prediction. The "alpha = ... us, 1/beta = ... GB/s" line is the fit."""
    rows, fit = [], {}
    title, header = "", None
    for line in text.splitlines():
        m = re.search(r"\balpha\s*=\s*([0-9.eE+-]+)\s*(us|µs|ms|s)\b", line)
        if m:
            fit["alpha_" + m.group(2).replace("µ", "u")] = float(m.group(1))
        m = re.search(r"(?:1/beta|bandwidth)\s*=\s*([0-9.eE+-]+)\s*(GB/s|MB/s|B/s)", line)
        if m:
            fit["bandwidth_" + m.group(2)] = float(m.group(1))
        if not line.strip():
            header = None
            continue
        cells = [c.strip() for c in re.split(r"\s{2,}|\t", line.strip()) if c.strip()]
        low = [c.lower() for c in cells]
        if header is None:
            if any(c == "bytes" for c in low) and any(c.startswith(("time", "one-way")) for c in low):
                header = low
            else:
                title = line.strip()
            continue
        if len(cells) != len(header):
            header = None
            continue
        rec = dict(zip(header, cells))

        def value(pred):
            for h, v in rec.items():
                if pred(h):
                    try:
                        scale = 1e-6 if "(us)" in h or "(µs)" in h else 1e-3 if "(ms)" in h else 1.0
                        return float(v.replace(",", "")) * scale
                    except ValueError:
                        return None
            return None
        size = value(lambda h: h == "bytes")
        t = value(lambda h: h.startswith(("time", "one-way")))
        pred = value(lambda h: h.startswith(("pred", "fit")))
        algorithm = rec.get("algorithm", "")
        if algorithm:
            op = "allreduce"
        elif "ping-pong" in title:
            op = "ping-pong one way"
        else:
            op = title.split(":")[0].strip()
        rows.append({"op": op, "algorithm": algorithm, "bytes": size, "time_s": t, "predicted_s": pred,
                     "ranks": None, "algbw": None, "busbw": None})
    return rows, fit


def normalise_fit(fit):
    out = {}
    for k, v in fit.items():
        if k in ("alpha", "alpha_s"):
            out["alpha_s"] = float(v)
        elif k in ("alpha_us",):
            out["alpha_s"] = float(v) * 1e-6
        elif k == "alpha_ms":
            out["alpha_s"] = float(v) * 1e-3
        elif k in ("beta", "beta_s_per_byte"):
            out["beta_s_per_byte"] = float(v)
        elif k in ("bandwidth", "bandwidth_bytes_per_s", "bandwidth_B/s"):
            out["beta_s_per_byte"] = 1.0 / float(v)
        elif k == "bandwidth_GB/s":
            out["beta_s_per_byte"] = 1.0 / (float(v) * 1e9)
        elif k == "bandwidth_MB/s":
            out["beta_s_per_byte"] = 1.0 / (float(v) * 1e6)
    return out


def fit_alpha_beta(sizes, times):
    """Least squares t = alpha + beta * bytes, weighted by 1/t so small messages count as much as
    large ones (relative error)."""
    sizes, times = np.asarray(sizes, float), np.asarray(times, float)
    w = 1.0 / times
    A = np.stack([np.ones_like(sizes), sizes], axis=1) * w[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(A, times * w, rcond=None)
    return max(alpha, 0.0), max(beta, 1e-30)


# ----------------------------------------------------------------------------- fits

def fit_power_law(C, L):
    """L(C) = a C^-b + c by least squares in log L, c in [0, min L): for each c on a fine grid,
    log(L - c) is linear in log C; the best c is then refined by golden-section search.
    Returns dict(a, b, c, rms) (rms of the relative residuals)."""
    C, L = np.asarray(C, float), np.asarray(L, float)
    if len(C) < 3:
        raise Skip(f"a three-parameter law needs at least 3 budgets; {len(C)} given")
    lc = np.log(C)

    def solve(c):
        y = np.log(L - c)
        slope, intercept = np.polyfit(lc, y, 1)
        pred = np.exp(intercept) * C ** slope + c
        return float(np.mean((np.log(L) - np.log(pred)) ** 2)), math.exp(intercept), -slope

    top = float(L.min()) * (1 - 1e-9)
    grid = top * (1 - np.logspace(-6, 0, 600))
    grid = np.concatenate([grid, [0.0]])
    scores = [solve(c)[0] for c in grid]
    i = int(np.argmin(scores))
    lo, hi = grid[min(i + 1, len(grid) - 1)], grid[max(i - 1, 0)]
    lo, hi = min(lo, hi), max(lo, hi)
    g = (math.sqrt(5) - 1) / 2
    x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
    for _ in range(80):
        if solve(x1)[0] < solve(x2)[0]:
            hi = x2
        else:
            lo = x1
        x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
    c = (lo + hi) / 2
    if solve(grid[i])[0] < solve(c)[0]:
        c = grid[i]
    mse, a, b = solve(c)
    return {"a": a, "b": b, "c": c, "rms_rel": math.sqrt(mse), "points": len(C)}


def fit_isoflop(N, L):
    """A parabola in log10 N through (N, L); its minimum N_opt and L_opt, or None when it opens
    downward. `inside`: the minimum lies within the sampled sizes."""
    x, y = np.log10(np.asarray(N, float)), np.asarray(L, float)
    p2, p1, p0 = np.polyfit(x, y, 2)
    if p2 <= 0:
        return {"coef": (p2, p1, p0), "n_opt": None}
    xm = -p1 / (2 * p2)
    return {"coef": (p2, p1, p0), "n_opt": 10 ** xm, "l_opt": p0 + p1 * xm + p2 * xm * xm,
            "inside": bool(x.min() <= xm <= x.max())}


# ----------------------------------------------------------------------------- pictures

def new_figure(ncols=1, width=7.0, height=4.2):
    fig, axes = plt.subplots(1, ncols, figsize=(width, height), dpi=DPI)
    return fig, axes


def plain_numbers(ax, axis="y"):
    """Tick labels as plain numbers (0.9, 1.2) on a log axis instead of 9 x 10^-1."""
    fmt = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:.3g}")
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_formatter(fmt)
    target.set_minor_formatter(fmt)
    for label in (ax.get_yticklabels(minor=True) if axis == "y" else ax.get_xticklabels(minor=True)):
        label.set_fontsize(7)


def save(fig, out, name):
    fig.tight_layout()
    path = out / name
    fig.savefig(path, dpi=DPI, bbox_inches="tight")  # legends placed outside the axes stay in
    plt.close(fig)
    return path


def short_label(run):
    s = run.summary
    if s.get("tp") is not None:
        m = s.get("micro_batches")
        ps = " ps" if s.get("dp_sync") == "parameter-server" else ""
        return f"tp{s['tp']} pp{s['pp']} dp{s['dp']}" + (f" m{m}" if m else "") + ps
    return run.name


def plot_loss_curves(runs, out, name, title, by_compute=False):
    runs = [r for r in runs if r.metrics]
    if not runs:
        raise Skip("no run has a metrics.jsonl with steps")
    fig, ax = new_figure()
    cmap = plt.get_cmap("viridis" if by_compute else "tab10")
    sizes = sorted({r.get("parameters") or 0 for r in runs})
    for i, r in enumerate(runs):
        steps = np.array([m["step"] for m in r.metrics if "loss" in m], float)
        loss = smooth(np.array([m["loss"] for m in r.metrics if "loss" in m], float))
        if by_compute:
            n, tps = r.get("parameters"), r.get("tokens_per_step")
            if not n or not tps:
                continue
            x = 6.0 * n * tps * steps
            color = cmap(sizes.index(r.get("parameters") or 0) / max(1, len(sizes) - 1))
            label = None
        else:
            x = steps
            color = cmap(i % 10)
            label = r.name if len(runs) <= 12 else None
        ax.plot(x, loss, color=color, lw=1.0, alpha=0.85, label=label)
        vals = [(m["step"], m["val_loss"]) for m in r.metrics if m.get("val_loss") is not None]
        if vals:
            vx = np.array([v[0] for v in vals], float)
            if by_compute:
                vx = 6.0 * r.get("parameters") * r.get("tokens_per_step") * vx
            ax.plot(vx, [v[1] for v in vals], "o", color=color, ms=4)
    if by_compute:
        ax.set_xscale("log")
        ax.set_xlabel("training compute 6 N D (FLOPs)")
        sm = plt.cm.ScalarMappable(cmap=cmap, norm=matplotlib.colors.LogNorm(max(min(sizes), 1), max(max(sizes), 2)))
        fig.colorbar(sm, ax=ax, label="parameters N")
    else:
        ax.set_xlabel("step")
        if len(runs) <= 12:
            ax.legend(fontsize=7, ncol=2)
    ax.set_yscale("log")
    plain_numbers(ax)
    ax.set_ylabel("training loss (nats/token; dots: validation)")
    if any(len(r.metrics) >= 100 for r in runs):
        title += " (moving mean over 2% of each run)"
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    return save(fig, out, name)


def smooth(values):
    """A centred moving mean over 2% of the points (none under 100): single-step losses of small
    batches are noisy enough to hide the curves."""
    k = len(values) // 50
    if k < 2:
        return values
    kernel = np.ones(k) / k
    padded = np.concatenate([np.full(k // 2, values[0]), values, np.full(k - 1 - k // 2, values[-1])])
    return np.convolve(padded, kernel, mode="valid")


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


def rank_memory(run):
    """(parts of the rank with the most memory, in bytes) from summary.json, else the CSV's
    per-part maxima."""
    per_rank = run.summary.get("memory_bytes_per_rank")
    if isinstance(per_rank, list) and per_rank:
        return max(per_rank, key=sum)
    parts = [run.get(f"memory_{p}_max") for p in MEMORY_PARTS]
    return parts if all(p is not None for p in parts) else None


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


def scaling_points(sweep):
    pts = []
    for r in sweep.finished():
        loss = r.get("final_val_loss")
        kind = "val"
        if loss is None:
            loss, kind = r.get("final_loss"), "train"
        n, c = r.get("parameters"), r.get("compute_6ND")
        if c is None and n and r.get("tokens_seen"):
            c = 6.0 * n * r.get("tokens_seen")
        if loss is None or not n or not c:
            continue
        budget = r.get("budget") or float(f"{c:.2g}")
        pts.append({"run": r, "N": float(n), "C": float(c), "L": float(loss), "budget": float(budget),
                    "loss_kind": kind, "model": r.get("model") or r.name})
    return pts


def scaling_fits(sweep):
    pts = scaling_points(sweep)
    if len(pts) < 3:
        raise Skip(f"fewer than 3 finished runs with a loss, N and compute ({len(pts)})")
    budgets = sorted({p["budget"] for p in pts})
    frontier = [min((p for p in pts if p["budget"] == b), key=lambda p: p["L"]) for b in budgets]
    result = {"points": pts, "budgets": budgets, "frontier": frontier, "law": None, "law_note": "",
              "isoflop": {}, "n_opt_fit": None}
    try:
        result["law"] = fit_power_law([p["C"] for p in frontier], [p["L"] for p in frontier])
    except Skip as e:
        result["law_note"] = str(e)
    for b in budgets:
        group = sorted((p for p in pts if p["budget"] == b), key=lambda p: p["N"])
        if len({p["N"] for p in group}) >= 3:
            result["isoflop"][b] = fit_isoflop([p["N"] for p in group], [p["L"] for p in group])
    opt = [(b, f["n_opt"]) for b, f in result["isoflop"].items() if f.get("n_opt") and f.get("inside")]
    if len(opt) >= 2:
        slope, intercept = np.polyfit(np.log10([o[0] for o in opt]), np.log10([o[1] for o in opt]), 1)
        result["n_opt_fit"] = {"exponent": float(slope), "coefficient": float(10 ** intercept), "points": len(opt)}
    result["floor"] = next((f for f in (entropy_floor(p["run"].dir) for p in pts[:3]) if f), None)
    return result


def plot_loss_vs_compute(sweep, fits, out):
    pts = fits["points"]
    fig, ax = new_figure(width=7.2, height=4.6)
    sizes = sorted({p["N"] for p in pts})
    cmap = plt.get_cmap("viridis")
    for n in sizes:
        group = sorted((p for p in pts if p["N"] == n), key=lambda p: p["C"])
        color = cmap(sizes.index(n) / max(1, len(sizes) - 1))
        ax.plot([p["C"] for p in group], [p["L"] for p in group], "o-", color=color, ms=5, lw=0.8, alpha=0.8,
                label=f"{group[0]['model']} (N = {n:,.0f})")
    fr = fits["frontier"]
    ax.plot([p["C"] for p in fr], [p["L"] for p in fr], "s", mfc="none", mec="black", ms=11,
            label="best at each budget")
    law = fits["law"]
    if law:
        cs = np.logspace(math.log10(min(p["C"] for p in pts)) - 0.2, math.log10(max(p["C"] for p in pts)) + 0.3, 200)
        ax.plot(cs, law["a"] * cs ** -law["b"] + law["c"], "-", color="black", lw=1.5,
                label=f"L = {law['a']:.3g} C^-{law['b']:.3f} + {law['c']:.3f}")
    if fits.get("floor"):
        ax.axhline(fits["floor"], color="gray", ls=":", lw=1, label=f"entropy floor {fits['floor']:.3f}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain_numbers(ax)
    ax.set_xlabel("compute C = 6 N D (FLOPs)")
    kind = "validation" if all(p["loss_kind"] == "val" for p in pts) else "final (validation where measured)"
    ax.set_ylabel(f"{kind} loss (nats/token)")
    ax.set_title("loss against compute" + ("" if law else f" (no fit: {fits['law_note']})"), fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    return save(fig, out, f"{sweep.name}_loss_vs_compute.png")


def plot_isoflop(sweep, fits, out):
    if not fits["isoflop"]:
        raise Skip("no budget has runs of 3 or more model sizes for a parabola")
    fig, (a1, a2) = new_figure(2, width=10.5, height=4.4)
    cmap = plt.get_cmap("plasma")
    budgets = fits["budgets"]
    for i, b in enumerate(budgets):
        color = cmap(0.85 * i / max(1, len(budgets) - 1))
        group = sorted((p for p in fits["points"] if p["budget"] == b), key=lambda p: p["N"])
        a1.plot([p["N"] for p in group], [p["L"] for p in group], "o", color=color, ms=6, label=f"C = {b:.2g}")
        f = fits["isoflop"].get(b)
        if f:
            x = np.linspace(math.log10(group[0]["N"]) - 0.15, math.log10(group[-1]["N"]) + 0.15, 100)
            p2, p1, p0 = f["coef"]
            a1.plot(10 ** x, p2 * x * x + p1 * x + p0, "-", color=color, lw=1)
            if f.get("inside"):
                a1.plot(f["n_opt"], f["l_opt"], "*", color=color, ms=14, mec="black")
    a1.set_xscale("log")
    a1.set_yscale("log")
    plain_numbers(a1)
    a1.set_xlabel("parameters N")
    a1.set_ylabel("final validation loss")
    outside = [f"{b:.2g}" for b, f in fits["isoflop"].items() if not f.get("inside")]
    a1.set_title("IsoFLOP profiles (stars: parabola minima)"
                 + (f"\nno minimum within the sampled sizes at C = {', '.join(outside)}" if outside else ""),
                 fontsize=9)
    a1.legend(fontsize=7)
    a1.grid(True, which="both", alpha=0.3)
    opt = [(b, f) for b, f in fits["isoflop"].items() if f.get("inside")]
    if opt:
        for b, f in opt:
            a2.plot(b, f["n_opt"], "*", ms=12, color="black")
        nf = fits["n_opt_fit"]
        if nf:
            cs = np.logspace(math.log10(min(b for b, _ in opt)) - 0.2, math.log10(max(b for b, _ in opt)) + 0.2, 50)
            a2.plot(cs, nf["coefficient"] * cs ** nf["exponent"], "-", color="black", lw=1,
                    label=f"N_opt = {nf['coefficient']:.3g} C^{nf['exponent']:.2f}")
            a2.legend(fontsize=8)
        a2.set_xscale("log")
        a2.set_yscale("log")
        a2.set_xlabel("compute budget C (FLOPs)")
        a2.set_ylabel("compute-optimal N")
        a2.set_title("compute-optimal model size (minima within the sampled sizes)", fontsize=9)
        a2.grid(True, which="both", alpha=0.3)
    else:
        a2.axis("off")
        a2.text(0.5, 0.5, "no parabola has its minimum\nwithin the sampled sizes", ha="center", va="center")
    return save(fig, out, f"{sweep.name}_isoflop.png")


def plot_comm_time(rows, fit_reported, out, stem):
    """Every collective's time against its size, each series with its own least-squares line
    alpha + beta * bytes; the ping-pong between two ranks with the bench's own fit of the link."""
    data = [r for r in rows if r["bytes"] and r["time_s"] and not r["algorithm"]]
    if not data:
        raise Skip("the communication file has no rows with bytes and time")
    fig, ax = new_figure(width=7.2, height=4.6)
    groups = {}
    for r in data:
        groups.setdefault(r["op"] or "?", []).append(r)
    fits = {}
    cmap = plt.get_cmap("tab10")
    for i, (op, g) in enumerate(sorted(groups.items())):
        g.sort(key=lambda r: r["bytes"])
        color = cmap(i % 10)
        ping = "ping-pong" in op
        ax.plot([r["bytes"] for r in g], [r["time_s"] * 1e6 for r in g], "D" if ping else "o", color=color,
                ms=5 if ping else 4, label=op)
        xs = np.logspace(math.log10(g[0]["bytes"]), math.log10(g[-1]["bytes"]), 100)
        if ping and fit_reported.get("alpha_s") is not None and fit_reported.get("beta_s_per_byte"):
            a, b = fit_reported["alpha_s"], fit_reported["beta_s_per_byte"]
            ax.plot(xs, (a + b * xs) * 1e6, "-", color="black", lw=1.8,
                    label=f"link fit: α = {a * 1e6:.2f} µs, 1/β = {1e-9 / b:.2f} GB/s")
        elif len(g) >= 2:
            alpha, beta = fit_alpha_beta([r["bytes"] for r in g], [r["time_s"] for r in g])
            fits[op] = {"alpha_s": alpha, "beta_s_per_byte": beta}
            ax.plot(xs, (alpha + beta * xs) * 1e6, "-", color=color, lw=1, alpha=0.6)
    ranks = next((r["ranks"] for r in data if r.get("ranks")), None)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("time (µs)")
    ax.set_title("collective time against size" + (f" ({int(ranks)} ranks)" if ranks else "")
                 + "; thin lines: α + β·bytes per collective", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    return save(fig, out, f"{stem}_alpha_beta.png"), fits


def plot_allreduce_algorithms(rows, out, stem):
    def kind(r):
        text = f"{r['algorithm']} {r['op']}".lower()
        if "parameter" in text or re.search(r"\bps\b", text):
            return "parameter server"
        if "ring" in text:
            return "ring"
        if "library" in text or "mpi" in text or "nccl" in text:
            return "library"
        return None
    data = [r for r in rows if r["bytes"] and r["time_s"] and kind(r)]
    kinds = sorted({kind(r) for r in data})
    if len(kinds) < 2:
        raise Skip("the communication file has no rows labelled library, ring and parameter server")
    fig, ax = new_figure(width=7.2, height=4.4)
    colors = {"library": "#4c72b0", "ring": "#55a868", "parameter server": "#c44e52"}
    for k in kinds:
        g = sorted((r for r in data if kind(r) == k), key=lambda r: r["bytes"])
        ax.plot([r["bytes"] for r in g], [r["time_s"] * 1e6 for r in g], "o-", color=colors[k], ms=4, label=k)
        pred = [(r["bytes"], r["predicted_s"]) for r in g if r.get("predicted_s")]
        if pred:
            ax.plot([p[0] for p in pred], [p[1] * 1e6 for p in pred], "--", color=colors[k], lw=1,
                    label=f"{k}: α-β prediction")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("all-reduce time (µs)")
    ax.set_title("all-reduce: library, ring (2(N-1)/N P/B) and parameter server (N P/B)", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    return save(fig, out, f"{stem}_allreduce_algorithms.png")


# ----------------------------------------------------------------------------- tables

def fmt(v, digits=4):
    if v is None or v == "":
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if not math.isfinite(v):  # a diverged run's loss, say: int() cannot take it
            return str(v)
        if v == int(v) and abs(v) < 1e15:
            return f"{int(v):,}" if abs(v) >= 10000 else str(int(v))
        if abs(v) >= 1e5 or abs(v) < 1e-3:
            return f"{v:.3g}"
        return f"{v:.{digits}g}"
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


def markdown_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(out)


def html_table(header, rows):
    h = "".join(f"<th>{html.escape(c)}</th>" for c in header)
    def td(c):  # **bold** as Markdown writes it
        return "<td>" + re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", html.escape(c)) + "</td>"
    body = "".join("<tr>" + "".join(td(c) for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>"


# ----------------------------------------------------------------------------- the report

class Report:
    def __init__(self, out, title):
        self.out, self.title = out, title
        self.sections = []  # (heading, text paragraphs, tables [(header, rows)], pictures [(path, caption)], notes)
        self.numbers = {}
        self.stems = set()

    def section(self, heading, intro=""):
        s = {"heading": heading, "intro": intro, "tables": [], "pictures": [], "notes": [], "facts": []}
        self.sections.append(s)
        return s

    def picture(self, s, make, caption):
        try:
            result = make()
        except Skip as e:
            s["notes"].append(f"{caption}: not drawn: {e}")
            print(f"report: skipped {caption}: {e}", file=sys.stderr)
            return None
        path = result[0] if isinstance(result, tuple) else result
        s["pictures"].append((path, caption))
        print(f"report: {path}")
        return result

    def write(self):
        md = [f"# {self.title}", ""]
        parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(self.title)}</title>",
                 "<style>body{font-family:sans-serif;max-width:1100px;margin:auto;padding:1em}"
                 "table{border-collapse:collapse;font-size:12px;margin:1em 0}td,th{border:1px solid #ccc;"
                 "padding:2px 6px;text-align:right}th{background:#f0f0f0}img{max-width:100%;margin:0.5em 0}"
                 ".note{color:#a33}.fact{font-family:monospace}</style></head><body>",
                 f"<h1>{html.escape(self.title)}</h1>",
                 f"<p>Generated {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')} by scripts/report.py.</p>"]
        for s in self.sections:
            md += [f"## {s['heading']}", ""]
            parts.append(f"<h2>{html.escape(s['heading'])}</h2>")
            if s["intro"]:
                md += [s["intro"], ""]
                parts.append(f"<p>{html.escape(s['intro'])}</p>")
            for header, rows in s["tables"]:
                md += [markdown_table(header, rows), ""]
                parts.append(html_table(header, rows))
            for fact in s["facts"]:
                md += [f"- {fact}"]
                parts.append(f"<p class='fact'>{html.escape(fact)}</p>")
            if s["facts"]:
                md.append("")
            for path, caption in s["pictures"]:
                data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
                md += [f"![{caption}]({Path(path).name})", ""]
                parts.append(f"<figure><img alt='{html.escape(caption)}' src='data:image/png;base64,{data}'>"
                             f"<figcaption>{html.escape(caption)} ({html.escape(Path(path).name)})</figcaption></figure>")
            for note in s["notes"]:
                md += [f"- *{note}*"]
                parts.append(f"<p class='note'>{html.escape(note)}</p>")
            md.append("")
        parts.append("</body></html>")
        (self.out / "report.html").write_text("\n".join(parts))
        (self.out / "summary.md").write_text("\n".join(md))
        with open(self.out / "report.json", "w") as f:
            json.dump(self.numbers, f, indent=1, default=float)
        print(f"report: {self.out / 'report.html'} ({sum(len(s['pictures']) for s in self.sections)} pictures)")


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


def report_scaling(rep, sweep):
    s = rep.section(f"Scaling law: {sweep.name}", sweep.description)
    s["tables"].append(run_table("scaling-law", sweep.runs))
    rep.picture(s, lambda: plot_loss_curves(sweep.finished(), rep.out, f"{sweep.name}_loss_curves.png",
                                            "training loss against compute, coloured by model size",
                                            by_compute=True), "training curves against compute")
    try:
        fits = scaling_fits(sweep)
    except Skip as e:
        s["notes"].append(f"loss against compute and IsoFLOP profiles: not drawn: {e}")
        return
    rep.picture(s, lambda: plot_loss_vs_compute(sweep, fits, rep.out), "loss against compute with the fitted law")
    rep.picture(s, lambda: plot_isoflop(sweep, fits, rep.out), "IsoFLOP profiles and the compute-optimal size")
    numbers = {"kind": "scaling-law", "law": fits["law"], "law_note": fits["law_note"], "floor": fits["floor"],
               "frontier": [{"budget": p["budget"], "C": p["C"], "N": p["N"], "L": p["L"], "run": p["run"].name}
                            for p in fits["frontier"]],
               "isoflop": {f"{b:.3g}": {k: v for k, v in f.items() if k != "coef"} | {"coef": list(f["coef"])}
                           for b, f in fits["isoflop"].items()},
               "n_opt_fit": fits["n_opt_fit"]}
    rep.numbers[sweep.name] = numbers
    law = fits["law"]
    if law:
        s["facts"].append(f"L(C) = {law['a']:.4g} * C^-{law['b']:.4f} + {law['c']:.4f}, fitted to the best run at "
                          f"each of {law['points']} budgets (rms relative residual {100 * law['rms_rel']:.2f}%)"
                          + (f"; the corpus's entropy floor is {fits['floor']:.4f}" if fits["floor"] else ""))
    else:
        s["facts"].append(f"no law fitted: {fits['law_note']}")
    # Loss by model (rows) and budget (columns): the IsoFLOP profiles as numbers.
    models = sorted({(p["N"], p["model"]) for p in fits["points"]})
    pivot = []
    for n, model in models:
        row = [model, f"{n:,.0f}"]
        for b in fits["budgets"]:
            p = [q for q in fits["points"] if q["N"] == n and q["budget"] == b]
            best = min((q for q in fits["points"] if q["budget"] == b), key=lambda q: q["L"])
            row.append(f"**{p[0]['L']:.4f}**" if p and p[0] is best else f"{p[0]['L']:.4f}" if p else "")
        pivot.append(row)
    s["tables"].append((["model", "N"] + [f"C = {b:.2g}" for b in fits["budgets"]], pivot))
    rows = []
    for b in fits["budgets"]:
        f = fits["isoflop"].get(b)
        best = min((p for p in fits["points"] if p["budget"] == b), key=lambda p: p["L"])
        if f and f.get("inside"):
            rows.append([f"{b:.3g}", f"{f['n_opt']:,.0f}", f"{f['l_opt']:.4f}", best["model"], f"{best['L']:.4f}"])
        else:
            sizes = [p["N"] for p in fits["points"] if p["budget"] == b]
            why = ("fewer than 3 sizes" if not f else "no minimum (the parabola opens downward)" if not f.get("n_opt")
                   else "below the smallest size" if f["n_opt"] < min(sizes) else "above the largest size")
            rows.append([f"{b:.3g}", why, "", best["model"], f"{best['L']:.4f}"])
    s["tables"].append((["budget C", "parabola's N_opt", "its loss", "best run", "its loss"], rows))
    if fits["n_opt_fit"]:
        nf = fits["n_opt_fit"]
        s["facts"].append(f"N_opt = {nf['coefficient']:.4g} * C^{nf['exponent']:.3f} over {nf['points']} budgets "
                          "(Chinchilla finds an exponent near 0.5)")


def report_runs(rep, runs):
    s = rep.section("Runs")
    s["tables"].append(run_table("custom", runs))
    rep.picture(s, lambda: plot_loss_curves(runs, rep.out, "loss_curves.png", "training loss"), "loss curves")


def report_comm(rep, path):
    # Pictures named after the file (np2.json -> np2_alpha_beta.png); the full name when two
    # files share a stem (np2.txt and np2.json).
    stem = re.sub(r"[^A-Za-z0-9_-]+", "_", Path(path).stem)
    if stem in rep.stems:
        stem = re.sub(r"[^A-Za-z0-9_-]+", "_", Path(path).name)
    rep.stems.add(stem)
    s = rep.section(f"Communication: {Path(path).name}")
    try:
        rows, fit = parse_comm(path)
    except OSError as e:
        s["notes"].append(f"cannot read {path}: {e}")
        return
    result = rep.picture(s, lambda: plot_comm_time(rows, fit, rep.out, stem), "time against message size, α-β fit")
    if fit.get("alpha_s") is not None and fit.get("beta_s_per_byte"):
        s["facts"].append(f"the link (ping-pong between two ranks, the bench's own fit): α = {fit['alpha_s'] * 1e6:.2f} µs, "
                          f"1/β = {1e-9 / fit['beta_s_per_byte']:.3f} GB/s")
    if result:
        fits = result[1]
        for label, f in fits.items():
            s["facts"].append(f"{label}: α = {f['alpha_s'] * 1e6:.1f} µs, 1/β = {1e-9 / f['beta_s_per_byte']:.3f} GB/s")
        rep.numbers[f"comm:{Path(path).name}"] = {"fits": fits, "reported": fit}
    rep.picture(s, lambda: plot_allreduce_algorithms(rows, rep.out, stem), "library against ring against parameter server")


def classify(path):
    p = Path(path)
    if p.is_dir():
        if (p / "results.csv").is_file():
            return "sweep"
        if (p / "metrics.jsonl").is_file() or (p / "summary.json").is_file():
            return "run"
        return None
    if p.is_file():
        if p.name == "results.csv":
            return "sweep-csv"
        return "comm"
    return None


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="docs/experiments.md shows what each picture means.")
    ap.add_argument("paths", nargs="*", help="run directories, sweep directories, bench comm outputs")
    ap.add_argument("--out", required=True, help="folder for the pictures, report.html, summary.md, report.json")
    ap.add_argument("--comm", action="append", default=[], help="a saved `trainer bench comm` output (text or JSON)")
    ap.add_argument("--title", default="feast experiments", help="the report's title")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rep = Report(out, args.title)
    loose, comm = [], list(args.comm)
    if not args.paths and not comm:
        ap.error("give at least one run directory, sweep directory or --comm file")
    for path in args.paths:
        kind = classify(path)
        if kind == "sweep" or kind == "sweep-csv":
            sweep = Sweep(path if kind == "sweep" else Path(path).parent)
            if sweep.kind == "systems":
                report_systems(rep, sweep)
            elif sweep.kind == "scaling-law":
                report_scaling(rep, sweep)
            else:
                s = rep.section(f"Sweep: {sweep.name}", sweep.description)
                s["tables"].append(run_table("custom", sweep.runs))
                rep.picture(s, lambda: plot_loss_curves(sweep.finished(), out, f"{sweep.name}_loss_curves.png",
                                                        "training loss"), "loss curves")
        elif kind == "run":
            loose.append(Run(path))
        elif kind == "comm":
            comm.append(path)
        else:
            print(f"report: error: {path} is no run directory (metrics.jsonl), sweep directory (results.csv) "
                  "or file", file=sys.stderr)
            return 2
    if loose:
        report_runs(rep, loose)
    for path in comm:
        report_comm(rep, path)
    rep.write()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
