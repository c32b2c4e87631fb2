"""Runs a grid of training runs through mpirun and collects their summaries into one CSV.

    scripts/sweep.py SWEEP.toml [--out DIR] [--trainer PATH] [--set KEY=VALUE ...]
                     [--jobs N] [--dry-run] [--check]

A sweep file (configs/sweeps/*.toml; docs/experiments.md describes every key) names a base
config and the points to run: a grid of values for config keys, the rank count and the layout,
explicit runs, or model sizes x compute budgets for a scaling law (the steps of each run chosen
so that C = 6 N D). Each point trains into its own run directory, DIR/runs/<name>, with its
output in DIR/logs/<name>.log. Every finished run's summary.json (the trainer writes it at the
end of a run) becomes one row of DIR/results.csv, with the columns that identify the point; a
failed run is recorded with its error and the sweep goes on. Run again, the sweep skips every
point whose summary.json says "finished" for the same settings, so an interrupted sweep resumes.
With `plan = true` it also asks `trainer plan` for the run's layout and puts the predicted
columns (plan_*) beside the measured ones.

Exit status: 0 when every point finished, 1 when any failed, 2 for a bad sweep file or usage.
Only the standard library; runs with Debian's /usr/bin/python3 (3.11: tomllib).

This module owns the command line: its options and help, --check and --dry-run, the sweep's own
files (sweep.json, sweep.toml), skipping what finished before, the runs at a time, the progress
lines, Ctrl-C and SIGTERM, and the exit status.
"""

import argparse
import json
import os
import shlex
import shutil
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

from .launch import (RUNNING, RUNNING_LOCK, finished_before, kill_group, launcher_env, prepare_data, run_command,
                     run_point)
