#!/usr/bin/python3
"""report_figures_test.py [--out DIR] [PATH ...]: the layout of every picture scripts/report.py draws.

Each figure is built with the report's own builders (systems_figures, scaling_figures,
comm_figures, runs_figures: the figure before it is saved), drawn, and measured with
matplotlib's text extents:
  - no two texts overlap: tick labels, axis labels, titles, annotations, legend entries,
    colorbar labels; and no legend covers a text that is not its own;
  - every text and every legend lies inside the figure: nothing is cut off at the PNG's edge;
  - every log axis shows at least two tick labels;
  - a line drawn over another through the same points leaves it visible (the lower one wider,
    or the upper one dashed);
  - loss curves mention validation exactly when they draw validation points.
And the table of runs writes every number of 1,000 or more with thousands separators.

Without PATHs it checks a synthetic set written to a temporary folder: a systems sweep of 16
layouts whose times lie within one decade (evaluation off), a scaling-law sweep of 3 sizes x 3
budgets with validation, a single run and a `trainer bench comm` JSON whose library prediction is
the ring's. With PATHs (run and sweep directories, bench comm outputs, as report.py takes them) it
checks the figures of those instead; tests/cli/sweep_report.sh passes its real runs. --out DIR
also writes every figure there as PNG, to look at. Needs /usr/bin/python3 with numpy and
matplotlib; no trainer.
"""

import csv
import json
import math
import re
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from feast_report.cli import classify, runs_figures  # noqa: E402
from feast_report.comm import collective_fits, comm_figures, parse_comm  # noqa: E402
from feast_report.figures import Skip  # noqa: E402
from feast_report.runs import Run, Sweep  # noqa: E402
from feast_report.scaling import scaling_figures, scaling_fits  # noqa: E402
from feast_report.systems import systems_figures  # noqa: E402
from feast_report.tables import run_table  # noqa: E402

PAD = 0.5  # pixels two boxes may share (antialiasing) before they count as overlapping


# --- what a figure shows ---------------------------------------------------------------------

def shown_tick_labels(ax, axis, renderer):
    """The tick labels the axis draws: visible, not empty, at a tick within the axes' span."""
    frame = ax.get_window_extent(renderer)
    x = axis is ax.xaxis
    shown = []
    for locs, ticks in ((axis.get_majorticklocs(), axis.get_major_ticks), (axis.get_minorticklocs(),
                                                                           axis.get_minor_ticks)):
        for loc, tick in zip(locs, ticks(len(locs))):
            px = ax.transData.transform([(loc, 1.0) if x else (1.0, loc)])[0][0 if x else 1]
            lo, hi = (frame.x0, frame.x1) if x else (frame.y0, frame.y1)
            if not (np.isfinite(px) and lo - PAD <= px <= hi + PAD):
                continue
            for label in (tick.label1, tick.label2):
                if label.get_visible() and label.get_text().strip():
                    shown.append(label)
    return shown


def texts_of(fig, renderer):
    """[(description, Text)] of every text the figure draws."""
    out = []

    def add(text, what):
        if text is not None and text.get_visible() and text.get_text().strip():
            out.append((f"{what} {text.get_text()!r}", text))

    for ax in fig.axes:
        if not ax.get_visible():
            continue
        if ax.axison:
            for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
                if not axis.get_visible():
                    continue
                for label in shown_tick_labels(ax, axis, renderer):
                    add(label, f"{name} tick label")
                add(axis.label, f"{name} axis label")
                add(axis.get_offset_text(), f"{name} axis offset")
        for title in (ax.title, ax._left_title, ax._right_title):
            add(title, "title")
        for text in ax.texts:
            add(text, "annotation")
        legend = ax.get_legend()
        if legend:
            for text in legend.get_texts():
                add(text, "legend entry")
            add(legend.get_title(), "legend title")
    for text in fig.texts:
        add(text, "figure text")
    for legend in fig.legends:
        for text in legend.get_texts():
            add(text, "legend entry")
    return out


