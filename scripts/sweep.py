#!/usr/bin/python3
"""scripts/sweep.py SWEEP.toml [--out DIR] [--trainer PATH] [--set KEY=VALUE ...] [--jobs N] [--dry-run] [--check]

Runs a grid of training runs and collects their summaries into one CSV (docs/experiments.md).
The entry point only: feast_sweep/ beside it does the work, feast_sweep/cli.py holds the
command line and its help.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # feast_sweep/, from any working directory

from feast_sweep.cli import run  # noqa: E402

if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
