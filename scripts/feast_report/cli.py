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

This module owns the command line: its options and help, which kind of input each path is, and
the sections drawn for each, in the order given.
"""

import argparse
import sys
from pathlib import Path

from .comm import report_comm
from .figures import loss_curves_figure
from .page import Report
from .runs import Run, Sweep
from .scaling import report_scaling
from .systems import report_systems
from .tables import run_table


def runs_figures(runs, stem=""):
    """(file name, caption, build) of the pictures of loose runs or of a sweep of no known kind."""
    name = f"{stem}_loss_curves.png" if stem else "loss_curves.png"
    return [(name, "loss curves", lambda: loss_curves_figure(runs, "training loss"))]


def report_runs(rep, runs):
    s = rep.section("Runs")
    s["tables"].append(run_table("custom", runs))
    rep.pictures(s, runs_figures(runs))


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
                rep.pictures(s, runs_figures(sweep.finished(), sweep.name))
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
