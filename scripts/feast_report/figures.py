"""The drawing every section of the report shares: figures, axes, saving, and the loss curves.

Owns the picture size and resolution and its layout, Skip (a picture its data does not allow,
with the reason), the ticks of log axes, labels beside points that overlap nothing, writing a
PNG, and the training-loss curves that systems sweeps, scaling-law sweeps and single runs all
draw. Each picture is built by a function that returns its Figure unsaved (tests/scripts checks
its layout); save() writes it.
"""

import math
import re

import matplotlib
import matplotlib.axis
import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.transforms import Bbox

DPI = 100


class Skip(Exception):
    """A picture that cannot be drawn from the data at hand; the message says why."""


def new_figure(ncols=1, width=7.0, height=4.2, nrows=1, **kw):
    # Constrained layout fits titles, tick labels, colorbars and legends placed outside the axes
    # inside the figure, so that the PNG is the figure as laid out, nothing cut off.
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, height), dpi=DPI, layout="constrained", **kw)
    return fig, axes


def tick_text(v, _=None):
    """A log axis's tick label: plain (0.8, 20, 16000) between 10^-3 and 10^5, else a power of ten."""
    if v <= 0:
        return ""
    if 1e-3 <= v < 1e5:
        return f"{v:.5g}"
    exp = math.floor(math.log10(v) + 1e-9)
    mantissa = v / 10 ** exp
    if abs(mantissa - 1) < 1e-6:
        return f"$10^{{{exp}}}$"
    return f"${mantissa:.3g}\\times10^{{{exp}}}$"


class LogTicks(matplotlib.ticker.LogLocator):
    """Labelled ticks of a log axis, at least two whatever its span: powers of ten when the axis
    spans enough decades (every k-th where their labels would not fit), else 1-3-10, 1-2-5 or
    every digit within the decade, else plain steps for a span under one decade. Matplotlib's own
    log ticks label decades only, so an axis inside one decade (measured against planned step
    times, a loss from 4.6 to 5.3) had one label or none."""

    def tick_values(self, vmin, vmax):
        lo, hi = sorted((vmin, vmax))
        if hi <= 0:
            return super().tick_values(vmin, vmax)
        lo = lo if lo > 0 else hi / 10
        decades = range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
        within = lambda values: [v for v in values if lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9)]
        candidates = [within(s * 10.0 ** d for d in decades for s in subs)
                      for subs in ((1,), (1, 3), (1, 2, 5), tuple(range(1, 10)))]
        best, k = candidates[0], 1
        while len(best) > 2 and not self.fits(best):
            k += 1
            best = candidates[0][::k]
        for ticks in candidates[1:]:
            if len(best) >= 3:
                break
            if len(ticks) > len(best) and self.fits(ticks):
                best = ticks
        if len(best) < 3:  # within a decade or two: plain steps read better than a lone 10
            steps = [v for v in within(matplotlib.ticker.MaxNLocator(4, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi))
                     if v > 0]
            if len(steps) > len(best) and self.fits(steps):
                best = steps
        return np.array(best)

    def fits(self, ticks):
        """Whether the ticks' labels fit between their neighbours along the axis, estimated from
        the labels' lengths (matplotlib's get_tick_space assumes 3 characters a label and even
        spacing; "6x10^8" is longer, and 5 and 6 lie close on a log axis)."""
        if self.axis is None or len(ticks) < 2:
            return True
        lo, hi = sorted(self.axis.get_view_interval())
        if lo <= 0 or hi <= lo:
            return True
        x = isinstance(self.axis, matplotlib.axis.XAxis)
        length = self.axis.axes.bbox.width if x else self.axis.axes.bbox.height
        size = self.axis.get_major_ticks(1)[0].label1.get_fontsize() * self.axis.figure.dpi / 72
        at = [length * math.log(t / lo) / math.log(hi / lo) for t in ticks]
        if x:
            # The characters drawn: "$6\\times10^{8}$" is "6x108".
            chars = [len(re.sub(r"[${}^]", "", tick_text(t).replace("\\times", "x"))) for t in ticks]
            need = [0.7 * size * (c1 + c2) / 2 + size for c1, c2 in zip(chars, chars[1:])]
        else:
            need = [1.6 * size] * (len(ticks) - 1)
        return all(b - a >= n for a, b, n in zip(at, at[1:], need))


