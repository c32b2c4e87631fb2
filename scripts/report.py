#!/usr/bin/python3
"""scripts/report.py PATH... --out DIR [--comm FILE ...] [--title TEXT]

Turns training runs, sweeps and communication benchmarks into pictures and one HTML report
(docs/experiments.md). The entry point only: feast_report/ beside it does the work,
feast_report/cli.py holds the command line and its help.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # feast_report/, from any working directory

from feast_report.cli import main  # noqa: E402
from feast_report.comm import parse_comm  # noqa: E402

__all__ = ["main", "parse_comm"]  # parse_comm: tests/cli/sweep_report.sh reads bench comm with it

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
