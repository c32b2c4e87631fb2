"""The sweep file: SWEEP.toml read and checked into the points to run.

Owns the [sweep], [prepare], [set], [grid], [[runs]] and [scaling] tables: every key's meaning
and check (a bad file is a SweepError, one line, exit status 2), the values as `--set` passes
them, run names from the keys that vary, and for a scaling law the steps of each model at each
budget so that C = 6 N D. Runs nothing.
"""

import itertools
import json
import math
import os
import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent  # scripts/feast_sweep/ -> the repository

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
# Config keys holding paths, and the words they take that are no path.
PATH_KEYS = {"data.train", "data.val", "logging.dir", "checkpoint.dir", "checkpoint.resume", "model.init_from",
             "model.tokenizer"}
PATH_WORDS = {"auto", "never", "byte"}
# Shorter words for run names made from the keys that vary.
SHORT_NAMES = {"micro_batch_size": "mbs", "num_micro_batches": "m", "zero_stage": "zero", "n_layer": "L",
               "n_embd": "C", "n_head": "H", "batch_size": "B", "seq_len": "T"}


class SweepError(Exception):
    """A bad sweep file or command line: printed as one line, exit status 2."""


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

    def set_args(self):
        """The overrides as the trainer's --set arguments."""
        return [a for k, v in self.overrides.items() for a in ("--set", f"{k}={toml_value(v)}")]


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
