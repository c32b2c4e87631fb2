"""The report command's parts (scripts/report.py is its entry point; docs/experiments.md its manual).

runs: run and sweep directories read; figures: the drawing every section shares (and the loss
curves); systems, scaling, comm: the pictures, fits and report section of a systems sweep, a
scaling-law sweep and a `trainer bench comm` output; tables: the table of runs; page: the report
written as report.html, summary.md and report.json; cli: the command line. It runs nothing: it
reads the files it is given (feast_sweep.results reads a sweep's JSON files for it) and writes
the output folder. Matplotlib draws without a display (Agg), chosen here, before any module
imports pyplot. Each section lists its pictures as (file name, caption, build), build returning
the Figure unsaved (systems_figures, scaling_figures, comm_figures, cli.runs_figures), so that
tests/scripts/report_figures_test.py measures the very figures the report saves.
"""

import matplotlib

matplotlib.use("Agg")
