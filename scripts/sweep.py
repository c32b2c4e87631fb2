#!/usr/bin/python3
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
"""

import argparse
import csv
import itertools
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Keys of the [sweep] table, with what they mean (the error for an unknown key lists them).
SWEEP_KEYS = {
    "name": "the sweep's name (default: the file's stem)",
    "kind": '"systems", "scaling-law" or "custom": which pictures report.py draws',
    "description": "one line saying what the sweep measures",
    "base": "the base config, relative to this file",
    "trainer": "the trainer binary (default: build/trainer of this repository)",
    "out": "output folder (default: runs/sweeps/<name> of this repository)",
    "mpirun": 'the launcher and its options, a list (default ["mpirun", "--oversubscribe", "--bind-to", "none"]); '
              '"-np N" is appended unless a word holds "{np}" (["srun", "--ntasks={np}"]); [] = none (np 1)',
    "env": "environment variables for every run, a table (also passed to mpirun with -x)",
    "np": "rank count of points that do not set one (default 1)",
    "timeout_s": "seconds a run may take before it is killed and recorded as failed (default 3600)",
    "plan": "ask `trainer plan <run config> --gpus NP --json` for each run (default false)",
    "plan_args": "extra arguments for trainer plan, a list",
}
TABLES = {"sweep", "prepare", "set", "grid", "runs", "scaling"}
# Short names for the layout degrees.
LAYOUT_KEYS = {"tp": "parallel.tp", "pp": "parallel.pp", "dp": "parallel.dp"}
# Trainer defaults (docs/config.md) used when neither the base config nor the sweep sets a key
# that the sweep needs to compute steps from.
DEFAULTS = {"model.arch": "gpt2", "model.n_layer": 4, "model.n_head": 4, "model.n_embd": 128,
            "model.vocab_size": 256, "model.max_seq_len": 256, "training.seq_len": 64,
            "training.batch_size": 0, "model.tie_embeddings": None}
# The summary.json keys in the order the CSV shows them (others follow, sorted).
SUMMARY_ORDER = [
    "ended", "world_size", "tp", "pp", "dp", "zero_stage", "dp_sync", "schedule", "micro_batch_size",
    "micro_batches", "seq_len", "tokens_per_step", "arch", "n_layer", "n_head", "n_embd", "vocab_size",
    "parameters", "flops_per_token", "first_step", "steps", "measured_steps", "tokens_seen", "train_seconds",
    "final_loss", "final_val_loss", "compute_6ND", "tokens_per_s", "ms_per_step", "compute_s", "tp_comm_s",
    "pp_idle_s", "dp_comm_s", "optimizer_s", "data_s", "other_s", "dp_reduce_s", "dp_reduce_exposed_s",
    "pp_idle_fraction", "pp_idle_formula",
    "efficiency", "mfu", "peak_tflops_per_rank", "peak_source", "memory_parameters_max", "memory_gradients_max",
    "memory_optimizer_max", "memory_activations_max", "memory_total_max"]
# Config keys holding paths, and the words they take that are no path.
PATH_KEYS = {"data.train", "data.val", "logging.dir", "checkpoint.dir", "checkpoint.resume", "model.init_from",
             "model.tokenizer"}
PATH_WORDS = {"auto", "never", "byte"}
# Shorter words for run names made from the keys that vary.
SHORT_NAMES = {"micro_batch_size": "mbs", "num_micro_batches": "m", "zero_stage": "zero", "n_layer": "L",
               "n_embd": "C", "n_head": "H", "batch_size": "B", "seq_len": "T"}
MEMORY_PARTS = ["parameters", "gradients", "optimizer", "activations"]


class SweepError(Exception):
    """A bad sweep file or command line: printed as one line, exit status 2."""


# ----------------------------------------------------------------------------- the sweep file

def flatten(table, prefix=""):
    """{"training": {"steps": 5}} and {"training.steps": 5} both become {"training.steps": 5}."""
    out = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def toml_value(value):
    """A Python value as the TOML text `--set` reads."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SweepError(f"{value} is no TOML value a config accepts")
        text = repr(value)
        return text if any(c in text for c in ".en") else text + ".0"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: JSON's escapes are TOML's
    if isinstance(value, list):
        return "[" + ",".join(toml_value(v) for v in value) + "]"
    raise SweepError(f"cannot pass {value!r} ({type(value).__name__}) to --set")