from .plan import check_point, ensure_calibrated, plan_columns
from .results import describe, read_json, row_of, write_csv
from .sweepfile import Sweep, SweepError


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="The sweep file format: docs/experiments.md.")
    ap.add_argument("sweep", help="the sweep file (configs/sweeps/*.toml)")
    ap.add_argument("--out", help="output folder (default: the file's sweep.out, else runs/sweeps/<name>)")
    ap.add_argument("--trainer", help="the trainer binary (default: the file's sweep.trainer, else build/trainer)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for every run (after the file's [set]); repeatable")
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time (default 1)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    ap.add_argument("--check", action="store_true",
                    help="check every point's config with the trainer (print-config; trainer plan when the sweep "
                         "plans: layout valid and fitting) without training; exit 1 if any is refused")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        raise SweepError("--jobs must be at least 1")
    sweep = Sweep(args.sweep, args.set, args.out, args.trainer)
    if (not args.dry_run or args.check) and not os.access(sweep.trainer, os.X_OK):
        raise SweepError(f"the trainer binary {sweep.trainer} is missing; build it (scripts/build.sh --target "
                         "trainer) or name it with --trainer")
    env = launcher_env(sweep)
    total = len(sweep.points)
    print(f"sweep {sweep.name} ({sweep.kind}): {total} run(s) of {os.path.relpath(sweep.base)} into {sweep.out}",
          flush=True)
    prepare_data(sweep, env, args.dry_run or args.check)

    if args.check:
        bad = 0
        for i, p in enumerate(sweep.points, 1):
            verdict = check_point(sweep, p, env)
            bad += not (verdict.startswith("ok") or verdict.startswith("config ok"))
            print(f"[{i}/{total}] {p.name} (np {p.np}): {verdict}", flush=True)
        print(f"sweep {sweep.name}: {total - bad} of {total} points pass the trainer's checks")
        return 1 if bad else 0
    if args.dry_run:
        for i, p in enumerate(sweep.points, 1):
            done, same, _ = finished_before(sweep, p)
            note = "  # finished before: would be skipped" if same else ""
            print(f"[{i}/{total}] {p.name}: {shlex.join(run_command(sweep, p, sweep.out / 'runs' / p.name))}{note}")
        return 0

    ensure_calibrated(sweep, env)
    (sweep.out / "logs").mkdir(parents=True, exist_ok=True)
    with open(sweep.out / "sweep.json", "w") as f:
        json.dump({"name": sweep.name, "kind": sweep.kind, "description": sweep.description,
                   "sweep_file": str(sweep.path), "base": str(sweep.base), "trainer": str(sweep.trainer),
                   "points": [{"name": p.name, **p.identity(), "columns": p.columns} for p in sweep.points]},
                  f, indent=1, default=str)
    shutil.copyfile(sweep.path, sweep.out / "sweep.toml")

    rows = {}
    lock = threading.Lock()
    interrupted_now = threading.Event()  # Ctrl-C or SIGTERM: the runs ended by it are not recorded
    failed = 0
    order = {p.name: i for i, p in enumerate(sweep.points)}

    def flush_csv():
        write_csv(sweep.out / "results.csv", [rows[n] for n in sorted(rows, key=order.get)])

    def plan_for(p, status):
        if not sweep.plan or status != "finished":
            return None
        return plan_columns(sweep, p, read_json(sweep.out / "runs" / p.name / "summary.json") or {}, env)

    todo = []
    for i, p in enumerate(sweep.points, 1):
        done, same, changed = finished_before(sweep, p)
        if same:
            plan = None
            if sweep.plan:
                old = read_json(sweep.out / "runs" / p.name / "plan.json")
                plan = old if old is not None else plan_for(p, "finished")
            seconds = (read_json(sweep.out / "runs" / p.name / "sweep_result.json") or {}).get("seconds")
            rows[p.name] = row_of(sweep, p, "finished", "", seconds, plan)
            print(f"[{i}/{total}] {p.name}: finished before, skipped ({describe(rows[p.name])})", flush=True)
        else:
            if changed:
                # The settings changed, finished or not: keep the old run aside, so that a
                # checkpoint made under other settings is never resumed. A run of the same
                # settings that did not finish is left in place and continues from its checkpoint.
                run_dir = sweep.out / "runs" / p.name
                aside = run_dir.with_name(f"{p.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
                run_dir.rename(aside)
                print(f"[{i}/{total}] {p.name}: settings changed since the last sweep; the old run moved "
                      f"to {aside.name}", flush=True)
            todo.append((i, p))
    if rows:
        flush_csv()

    def end_line(i, p, status, error, seconds, plan):
        if status != "finished":
            return (f"[{i}/{total}] {p.name}: FAILED after {seconds:.1f} s: {error} "
                    f"(log: {os.path.relpath(sweep.out / 'logs' / (p.name + '.log'))})")
        extra = describe(rows[p.name])
        expected, got = p.columns.get("parameters_expected"), rows[p.name].get("parameters")
        if expected and got and abs(got - expected) > 0.005 * expected:
            extra += f"; warning: the trainer counts N = {got:,.0f}, the sweep planned its steps for {expected:,.0f}"
        if plan and plan.get("plan_error"):
            extra += f"; plan: {plan['plan_error']}"
        return f"[{i}/{total}] {p.name}: finished in {seconds:.1f} s ({extra})"

    def work(item):
        """Runs one point and records it: its files, its row, results.csv and its end line. The
        worker that ran the point does all of it before it takes the next point, so each run's
        end line comes before the next run's start line (--jobs 1: strictly in order). Left to
        the main thread, the end line came after the worker had already started and announced
        the next run."""
        i, p = item
        with lock:
            print(f"[{i}/{total}] {p.name}: running (np {p.np}) ...", flush=True)
        status, error, seconds = run_point(sweep, p, env)
        with open(sweep.out / "runs" / p.name / "sweep_result.json", "w") as f:
            json.dump({"status": status, "error": error, "seconds": round(seconds, 2)}, f)
        plan = plan_for(p, status)
        if plan is not None:
            with open(sweep.out / "runs" / p.name / "plan.json", "w") as f:
                json.dump(plan, f, indent=1)
        with lock:
            if interrupted_now.is_set():
                return status
            rows[p.name] = row_of(sweep, p, status, error, seconds, plan)
            flush_csv()
            print(end_line(i, p, status, error, seconds, plan), flush=True)
        return status

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(work, item) for item in todo]
        try:
            for fut in as_completed(futures):
                failed += fut.result() != "finished"
        except KeyboardInterrupt:
            interrupted_now.set()
            for f in futures:
                f.cancel()
            with RUNNING_LOCK:
                for proc in list(RUNNING):
                    kill_group(proc)
            print("sweep: interrupted; results.csv holds the runs that ended; run the sweep again to resume",
                  file=sys.stderr)
            return 130
    ran = len(todo)
    print(f"sweep {sweep.name}: {total - failed} of {total} finished ({ran} run now, {total - ran} before)"
          f"{f', {failed} failed' if failed else ''}; results in {sweep.out / 'results.csv'}", flush=True)
    return 1 if failed else 0


def interrupted(signum, frame):
    raise KeyboardInterrupt


def run(argv):
    """The command: main's exit status; 2 with one line for a bad sweep file or command line."""
    # A batch scheduler's SIGTERM ends the sweep as Ctrl-C does: the runs in flight are ended
    # and results.csv keeps what finished.
    signal.signal(signal.SIGTERM, interrupted)
    try:
        return main(argv)
    except SweepError as e:
        print(f"sweep: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sweep: interrupted", file=sys.stderr)
        return 130
