"""The sweep command's parts (scripts/sweep.py is its entry point; docs/experiments.md its manual).

sweepfile: a sweep file read into its points; launch: training one point through the launcher;
plan: what `trainer plan` predicts for a point; results: what a sweep records (results.csv and
the run directories' JSON files); cli: the command line, resuming and the progress lines.
Only the standard library.
"""