def parse_layout(text, where):
    """"tp2pp1dp2" (any order, "x", "-", "_" or spaces between) -> {"tp": 2, "pp": 1, "dp": 2}."""
    found = dict((k, int(v)) for k, v in re.findall(r"(tp|pp|dp)\s*=?\s*(\d+)", str(text)))
    if not re.fullmatch(r"(\s*(tp|pp|dp)\s*=?\s*\d+\s*[x_,-]?)+\s*", str(text)):
        raise SweepError(f"{where}: layout {text!r} is not like \"tp2pp1dp2\" (degrees of tp, pp and dp)")
    return found


def positive_int(value, where):
    """A rank count or step count as the file gives it: an integer >= 1, not "two" or 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SweepError(f"{where} = {value!r} must be an integer >= 1")
    return value


def positive_number(value, where):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise SweepError(f"{where} = {value!r} must be a number > 0")
    return float(value)


def gpt2_parameters(cfg):
    """N of model/flop_count.h for a GPT-2: every parameter but the vocabulary padding (the
    token embedding is tied to the head and counts once). The summary's "parameters" is the
    trainer's own count; results.csv keeps both and the sweep warns when they differ."""
    L, C = cfg["model.n_layer"], cfg["model.n_embd"]
    V, T = cfg["model.vocab_size"], cfg["model.max_seq_len"]
    per_layer = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (4 * C * C + 4 * C) + (4 * C * C + C)
    return V * C + T * C + L * per_layer + 2 * C


class Point:
    """One run of the sweep: its name, rank count, --set overrides and identifying columns."""

    def __init__(self, name, np_, overrides, columns):
        self.name, self.np, self.overrides, self.columns = name, np_, overrides, columns

    def identity(self):
        return {"np": self.np, "overrides": {k: toml_value(v) for k, v in self.overrides.items()}}