def log_ticks(axis):
    """LogTicks and tick_text on one axis (an Axes' xaxis or yaxis, a colorbar's long axis);
    minor ticks at every digit, unlabelled, for the grid."""
    axis.set_major_locator(LogTicks())
    axis.set_major_formatter(matplotlib.ticker.FuncFormatter(tick_text))
    axis.set_minor_locator(matplotlib.ticker.LogLocator(subs=np.arange(2, 10)))
    axis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def log_axes(ax, which="xy"):
    """A log scale with LogTicks on the x and/or y axis of ax."""
    for name in which:
        (ax.set_xscale if name == "x" else ax.set_yscale)("log")
        log_ticks(ax.xaxis if name == "x" else ax.yaxis)


def log_colorbar(cbar):
    cbar.locator = LogTicks()
    cbar.formatter = matplotlib.ticker.FuncFormatter(tick_text)
    cbar.minorlocator = matplotlib.ticker.LogLocator(subs=np.arange(2, 10))
    cbar.ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def _overlap(a, b, pad=1.0):
    return a.x0 - pad < b.x1 and b.x0 - pad < a.x1 and a.y0 - pad < b.y1 and b.y0 - pad < a.y1


def label_points(ax, points, fontsize=6):
    """Writes each (x, y, text) of points beside its point, where it overlaps no other label, no
    marker, no legend and stays inside the axes: the nearest free place around the point, then
    farther out with a leader line. Returns the labels; None, and no label written, when some
    point has no free place (the caller then names the points in a legend instead).

    It needs the axes as they will be drawn: it draws the figure once and then keeps its layout
    (set_layout_engine("none")); a caller that adds a legend afterwards turns the layout back on.
    """
    fig = ax.figure
    fig.canvas.draw()
    fig.set_layout_engine("none")
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    taken = [t.get_window_extent(renderer) for t in ax.texts]
    if ax.get_legend():
        taken.append(ax.get_legend().get_window_extent(renderer))
    centres = [ax.transData.transform((x, y)) for x, y, _ in points]
    r = 5.0 * fig.dpi / 72  # a marker's half size (ms 7) and a margin, in pixels
    taken += [Bbox.from_extents(cx - r, cy - r, cx + r, cy + r) for cx, cy in centres]
    labels = []
    for (x, y, text), (cx, cy) in zip(points, centres):
        probe = ax.text(0, 0, text, fontsize=fontsize)
        box = probe.get_window_extent(renderer)
        w, h = box.width, box.height
        probe.remove()
        place = None
        for ring, d in enumerate((r + 1, 2.5 * r, 4 * r, 6 * r, 9 * r)):
            for dx, dy in ((d, 0.2 * d), (d, -h - 0.2 * d), (-d - w, 0.2 * d), (-d - w, -h - 0.2 * d),
                           (-w / 2, d), (-w / 2, -d - h), (d, -h / 2), (-d - w, -h / 2)):
                b = Bbox.from_bounds(cx + dx, cy + dy, w, h)
                inside = frame.x0 + 2 <= b.x0 and b.x1 <= frame.x1 - 2 and frame.y0 + 2 <= b.y0 and b.y1 <= frame.y1 - 2
                if inside and not any(_overlap(b, t) for t in taken):
                    place = (dx, dy, ring, b)
                    break
            if place:
                break
        if place is None:
            for label in labels:
                label.remove()
            return None
        dx, dy, ring, b = place
        taken.append(b)
        labels.append(ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset pixels", fontsize=fontsize,
                                  ha="left", va="bottom",
                                  arrowprops=dict(arrowstyle="-", color="gray", lw=0.5, shrinkA=0, shrinkB=3)
                                  if ring else None))
    return labels


