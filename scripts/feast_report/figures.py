"""The drawing every section of the report shares: figures, axes, saving, and the loss curves.

Owns the picture size and resolution, Skip (a picture its data does not allow, with the reason),
plain tick labels on log axes, writing a PNG, and the training-loss curves that systems sweeps,
scaling-law sweeps and single runs all draw.
"""

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

DPI = 100


class Skip(Exception):
    """A picture that cannot be drawn from the data at hand; the message says why."""


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