def legends_of(fig):
    return [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)


def overlap(a, b):
    return a.x0 < b.x1 - PAD and b.x0 < a.x1 - PAD and a.y0 < b.y1 - PAD and b.y0 < a.y1 - PAD


def inside(box, frame):
    return (frame.x0 - PAD <= box.x0 and box.x1 <= frame.x1 + PAD
            and frame.y0 - PAD <= box.y0 and box.y1 <= frame.y1 + PAD)


def hidden_lines(ax):
    """Pairs of lines through the same points where the upper one covers the lower one."""
    lines = [(line.get_zorder(), i, line) for i, line in enumerate(ax.get_lines())
             if line.get_visible() and line.get_linestyle() not in ("None", "none", "", " ")
             and len(line.get_xydata()) >= 2]
    lines.sort(key=lambda t: t[:2])
    found = []
    for j, (_, _, upper) in enumerate(lines):
        for _, _, lower in lines[:j]:
            a, b = upper.get_xydata(), lower.get_xydata()
            if a.shape != b.shape or not np.allclose(a, b, rtol=1e-6):
                continue
            wider = lower.get_linewidth() >= 2 * upper.get_linewidth()
            gaps = upper.get_linestyle() not in ("-", "solid") and lower.get_linestyle() != upper.get_linestyle()
            if not (wider or gaps):
                found.append(f"line {upper.get_label()!r} hides line {lower.get_label()!r} (the same points, "
                             f"{upper.get_linestyle()} {upper.get_linewidth()} over {lower.get_linestyle()} "
                             f"{lower.get_linewidth()})")
    return found