def save(fig, out, name):
    path = out / name
    fig.savefig(path, dpi=DPI)  # the figure as laid out (new_figure): what tests/scripts checks
    plt.close(fig)
    return path


def loss_curves_figure(runs, title, by_compute=False):
    runs = [r for r in runs if r.metrics]
    if not runs:
        raise Skip("no run has a metrics.jsonl with steps")
    fig, ax = new_figure()
    cmap = plt.get_cmap("viridis" if by_compute else "tab10")
    sizes = sorted({r.get("parameters") or 0 for r in runs})
    curves, dots = [], []  # curves: [x, loss, colour, names], one per group of runs that coincide
    for i, r in enumerate(runs):
        steps = np.array([m["step"] for m in r.metrics if "loss" in m], float)
        loss = smooth(np.array([m["loss"] for m in r.metrics if "loss" in m], float))
        if by_compute:
            n, tps = r.get("parameters"), r.get("tokens_per_step")
            if not n or not tps:
                continue
            x = 6.0 * n * tps * steps
            color = cmap(sizes.index(r.get("parameters") or 0) / max(1, len(sizes) - 1))
        else:
            x = steps
            color = cmap(i % 10)
        # Runs of the same math at other layouts draw the same curve: one line, named after all
        # of them, rather than one line hiding the others.
        same = next((c for c in curves if np.array_equal(c[0], x) and np.allclose(c[1], loss, rtol=1e-3, atol=0)),
                    None)
        if same:
            same[3].append(r.name)
            color = same[2]
        else:
            curves.append([x, loss, color, [r.name]])
        vals = [(m["step"], m["val_loss"]) for m in r.metrics if m.get("val_loss") is not None]
        if vals:
            vx = np.array([v[0] for v in vals], float)
            if by_compute:
                vx = 6.0 * r.get("parameters") * r.get("tokens_per_step") * vx
            dots.append((vx, [v[1] for v in vals], color))
    named = not by_compute and len(curves) <= 12
    for x, loss, color, names in curves:
        label = None
        if named:
            label = " = ".join(names) if len(names) <= 3 else f"{names[0]} and {len(names) - 1} others (one curve)"
        ax.plot(x, loss, color=color, lw=1.0, alpha=0.85, label=label)
    for vx, vy, color in dots:
        ax.plot(vx, vy, "o", color=color, ms=4)
    validation = bool(dots)
    handles, labels = ax.get_legend_handles_labels()
    # The dots explained only where there are dots: a run without evaluation has none.
    if validation:
        handles.append(Line2D([], [], ls="none", marker="o", ms=4, color="gray"))
        labels.append("validation loss (dots)")
    if by_compute:
        log_axes(ax, "x")
        ax.set_xlabel("training compute 6 N D (FLOPs)")
        sm = plt.cm.ScalarMappable(cmap=cmap, norm=matplotlib.colors.LogNorm(max(min(sizes), 1), max(max(sizes), 2)))
        log_colorbar(fig.colorbar(sm, ax=ax, label="parameters N"))
    else:
        ax.set_xlabel("step")
    if handles:
        ax.legend(handles, labels, fontsize=7, ncol=2 if len(handles) > 6 else 1)
    log_axes(ax, "y")
    ax.set_ylabel("training loss (nats/token)")
    if any(len(r.metrics) >= 100 for r in runs):
        title += "\n(moving mean over 2% of each run)"  # a line of its own: one line was wider than the picture
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    return fig


def smooth(values):
    """A centred moving mean over 2% of the points (none under 100): single-step losses of small
    batches are noisy enough to hide the curves."""
    k = len(values) // 50
    if k < 2:
        return values
    kernel = np.ones(k) / k
    padded = np.concatenate([np.full(k // 2, values[0]), values, np.full(k - 1 - k // 2, values[-1])])
    return np.convolve(padded, kernel, mode="valid")