class Sweep:
    def __init__(self, path, cli_sets, out=None, trainer=None):
        self.path = Path(path).resolve()
        try:
            with open(self.path, "rb") as f:
                doc = tomllib.load(f)
        except FileNotFoundError:
            raise SweepError(f"cannot read sweep file '{path}': no such file")
        except tomllib.TOMLDecodeError as e:
            raise SweepError(f"{path}: TOML syntax error: {e}")
        self.file = str(path)
        for key in doc:
            if key not in TABLES:
                raise SweepError(f"{path}: unknown table '{key}'; a sweep file has "
                                 + ", ".join(f"[{t}]" for t in sorted(TABLES)))
        here = self.path.parent
        s = doc.get("sweep", {})
        for key in s:
            if key not in SWEEP_KEYS:
                raise SweepError(f"{path}: unknown key 'sweep.{key}'; valid keys: " + ", ".join(SWEEP_KEYS))
        self.name = s.get("name", self.path.stem)
        self.kind = s.get("kind", "custom")
        if self.kind not in ("systems", "scaling-law", "custom"):
            raise SweepError(f'{path}: sweep.kind = "{self.kind}" is not "systems", "scaling-law" or "custom"')
        self.description = s.get("description", "")
        if "base" not in s:
            raise SweepError(f'{path}: sweep.base is missing; name the base config, e.g. base = "../demo.toml"')
        self.base = (here / s["base"]).resolve()
        if not self.base.is_file():
            raise SweepError(f"{path}: sweep.base = \"{s['base']}\": no such file {self.base}")
        self.trainer = Path(trainer).resolve() if trainer else (
            (here / s["trainer"]).resolve() if "trainer" in s else REPO / "build" / "trainer")
        self.out = Path(out).resolve() if out else (
            (here / s["out"]).resolve() if "out" in s else REPO / "runs" / "sweeps" / self.name)
        self.mpirun = s.get("mpirun", ["mpirun", "--oversubscribe", "--bind-to", "none"])
        if not isinstance(self.mpirun, list):
            raise SweepError(f"{path}: sweep.mpirun must be a list of words, e.g. [\"mpirun\", \"--oversubscribe\"]")
        env = s.get("env", {})
        if not isinstance(env, dict):
            raise SweepError(f'{path}: sweep.env must be a table of variables, e.g. env = {{ OMP_NUM_THREADS = "1" }}')
        self.env = {k: str(v) for k, v in env.items()}
        self.default_np = positive_int(s.get("np", 1), f"{path}: sweep.np")
        self.timeout_s = positive_number(s.get("timeout_s", 3600), f"{path}: sweep.timeout_s")
        self.plan = s.get("plan", False)
        if not isinstance(self.plan, bool):
            raise SweepError(f"{path}: sweep.plan = {self.plan!r} must be true or false")
        plan_args = s.get("plan_args", [])
        if not isinstance(plan_args, list):
            raise SweepError(f'{path}: sweep.plan_args must be a list of words, e.g. ["--gpu-tflops", "1"]')
        self.plan_args = [str(a) for a in plan_args]
        self.prepare = doc.get("prepare")
        self.here = here

        fixed = flatten(doc.get("set", {}))
        for item in cli_sets:
            if "=" not in item:
                raise SweepError(f"--set '{item}': expected key=value, e.g. --set training.steps=5")
            key, text = item.split("=", 1)
            try:
                value = tomllib.loads(f"v = {text}")["v"]
            except tomllib.TOMLDecodeError:
                value = text  # a bare word, as the trainer's --set reads it
            # Runs start in the sweep file's folder (so that the file's own paths hold); a path on
            # this command line is relative to the current one, as on any command line.
            if key in PATH_KEYS and isinstance(value, str) and value and value not in PATH_WORDS \
                    and not os.path.isabs(value):
                value = os.path.abspath(value)
            fixed[key] = value
        self.fixed = fixed
        with open(self.base, "rb") as f:
            self.base_config = flatten(tomllib.load(f))
        self.points = self._points(doc)
        if not self.points:
            raise SweepError(f"{path}: the sweep has no points; give [grid] values, [[runs]] or [scaling]")

    # A point's settings: "np", "layout", "name", tp/pp/dp or config keys.
    def _normalise(self, settings, where):
        np_, name, columns, overrides = None, None, {}, {}
        for key, value in settings.items():
            if key == "name":
                name = str(value)
            elif key == "np":
                np_ = positive_int(value, f"{self.file}: {where}: np")
                columns["np"] = np_
            elif key == "layout":
                degrees = parse_layout(value, where)
                for k, v in degrees.items():
                    positive_int(v, f"{self.file}: {where}: layout {value!r}: {k}")
                columns["layout"] = str(value)
                for k, v in degrees.items():
                    overrides[LAYOUT_KEYS[k]] = v
                if np_ is None and "np" not in settings and len(degrees) == 3:
                    np_ = degrees["tp"] * degrees["pp"] * degrees["dp"]
            elif key in LAYOUT_KEYS:
                overrides[LAYOUT_KEYS[key]] = value
                columns[LAYOUT_KEYS[key]] = value
            elif "." in key:
                overrides[key] = value
                columns[key] = value
            else:
                raise SweepError(f"{self.file}: {where}: unknown key '{key}'; a point sets np, layout, name, "
                                 "tp, pp, dp or config keys as section.key")
        return np_, name, columns, overrides

    def _points(self, doc):
        grid = flatten(doc.get("grid", {}))
        for key, values in grid.items():
            if not isinstance(values, list) or not values:
                raise SweepError(f"{self.file}: grid.{key} must be a non-empty list of values")
        # The grid's points (every combination of its lists), then the explicit runs.
        settings = [dict(zip(grid, vals)) for vals in itertools.product(*grid.values())] if grid else []
        runs = doc.get("runs", [])
        if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
            raise SweepError(f"{self.file}: runs must be tables, one [[runs]] per run")
        settings += [flatten(r) for r in runs]
        if not settings:
            settings = [{}]  # the base config as it is, once
        raw = []  # (np, name, columns, overrides)
        for i, point in enumerate(settings):
            raw.append(self._normalise(point, f"point {i + 1} ({json.dumps(point)})"))
        if "scaling" in doc:
            if "grid" in doc or "runs" in doc:
                raise SweepError(f"{self.file}: [scaling] makes its own points; drop [grid] and [[runs]]")
            raw = self._scaling_points(doc["scaling"])
        # Names from the columns that vary between points, unless given.
        varying = [k for k in dict.fromkeys(k for r in raw for k in r[2])
                   if len({json.dumps(r[2].get(k), sort_keys=True) for r in raw}) > 1]
        points, seen = [], set()
        for i, (np_, name, columns, overrides) in enumerate(raw):
            np_ = np_ if np_ is not None else self.default_np
            if name is None:
                parts = []
                for k in varying:
                    if k in columns:
                        v = columns[k]
                        short = SHORT_NAMES.get(k.split(".")[-1], k.split(".")[-1])
                        parts.append(str(v) if k in ("layout", "model") else f"{short}{v}")
                name = "_".join(parts) or "run"
            name = re.sub(r"[^A-Za-z0-9.+=-]+", "_", name).strip("_") or "run"
            if name in seen:
                name = f"{name}_{i}"
            seen.add(name)
            columns = {"np": np_, **columns}
            points.append(Point(name, np_, {**self.fixed, **overrides}, columns))
        return points

    def _merged(self, overrides):
        cfg = dict(DEFAULTS)
        cfg.update(self.base_config)
        cfg.update(self.fixed)
        cfg.update(overrides)
        return cfg

    def _scaling_points(self, sc):
        where = f"{self.file}: [scaling]"
        for key in sc:
            if key not in ("budgets", "models", "warmup_fraction", "min_steps"):
                raise SweepError(f"{where}: unknown key '{key}'; [scaling] has budgets, warmup_fraction, min_steps "
                                 "and [[scaling.models]]")
        budgets, models = sc.get("budgets"), sc.get("models")
        if not budgets or not models:
            raise SweepError(f"{where} needs budgets = [FLOPs, ...] and at least one [[scaling.models]]")
        if not isinstance(budgets, list):
            raise SweepError(f"{where}: budgets must be a list of FLOP counts, e.g. [1e13, 3e13]")
        for budget in budgets:
            positive_number(budget, f"{where}: a budget")
        warmup_fraction = float(sc.get("warmup_fraction", 0.0))
        min_steps = int(sc.get("min_steps", 1))
        prepared = []  # (model name, N, np, columns, overrides), in the file's order
        for i, model in enumerate(models):
            model = flatten(model)
            model_name = str(model.pop("name", f"model{i}"))
            given_n = model.pop("parameters", None)
            np_, _, columns, overrides = self._normalise(model, f"scaling.models[{i}]")
            cfg = self._merged(overrides)
            tokens_per_step = int(cfg["training.batch_size"]) * int(cfg["training.seq_len"])
            if tokens_per_step <= 0:
                raise SweepError(f"{where}: training.batch_size is 0 (inferred from the layout); set it in [set] "
                                 "so that every model sees the same tokens per step")
            if given_n is not None:
                n = float(given_n)
            elif cfg["model.arch"] == "gpt2":
                n = float(gpt2_parameters(cfg))
            else:
                raise SweepError(f"{where}: model '{model_name}' is a {cfg['model.arch']}; give its N as "
                                 "parameters = ... (the summary.json \"parameters\" of a 1-step run)")
            prepared.append((model_name, n, tokens_per_step, np_, columns, overrides))
        raw = []
        # Budget by budget, smallest first: a sweep stopped part-way holds whole IsoFLOP profiles.
        for budget in budgets:
            for model_name, n, tokens_per_step, np_, columns, overrides in prepared:
                steps = max(1, round(float(budget) / (6.0 * n * tokens_per_step)))
                if steps < min_steps:
                    print(f"sweep: {model_name} at C = {float(budget):.3g} would train {steps} step(s), "
                          f"fewer than scaling.min_steps = {min_steps}; left out", file=sys.stderr)
                    continue
                ov = dict(overrides)
                ov["training.steps"] = steps
                if warmup_fraction > 0:
                    ov["training.warmup_steps"] = max(1, round(warmup_fraction * steps))
                cols = {"model": model_name, "budget": float(budget), "parameters_expected": n,
                        "training.steps": steps, **columns}
                name = f"{model_name}_C{float(budget):.2g}".replace("+", "")
                raw.append((np_, name, cols, ov))
        return raw