def problems(fig):
    """What is wrong with the figure's layout, one line each; [] when nothing."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    frame = fig.bbox
    texts = [(what, t, t.get_window_extent(renderer)) for what, t in texts_of(fig, renderer)]
    found = []
    for i, (what, _, box) in enumerate(texts):
        if not inside(box, frame):
            found.append(f"{what} lies outside the figure ({box.x0:.0f}..{box.x1:.0f} x {box.y0:.0f}..{box.y1:.0f} "
                         f"in {frame.width:.0f} x {frame.height:.0f})")
        for what2, _, box2 in texts[:i]:
            if overlap(box, box2):
                found.append(f"{what} overlaps {what2}")
    for legend in legends_of(fig):
        box = legend.get_window_extent(renderer)
        own = {id(t) for t in legend.get_texts()} | {id(legend.get_title())}
        if not inside(box, frame):
            found.append(f"a legend lies outside the figure ({box.x0:.0f}..{box.x1:.0f} x {box.y0:.0f}..{box.y1:.0f} "
                         f"in {frame.width:.0f} x {frame.height:.0f})")
        for what, t, tbox in texts:
            if id(t) not in own and overlap(box, tbox):
                found.append(f"a legend covers {what}")
    for ax in fig.axes:
        if not (ax.get_visible() and ax.axison):
            continue
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            if axis.get_scale() == "log" and axis.get_visible():
                labels = [t.get_text() for t in shown_tick_labels(ax, axis, renderer)]
                if len(labels) < 2:
                    found.append(f"the log {name} axis of {ax.get_title()[:40]!r} shows {len(labels)} tick label(s) "
                                 f"{labels}")
        found += hidden_lines(ax)
    return found


def mentions_validation(fig):
    renderer = fig.canvas.get_renderer()
    return any("validation" in t.get_text().lower() for _, t in texts_of(fig, renderer))


def draws_points(fig):
    """Whether some axes draws markers without a line (the validation dots of loss curves)."""
    return any(line.get_linestyle() in ("None", "none", "", " ") and line.get_marker() not in (None, "None", "")
               and len(line.get_xydata()) for ax in fig.axes for line in ax.get_lines())


def figures_of(paths):
    """(file name, build) of every figure report.py draws for the paths; the tables of runs."""
    figures, tables = [], []
    for path in paths:
        kind = classify(path)
        if kind in ("sweep", "sweep-csv"):
            sweep = Sweep(path if kind == "sweep" else Path(path).parent)
            if sweep.kind == "systems":
                figures += systems_figures(sweep)
                tables.append((sweep.name, run_table("systems", sweep.runs)))
            elif sweep.kind == "scaling-law":
                try:
                    fits = scaling_fits(sweep)
                except Skip:
                    fits = None
                figures += scaling_figures(sweep, fits)
                tables.append((sweep.name, run_table("scaling-law", sweep.runs)))
            else:
                figures += runs_figures(sweep.finished(), sweep.name)
                tables.append((sweep.name, run_table("custom", sweep.runs)))
        elif kind == "run":
            run = Run(path)
            figures += runs_figures([run], run.name)
            tables.append((run.name, run_table("custom", [run])))
        elif kind == "comm":
            rows, fit = parse_comm(path)
            stem = Path(path).name.replace(".", "_")
            figures += comm_figures(rows, fit, collective_fits(rows, fit), stem)
        else:
            raise SystemExit(f"report_figures_test: {path} is no run, sweep or bench comm output")
    return [(name, build) for name, _, build in figures], tables


# --- a synthetic set of runs -----------------------------------------------------------------

LAYOUTS = ["tp1pp1dp1", "tp2pp1dp1", "tp1pp2dp1", "tp1pp1dp2", "tp1pp1dp2_ps", "tp4pp1dp1", "tp1pp4dp1",
           "tp1pp1dp4", "tp2pp2dp1", "tp2pp1dp2", "tp1pp2dp2", "tp8pp1dp1", "tp1pp8dp1", "tp1pp1dp8",
           "tp2pp2dp2", "tp2pp4dp1"]
MIB = 1024.0 * 1024.0


def write_csv(path, rows):
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        for r in rows:
            w.writerow({k: "" if r.get(k) is None else r.get(k, "") for k in columns})


def write_run(run_dir, summary, metrics):
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps(summary))
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))


def systems_sweep(root, rng, sweep="sys16", names=LAYOUTS, spread=0.3):
    """Layouts at one global batch, the same math (the same losses), evaluation off: step times
    90 to 400 ms, planned from 1 - 2 spread to 1 + spread times measured (with spread 0.3, log axes
    over a decade and a half with one power of ten inside), tokens/s on both sides of 10,000."""
    out = root / sweep
    rows = []
    tokens_per_step, m = 2048, 4
    losses = [5.5 * math.exp(-s / 80) + 2.0 for s in range(1, 61)]
    for name in names:
        tp, pp, dp = (int(v) for v in re.match(r"tp(\d+)pp(\d+)dp(\d+)", name).groups())
        world = tp * pp * dp
        idle_formula = (pp - 1) / (m + pp - 1)
        ms = 380.0 / world ** 0.8 * (1 + idle_formula) * rng.uniform(1 - spread / 6, 1 + spread / 6) + 60
        split = {"compute_s": 0.7, "tp_comm_s": 0.08 * (tp > 1), "pp_idle_s": idle_formula,
                 "dp_comm_s": 0.05 * (dp > 1), "optimizer_s": 0.03, "data_s": 0.01, "other_s": 0.01}
        total = sum(split.values())
        split = {k: v / total * ms / 1e3 for k, v in split.items()}
        memory = [[4e6 / (tp * pp), 4e6 / (tp * pp), 8e6 / (tp * pp), 6e6 / (tp * dp), 1e6 / tp, 5e5 / dp]
                  for _ in range(world)]
        summary = {"ended": "finished", "world_size": world, "tp": tp, "pp": pp, "dp": dp, "micro_batches": m,
                   "dp_sync": "parameter-server" if name.endswith("_ps") else "allreduce", "parameters": 842496.0,
                   "tokens_per_step": tokens_per_step, "steps": 60, "final_loss": losses[-1],
                   "final_val_loss": None, "ms_per_step": ms, "tokens_per_s": tokens_per_step / ms * 1e3,
                   "efficiency": split["compute_s"] / (ms / 1e3),
                   "pp_idle_fraction": idle_formula * rng.uniform(1.0, 1.25), "pp_idle_formula": idle_formula,
                   "time_split": split, "memory_bytes_per_rank": memory}
        write_run(out / "runs" / name, summary,
                  [{"step": s, "loss": l * rng.uniform(1 - 1e-5, 1 + 1e-5)} for s, l in enumerate(losses, 1)])
        row = {"run": name, "status": "finished", "error": "", "np": world, "layout": name.split("_")[0]}
        row.update({k: v for k, v in summary.items() if not isinstance(v, (dict, list))})
        row.update(split)
        for i, part in enumerate(("parameters", "gradients", "optimizer", "activations")):
            row[f"memory_{part}_max"] = max(r[i] for r in memory)
            row[f"plan_memory_{part}"] = max(r[i] for r in memory) * rng.uniform(1 - spread / 3, 1 + spread / 3)
        plan_s = ms / 1e3 * rng.uniform(1 - 2 * spread, 1 + spread)
        row.update({"plan_time_step_s": plan_s, "plan_tokens_per_s": tokens_per_step / plan_s,
                    "plan_efficiency": row["efficiency"] * rng.uniform(0.9, 1.1), "seconds": 12.5,
                    "run_dir": f"runs/{name}"})
        rows.append(row)
    write_csv(out / "results.csv", rows)
    (out / "sweep.json").write_text(json.dumps({"name": sweep, "kind": "systems", "description": ""}))
    return out


def scaling_sweep(root, rng):
    """3 sizes x 3 budgets with validation every 20 steps and at the end."""
    out = root / "law9"
    rows = []
    tokens_per_step = 256
    for budget in (2e8, 4e8, 8e8):
        for model, n in (("L1-C8", 3448.0), ("L1-C16", 8432.0), ("L2-C24", 22176.0)):
            steps = max(1, round(budget / (6 * n * tokens_per_step)))
            loss = lambda s: 1.0 + 60.0 / n ** 0.34 + 25.0 / (s * tokens_per_step) ** 0.28
            metrics = [{"step": s, "loss": loss(s) * rng.uniform(0.98, 1.02)} for s in range(1, steps + 1)]
            for m in metrics:
                if m["step"] % 20 == 0 or m["step"] == steps:
                    m["val_loss"] = loss(m["step"])
            name = f"{model}_C{budget:.2g}".replace("+", "")
            summary = {"ended": "finished", "world_size": 1, "tp": 1, "pp": 1, "dp": 1, "parameters": n,
                       "tokens_per_step": tokens_per_step, "steps": steps, "tokens_seen": steps * tokens_per_step,
                       "final_loss": metrics[-1]["loss"], "final_val_loss": loss(steps), "tokens_per_s": 276195.0}
            write_run(out / "runs" / name, summary, metrics)
            rows.append({"run": name, "status": "finished", "error": "", "np": 1, "model": model, "budget": budget,
                         "parameters_expected": n, "training.steps": steps, **summary,
                         "compute_6ND": 6 * n * steps * tokens_per_step, "seconds": 0.6, "run_dir": f"runs/{name}"})
    write_csv(out / "results.csv", rows)
    (out / "sweep.json").write_text(json.dumps({"name": "law9", "kind": "scaling-law", "description": ""}))
    return out


def single_run(root):
    out = root / "run1"
    metrics = [{"step": s, "loss": 5.0 - s / 50} for s in range(1, 101)]
    for m in metrics[9::10]:
        m["val_loss"] = m["loss"] + 0.05
    write_run(out, {"ended": "finished", "world_size": 1, "steps": 100, "tokens_per_s": 18892.0,
                    "final_loss": metrics[-1]["loss"], "final_val_loss": metrics[-1]["val_loss"]}, metrics)
    return out


def comm_json(root):
    """Two ranks, 1 KiB to 16 KiB; the library predicted as the ring, as the bench does."""
    alpha, beta = 1.3e-6, 3.7e-10
    sizes = [1024 * 2 ** i for i in range(5)]
    ring = lambda b: 2 * alpha + b * beta
    doc = {"ranks": 2, "fit": {"alpha_s": alpha, "beta_s_per_byte": beta},
           "ops": [{"op": "allreduce", "bytes": b, "time_s": 3 * alpha + 1.2 * b * beta} for b in sizes],
           "pingpong": [{"bytes": float(b), "one_way_s": alpha + b * beta * 1.1} for b in sizes],
           "allreduce_algorithms": [
               {"algorithm": k, "bytes": b, "time_s": t * f, "predicted_s": t}
               for b in sizes for k, t, f in (("library", ring(b), 1.4), ("ring", ring(b), 1.7),
                                              ("parameter server", 2 * (alpha + b * beta), 1.05))]}
    path = root / "comm.json"
    path.write_text(json.dumps(doc))
    return path


def synthetic(root):
    rng = np.random.default_rng(7)
    # crowd: 32 runs of 8 layouts (two batch sizes, two schedules each), so close together that
    # their names cannot all stand beside their points: the figures name them in a legend.
    crowd = [f"{layout}_{variant}" for layout in LAYOUTS[:8] for variant in ("b8", "b16", "b8i", "b16i")]
    return [systems_sweep(root, rng), systems_sweep(root, rng, "crowd", crowd, spread=0.03),
            scaling_sweep(root, rng), single_run(root), comm_json(root)]


# --- the tests ---------------------------------------------------------------------------------

PATHS = []  # from the command line; empty: the synthetic set
OUT = None


class ReportFigures(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.paths = PATHS or synthetic(Path(cls.tmp.name))
        cls.figures, cls.tables = figures_of(cls.paths)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def built(self):
        """(name, Figure) of each figure the data allows."""
        for name, build in self.figures:
            try:
                fig = build()
            except Skip:
                continue
            try:
                yield name, fig
                if OUT:
                    fig.savefig(Path(OUT) / name)
            finally:
                plt.close(fig)

    def test_every_figure_is_drawn(self):
        names = [name for name, _ in self.built()]
        # The synthetic set has the data of every picture: 6 of each systems sweep, 3 of the
        # scaling law, the run's loss curves and 2 of bench comm.
        self.assertEqual(len(names), 18 if not PATHS else len(self.figures), names)

    def test_layout(self):
        for name, fig in self.built():
            with self.subTest(figure=name):
                found = problems(fig)
                self.assertEqual(found, [], f"{name}:\n  " + "\n  ".join(found))

    def test_validation_only_where_drawn(self):
        for name, fig in self.built():
            if name.endswith("loss_curves.png"):
                with self.subTest(figure=name):
                    fig.canvas.draw()
                    self.assertEqual(mentions_validation(fig), draws_points(fig),
                                     f"{name}: says validation: {mentions_validation(fig)}, draws validation points: "
                                     f"{draws_points(fig)}")

    def test_table_numbers_one_format(self):
        for name, (header, rows) in self.tables:
            with self.subTest(table=name):
                bare = [c for row in rows for c in row if re.fullmatch(r"-?\d{4,}(\.\d+)?", c)]
                self.assertEqual(bare, [], f"{name}: numbers without thousands separators beside {rows[0]}")


def main(argv):
    global OUT
    args = list(argv)
    if args[:1] == ["--out"]:
        OUT = args[1]
        Path(OUT).mkdir(parents=True, exist_ok=True)
        args = args[2:]
    PATHS.extend(args)
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
