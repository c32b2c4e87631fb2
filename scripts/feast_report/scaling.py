"""The report on a scaling-law sweep: loss against compute, the fitted law, IsoFLOP profiles.

Owns the fits (L(C) = a C^-b + c through the best run of each budget; a parabola in log N per
budget and the compute-optimal N against C), their pictures, and the sweep's section of the
report with the loss of every model at every budget.
"""

import math

import matplotlib.pyplot as plt
import numpy as np

from .figures import Skip, log_axes, loss_curves_figure, new_figure
from .runs import entropy_floor
from .tables import run_table


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


def loss_vs_compute_figure(fits):
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
        # Beneath the runs: the law passes through the best runs and would hide their line.
        ax.plot(cs, law["a"] * cs ** -law["b"] + law["c"], "-", color="black", lw=1.5, zorder=1.5,
                label=f"L = {law['a']:.3g} C^-{law['b']:.3f} + {law['c']:.3f}")
    if fits.get("floor"):
        ax.axhline(fits["floor"], color="gray", ls=":", lw=1, label=f"entropy floor {fits['floor']:.3f}")
    log_axes(ax)
    ax.set_xlabel("compute C = 6 N D (FLOPs)")
    kind = "validation" if all(p["loss_kind"] == "val" for p in pts) else "final (validation where measured)"
    ax.set_ylabel(f"{kind} loss (nats/token)")
    ax.set_title("loss against compute" + ("" if law else f" (no fit: {fits['law_note']})"), fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    return fig


def isoflop_figure(fits):
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
    log_axes(a1)
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
        log_axes(a2)
        a2.set_xlabel("compute budget C (FLOPs)")
        a2.set_ylabel("compute-optimal N")
        a2.set_title("compute-optimal model size (minima within the sampled sizes)", fontsize=9)
        a2.grid(True, which="both", alpha=0.3)
    else:
        a2.axis("off")
        a2.text(0.5, 0.5, "no parabola has its minimum\nwithin the sampled sizes", ha="center", va="center")
    return fig


def scaling_figures(sweep, fits):
    """(file name, caption, build) of each picture of a scaling-law sweep, in the report's order;
    the fitted pictures only with fits (scaling_fits)."""
    n = sweep.name
    figures = [(f"{n}_loss_curves.png", "training curves against compute",
                lambda: loss_curves_figure(sweep.finished(), "training loss against compute, coloured by model size",
                                           by_compute=True))]
    if fits:
        figures += [(f"{n}_loss_vs_compute.png", "loss against compute with the fitted law",
                     lambda: loss_vs_compute_figure(fits)),
                    (f"{n}_isoflop.png", "IsoFLOP profiles and the compute-optimal size", lambda: isoflop_figure(fits))]
    return figures


def report_scaling(rep, sweep):
    s = rep.section(f"Scaling law: {sweep.name}", sweep.description)
    s["tables"].append(run_table("scaling-law", sweep.runs))
    try:
        fits = scaling_fits(sweep)
    except Skip as e:
        fits = None
        note = f"loss against compute and IsoFLOP profiles: not drawn: {e}"
    rep.pictures(s, scaling_figures(sweep, fits))
    if fits is None:
        s["notes"].append(note)
        return
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