# ----------------------------------------------------------------------------- running

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
    cmd += [str(sweep.trainer), str(sweep.base)]
    for k, v in point.overrides.items():
        cmd += ["--set", f"{k}={toml_value(v)}"]
    cmd += ["--set", f"logging.dir={run_dir}"]
    return cmd


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


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


def run_plan(sweep, config, np_, extra, env):
    """`trainer plan CONFIG --gpus NP --json` -> (the layouts it lists, None) or (None, why not)."""
    cmd = [str(sweep.trainer), "plan", str(config), "--gpus", str(np_), "--json"] + sweep.plan_args + extra
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=sweep.here)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"trainer plan: {e}"
    if res.returncode != 0:
        first = next((l for l in (res.stderr + res.stdout).splitlines() if l.strip()), "no output")
        return None, f"trainer plan exited {res.returncode}: {first.strip()[:200]}"
    try:
        doc = json.loads(res.stdout)
    except ValueError:
        return None, "trainer plan --json printed no JSON"
    layouts = []

    def collect(node):
        if isinstance(node, dict):
            if all(k in node for k in ("tp", "pp", "dp")):
                layouts.append(node)
            else:
                for v in node.values():
                    collect(v)
        elif isinstance(node, list):
            for v in node:
                collect(v)
    collect(doc)
    return layouts, None


