"""The report on `trainer bench comm`: its saved output read, fitted and drawn.

Owns reading the bench's JSON or its printed tables into rows (op, algorithm, bytes, time,
prediction) and the link's alpha-beta fit it reports, a least-squares alpha + beta * bytes per
collective, the two pictures (time against size; library, ring and parameter server) and the
file's section of the report.
"""

import json
import math
import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from .figures import Skip, log_axes, new_figure


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


def timed_rows(rows):
    """The rows of the plain collectives (not the all-reduce algorithms) with a size and a time."""
    return [r for r in rows if r["bytes"] and r["time_s"] and not r["algorithm"]]


def collective_groups(rows):
    groups = {}
    for r in timed_rows(rows):
        groups.setdefault(r["op"] or "?", []).append(r)
    for g in groups.values():
        g.sort(key=lambda r: r["bytes"])
    return dict(sorted(groups.items()))


def collective_fits(rows, fit_reported):
    """{collective: {alpha_s, beta_s_per_byte}}, least squares for each collective of 2 or more
    sizes; the ping-pong is left to the bench's own fit of the link when it reports one."""
    fits = {}
    for op, g in collective_groups(rows).items():
        if "ping-pong" in op and fit_reported.get("alpha_s") is not None and fit_reported.get("beta_s_per_byte"):
            continue
        if len(g) >= 2:
            alpha, beta = fit_alpha_beta([r["bytes"] for r in g], [r["time_s"] for r in g])
            fits[op] = {"alpha_s": alpha, "beta_s_per_byte": beta}
    return fits


def comm_time_figure(rows, fit_reported, fits):
    """Every collective's time against its size, each series with its own least-squares line
    alpha + beta * bytes; the ping-pong between two ranks with the bench's own fit of the link."""
    groups = collective_groups(rows)
    if not groups:
        raise Skip("the communication file has no rows with bytes and time")
    fig, ax = new_figure(width=7.2, height=4.6)
    cmap = plt.get_cmap("tab10")
    for i, (op, g) in enumerate(groups.items()):
        color = cmap(i % 10)
        ping = "ping-pong" in op
        ax.plot([r["bytes"] for r in g], [r["time_s"] * 1e6 for r in g], "D" if ping else "o", color=color,
                ms=5 if ping else 4, label=op)
        xs = np.logspace(math.log10(g[0]["bytes"]), math.log10(g[-1]["bytes"]), 100)
        if ping and fit_reported.get("alpha_s") is not None and fit_reported.get("beta_s_per_byte"):
            a, b = fit_reported["alpha_s"], fit_reported["beta_s_per_byte"]
            ax.plot(xs, (a + b * xs) * 1e6, "-", color="black", lw=1.8,
                    label=f"link fit: α = {a * 1e6:.2f} µs, 1/β = {1e-9 / b:.2f} GB/s")
        elif op in fits:
            alpha, beta = fits[op]["alpha_s"], fits[op]["beta_s_per_byte"]
            ax.plot(xs, (alpha + beta * xs) * 1e6, "-", color=color, lw=1, alpha=0.6)
    ranks = next((r["ranks"] for r in timed_rows(rows) if r.get("ranks")), None)
    log_axes(ax)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("time (µs)")
    ax.set_title("collective time against size" + (f" ({int(ranks)} ranks)" if ranks else "")
                 + "; thin lines: α + β·bytes per collective", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    return fig


# Each way's measured line and α-β prediction. The bench predicts the library's all-reduce as
# the ring, so the two predictions are one curve: the ring's is drawn wide and pale underneath,
# the library's dashed and narrow on top, and both stay visible.
ALGORITHM_STYLE = {"library": dict(color="#4c72b0", marker="o", pred=dict(ls="--", lw=1.2, alpha=1.0, zorder=4)),
                   "ring": dict(color="#55a868", marker="s", pred=dict(ls="-", lw=4.0, alpha=0.35, zorder=3)),
                   "parameter server": dict(color="#c44e52", marker="^",
                                            pred=dict(ls="-.", lw=1.2, alpha=1.0, zorder=4))}


def allreduce_figure(rows):
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
    predictions = {}
    for k in kinds:
        g = sorted((r for r in data if kind(r) == k), key=lambda r: r["bytes"])
        style = ALGORITHM_STYLE[k]
        ax.plot([r["bytes"] for r in g], [r["time_s"] * 1e6 for r in g], "-", marker=style["marker"],
                color=style["color"], ms=4, label=k, zorder=5)
        predictions[k] = [(r["bytes"], r["predicted_s"]) for r in g if r.get("predicted_s")]
    for k in kinds:
        pred = predictions[k]
        if not pred:
            continue
        same = [o for o in kinds if o != k and predictions[o] and len(predictions[o]) == len(pred)
                and all(b1 == b2 and abs(t1 - t2) <= 1e-9 * t2 for (b1, t1), (b2, t2) in zip(pred, predictions[o]))]
        ax.plot([p[0] for p in pred], [p[1] * 1e6 for p in pred], color=ALGORITHM_STYLE[k]["color"],
                label=f"{k}: α-β prediction" + (f" (= {' and '.join(same)}'s)" if same else ""),
                **ALGORITHM_STYLE[k]["pred"])
    log_axes(ax)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("all-reduce time (µs)")
    ax.set_title("all-reduce: library, ring (2(N-1)/N P/B) and parameter server (N P/B)", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    return fig


def comm_figures(rows, fit, fits, stem):
    """(file name, caption, build) of each picture of a bench comm output, in the report's order."""
    return [(f"{stem}_alpha_beta.png", "time against message size, α-β fit",
             lambda: comm_time_figure(rows, fit, fits)),
            (f"{stem}_allreduce_algorithms.png", "library against ring against parameter server",
             lambda: allreduce_figure(rows))]


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
    fits = collective_fits(rows, fit)
    (time_picture, time_caption, time_build), algorithms = comm_figures(rows, fit, fits, stem)
    drawn = rep.picture(s, time_picture, time_caption, time_build)
    if fit.get("alpha_s") is not None and fit.get("beta_s_per_byte"):
        s["facts"].append(f"the link (ping-pong between two ranks, the bench's own fit): α = {fit['alpha_s'] * 1e6:.2f} µs, "
                          f"1/β = {1e-9 / fit['beta_s_per_byte']:.3f} GB/s")
    if drawn:
        for label, f in fits.items():
            s["facts"].append(f"{label}: α = {f['alpha_s'] * 1e6:.1f} µs, 1/β = {1e-9 / f['beta_s_per_byte']:.3f} GB/s")
        rep.numbers[f"comm:{Path(path).name}"] = {"fits": fits, "reported": fit}
    rep.picture(s, *algorithms)
