"""Reading what the trainer and scripts/sweep.py left: run directories and sweep directories.

Owns a run as the report sees it (summary.json, metrics.jsonl, its row of results.csv), a sweep
(sweep.json and results.csv, cells as numbers), the corpus's entropy floor beside a run's
training data, and the memory of a run's largest rank.
"""

import csv
import json
import tomllib
from pathlib import Path

from feast_sweep.results import MEMORY_PARTS, read_json  # the sweep's own files, read as it reads them

MIB = 1024.0 * 1024.0


def number(text):
    """A CSV cell as a float when it is one, else the text ('' and None stay None)."""
    if text is None or text == "":
        return None
    if isinstance(text, (int, float)):
        return float(text)
    try:
        return float(text)
    except ValueError:
        if text in ("True", "true"):
            return True
        if text in ("False", "false"):
            return False
        return text


def read_metrics(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        pass  # a line cut short by a crash
    except OSError:
        pass
    return rows


def entropy_floor(run_dir):
    """The corpus's entropy floor (nats/token) from the meta.json beside the run's training
    shards, when the data is `trainer prepare-data --synthetic`'s; None otherwise."""
    try:
        with open(Path(run_dir) / "config.toml", "rb") as f:
            cfg = tomllib.load(f)
        train = cfg.get("data", {}).get("train", "")
    except (OSError, tomllib.TOMLDecodeError):
        return None
    if not train:
        return None
    folder = Path(train) if Path(train).is_dir() else Path(train).parent
    if not folder.is_absolute():
        folder = Path(run_dir) / folder
    meta = read_json(folder / "meta.json")
    return meta.get("entropy_floor_nats") if isinstance(meta, dict) else None


class Run:
    def __init__(self, path, name=None, row=None):
        self.dir = Path(path)
        self.name = name or self.dir.name
        self.summary = read_json(self.dir / "summary.json") or {}
        self.metrics = read_metrics(self.dir / "metrics.jsonl")
        self.row = row or {}

    def get(self, key):
        """A value from the sweep's CSV row, else from summary.json."""
        v = self.row.get(key)
        if v is None:
            v = number(self.summary.get(key)) if not isinstance(self.summary.get(key), (dict, list)) else None
            if v is None and isinstance(self.summary.get("time_split"), dict):
                v = number(self.summary["time_split"].get(key))
        return v


class Sweep:
    def __init__(self, path):
        self.dir = Path(path)
        meta = read_json(self.dir / "sweep.json") or {}
        self.name = meta.get("name", self.dir.name)
        self.kind = meta.get("kind", "custom")
        self.description = meta.get("description", "")
        with open(self.dir / "results.csv", newline="") as f:
            self.rows = [{k: number(v) for k, v in r.items()} for r in csv.DictReader(f)]
        self.columns = list(self.rows[0].keys()) if self.rows else []
        self.runs = []
        for r in self.rows:
            run_dir = self.dir / (r.get("run_dir") or f"runs/{r['run']}")
            self.runs.append(Run(run_dir, str(r["run"]), r))
        if self.kind == "custom" and "budget" in self.columns:
            self.kind = "scaling-law"

    def finished(self):
        return [r for r in self.runs if r.row.get("status") == "finished"]


def rank_memory(run):
    """(parts of the rank with the most memory, in bytes) from summary.json, else the CSV's
    per-part maxima."""
    per_rank = run.summary.get("memory_bytes_per_rank")
    if isinstance(per_rank, list) and per_rank:  # a run of an older trainer reports fewer parts
        return (list(max(per_rank, key=sum)) + [0.0] * len(MEMORY_PARTS))[:len(MEMORY_PARTS)]
    parts = [run.get(f"memory_{p}_max") for p in MEMORY_PARTS]
    return parts if all(p is not None for p in parts) else None