def match_plan(layouts, want):
    """The planned layout with the run's tp, pp and dp that agrees with most of its ZeRO stage,
    micro-batch size and micro-batch count; (layout, agrees on all of them) or (None, False)."""
    best, best_score = None, -1
    keys = [k for k in ("zero_stage", "micro_batch_size", "num_micro_batches") if want.get(k) is not None]
    for c in layouts:
        if any(c.get(k) != want[k] for k in ("tp", "pp", "dp")):
            continue
        # At dp 1 there is nothing to shard: every ZeRO stage is stage 0 there.
        score = sum(1 for k in keys if k in c and (c.get(k) == want[k] or (k == "zero_stage" and want["dp"] == 1)))
        if score > best_score:
            best, best_score = c, score
    return best, best is not None and best_score == len(keys)


def plan_columns(sweep, point, summary, env):
    """The planner's prediction for the run's layout (its resolved config.toml), as plan_*
    columns; plan_error when the verb is missing, fails, or lists no such layout (the sweep goes
    on either way)."""
    layouts, error = run_plan(sweep, sweep.out / "runs" / point.name / "config.toml", point.np, [], env)
    if error:
        return {"plan_error": error}
    want = {k: summary.get(k) for k in ("tp", "pp", "dp", "zero_stage", "micro_batch_size")}
    want["num_micro_batches"] = summary.get("micro_batches")
    best, exact = match_plan(layouts, want)
    if best is None:
        return {"plan_error": f"trainer plan listed no layout tp {want['tp']} pp {want['pp']} dp {want['dp']} "
                              f"among {len(layouts)}"}
    cols = {}
    for k, v in best.items():
        if isinstance(v, dict):
            for kk, vv in v.items():
                if not isinstance(vv, (dict, list)):
                    cols[f"plan_{'memory' if k == 'memory_bytes' else k}_{kk}"] = vv
        elif not isinstance(v, list):
            cols[f"plan_{k}"] = v
    if "plan_time_step_s" in cols:
        cols["plan_ms_per_step"] = 1e3 * cols["plan_time_step_s"]
    if not exact:
        cols["plan_error"] = "no planned layout matches the run's ZeRO stage and micro-batch split; nearest one shown"
    return cols


def check_point(sweep, point, env):
    """Without training: the trainer's own check of the point's config (`print-config --world`),
    then, when the sweep plans, whether `trainer plan` finds its layout valid and fitting."""
    sets = []
    for k, v in point.overrides.items():
        sets += ["--set", f"{k}={toml_value(v)}"]
    cmd = [str(sweep.trainer), "print-config", str(sweep.base)] + sets + ["--world", str(point.np)]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=sweep.here)
    if res.returncode != 0:
        lines = [l for l in (res.stderr + res.stdout).splitlines() if l.strip()]
        return f"config refused: {lines[-1].strip() if lines else res.returncode}"
    if not sweep.plan:
        return "config ok"
    cfg = sweep._merged(point.overrides)
    tp, pp = int(cfg.get("parallel.tp", 1)), int(cfg.get("parallel.pp", 1))
    dp = int(cfg.get("parallel.dp", 0)) or point.np // max(1, tp * pp)
    layouts, error = run_plan(sweep, sweep.base, point.np, sets, env)
    if error:
        return f"config ok; {error}"
    want = {"tp": tp, "pp": pp, "dp": dp, "zero_stage": cfg.get("parallel.zero_stage"),
            "micro_batch_size": cfg.get("parallel.micro_batch_size")}
    best, _ = match_plan(layouts, want)
    if best is None:
        return f"config ok; the planner lists no layout tp {tp} pp {pp} dp {dp} on {point.np} GPUs"
    if not best.get("valid", True):
        return f"layout refused: {best.get('why', '')}"
    if not best.get("fits", True):
        return f"does not fit: {best.get('why', '')}"
    memory = best.get("memory_bytes", {}).get("total", 0)
    memory = f"{memory / 2**30:.1f} GiB" if memory >= 2**30 else f"{memory / 2**20:.1f} MiB"
    return (f"ok: planned {best.get('tokens_per_s', 0):,.0f} tokens/s, E {best.get('efficiency', 0):.2f}, "
            f"{memory} per GPU")


