"""Launching the trainer: one point's training run through the launcher, and [prepare]'s corpus.

Owns the command line of a run (mpirun or srun words, -np, -x, --set overrides, logging.dir),
its environment, its process group (a timeout or an interrupted sweep ends all its ranks), the
status and error a run ends with, whether a point finished before under the same settings, and
`trainer prepare-data` for the sweep's synthetic corpus.
"""

import json
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from pathlib import Path

from .results import read_json
from .sweepfile import SweepError


def launcher_env(sweep):
    env = dict(os.environ)
    env.update(sweep.env)
    if sweep.mpirun and os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return env


def run_command(sweep, point, run_dir):
    cmd = []
    if sweep.mpirun:
        # "{np}" in a word places the rank count (srun --ntasks={np}); otherwise mpirun's -np.
        if any("{np}" in str(w) for w in sweep.mpirun):
            cmd += [str(w).replace("{np}", str(point.np)) for w in sweep.mpirun]
        else:
            cmd += [str(w) for w in sweep.mpirun] + ["-np", str(point.np)]
        # Open MPI passes only the variables named with -x to ranks on other nodes.
        if Path(str(sweep.mpirun[0])).name in ("mpirun", "mpiexec", "orterun"):
            for k in sweep.env:
                cmd += ["-x", k]
    elif point.np != 1:
        raise SweepError(f"{sweep.file}: point {point.name} has np = {point.np} but sweep.mpirun = [] (no launcher)")
    cmd += [str(sweep.trainer), str(sweep.base)] + point.set_args()
    cmd += ["--set", f"logging.dir={run_dir}"]
    return cmd


def error_of(log_path, code):
    """The line of a failed run's output that says why: the trainer's last "error:" line, else
    the launcher's word on a signal, else the last line."""
    try:
        lines = [l.strip() for l in Path(log_path).read_text(errors="replace").splitlines()
                 if l.strip() and not l.startswith("$ ")]
    except OSError:
        lines = []
    for pattern in (r"\berror:", r"signal|segmentation fault|killed|aborted|exception|timed out"):
        found = [l for l in lines if re.search(pattern, l, re.I)]
        if found:
            return f"exit code {code}: {found[-1][:300]}"
    return f"exit code {code}: {lines[-1][:300] if lines else 'no output'}"


# The launchers running now, so that an interrupted sweep can end them (each is its own process
# group, out of reach of the terminal's Ctrl-C).
RUNNING = set()
RUNNING_LOCK = threading.Lock()


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_point(sweep, point, env):
    """Trains one point; returns (status, error, seconds)."""
    run_dir = sweep.out / "runs" / point.name
    log_path = sweep.out / "logs" / f"{point.name}.log"
    cmd = run_command(sweep, point, run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "sweep_point.json", "w") as f:
        json.dump(point.identity(), f, indent=1, sort_keys=True)
    start = time.monotonic()
    with open(log_path, "w") as log:
        log.write("$ " + shlex.join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=sweep.here,
                                start_new_session=True)  # its own process group: a timeout ends all ranks
        with RUNNING_LOCK:
            RUNNING.add(proc)
        try:
            code = proc.wait(timeout=sweep.timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            return "failed", f"timed out after {sweep.timeout_s:.0f} s (sweep.timeout_s)", time.monotonic() - start
        finally:
            with RUNNING_LOCK:
                RUNNING.discard(proc)
    seconds = time.monotonic() - start
    if code != 0:
        return "failed", error_of(log_path, code), seconds
    summary = read_json(run_dir / "summary.json")
    if summary is None:
        return "failed", "the run exited 0 but wrote no readable summary.json (a trainer without run summaries?)", seconds
    if summary.get("ended") != "finished":
        return "failed", f"summary.json says ended = {summary.get('ended')!r}", seconds
    return "finished", "", seconds


def finished_before(sweep, point):
    run_dir = sweep.out / "runs" / point.name
    summary = read_json(run_dir / "summary.json")
    recorded = read_json(run_dir / "sweep_point.json")
    done = summary is not None and summary.get("ended") == "finished"
    identical = recorded == point.identity()
    return done, done and identical, recorded is not None and not identical


def prepare_data(sweep, env, dry_run):
    p = sweep.prepare
    if not p:
        return
    if not p.get("synthetic", True) or "out" not in p:
        raise SweepError(f"{sweep.file}: [prepare] makes a synthetic corpus: synthetic = true, out = \"DIR\" "
                         "(relative to the sweep file), optional tokens and seed")
    cmd = [str(sweep.trainer), "prepare-data", "--synthetic", "--out", str((sweep.here / p["out"]).resolve())]
    for key in ("tokens", "seed", "val_fraction"):
        if key in p:
            cmd += [f"--{key.replace('_', '-')}", str(p[key])]
    print("sweep: " + shlex.join(cmd), flush=True)
    if dry_run:
        return
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        raise SweepError(f"preparing the data failed (exit {res.returncode}): {(res.stderr or res.stdout).strip()[-300:]}")