def row_of(sweep, point, status, error, seconds, plan):
    row = {"run": point.name, "status": status, "error": error, **point.columns}
    run_dir = sweep.out / "runs" / point.name
    summary = read_json(run_dir / "summary.json") if status == "finished" else None
    if summary:
        for k, v in summary.items():
            if k in ("time_split", "dp_reductions") and isinstance(v, dict):
                row.update(v)
            elif k == "memory_bytes_per_rank" and isinstance(v, list) and v:
                for i, part in enumerate(MEMORY_PARTS):
                    row[f"memory_{part}_max"] = max(r[i] for r in v)
                row["memory_total_max"] = max(sum(r) for r in v)
            elif not isinstance(v, (dict, list)):
                row[k] = v
        if summary.get("parameters") and summary.get("tokens_seen"):
            row["compute_6ND"] = 6.0 * summary["parameters"] * summary["tokens_seen"]
    row["seconds"] = round(seconds, 2) if seconds is not None else ""
    row["run_dir"] = os.path.relpath(run_dir, sweep.out)
    if plan:
        row.update(plan)
    return row


def write_csv(path, rows):
    head = ["run", "status", "error", "np"]
    ident = list(dict.fromkeys(k for r in rows for k in r if k not in head and (
        k in ("layout", "model", "budget", "parameters_expected") or "." in k)))
    rest = set(k for r in rows for k in r) - set(head) - set(ident)
    summary = [k for k in SUMMARY_ORDER if k in rest]
    plan = sorted(k for k in rest if k.startswith("plan_"))
    tail = [k for k in ("seconds", "run_dir") if k in rest]
    other = sorted(rest - set(summary) - set(plan) - set(tail))
    columns = head + ident + summary + other + plan + tail
    tmp = path.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k, "")) for k in columns})
    os.replace(tmp, path)


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


def describe(row):
    bits = []
    if row.get("tokens_per_s") not in (None, ""):
        bits.append(f"{float(row['tokens_per_s']):.0f} tok/s")
    if row.get("efficiency") not in (None, ""):
        bits.append(f"E {float(row['efficiency']):.2f}")
    if row.get("final_val_loss") not in (None, ""):
        bits.append(f"val loss {float(row['final_val_loss']):.4f}")
    elif row.get("final_loss") not in (None, ""):
        bits.append(f"loss {float(row['final_loss']):.4f}")
    return ", ".join(bits)


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

    (sweep.out / "logs").mkdir(parents=True, exist_ok=True)
    with open(sweep.out / "sweep.json", "w") as f:
        json.dump({"name": sweep.name, "kind": sweep.kind, "description": sweep.description,
                   "sweep_file": str(sweep.path), "base": str(sweep.base), "trainer": str(sweep.trainer),
                   "points": [{"name": p.name, **p.identity(), "columns": p.columns} for p in sweep.points]},
                  f, indent=1, default=str)
    shutil.copyfile(sweep.path, sweep.out / "sweep.toml")

    rows = {}
    lock = threading.Lock()
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

    def work(item):
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
        return i, p, status, error, seconds, plan

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = []
        for item in todo:
            futures.append(pool.submit(work, item))
        try:
            for fut in as_completed(futures):
                i, p, status, error, seconds, plan = fut.result()
                with lock:
                    rows[p.name] = row_of(sweep, p, status, error, seconds, plan)
                    flush_csv()
                if status == "finished":
                    extra = describe(rows[p.name])
                    expected, got = p.columns.get("parameters_expected"), rows[p.name].get("parameters")
                    if expected and got and abs(got - expected) > 0.005 * expected:
                        extra += (f"; warning: the trainer counts N = {got:,.0f}, the sweep planned its steps "
                                  f"for {expected:,.0f}")
                    if plan and plan.get("plan_error"):
                        extra += f"; plan: {plan['plan_error']}"
                    print(f"[{i}/{total}] {p.name}: finished in {seconds:.1f} s ({extra})", flush=True)
                else:
                    failed += 1
                    print(f"[{i}/{total}] {p.name}: FAILED after {seconds:.1f} s: {error} "
                          f"(log: {os.path.relpath(sweep.out / 'logs' / (p.name + '.log'))})", flush=True)
        except KeyboardInterrupt:
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


if __name__ == "__main__":
    # A batch scheduler's SIGTERM ends the sweep as Ctrl-C does: the runs in flight are ended
    # and results.csv keeps what finished.
    signal.signal(signal.SIGTERM, interrupted)
    try:
        sys.exit(main(sys.argv[1:]))
    except SweepError as e:
        print(f"sweep: error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("sweep: interrupted", file=sys.stderr)
        sys.exit(130)
