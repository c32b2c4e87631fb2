"""The planner beside the sweep: what `trainer plan` predicts for a point's layout.

Owns asking `trainer plan --json` (never fatal: a missing or failing planner is a plan_error
column), finding the run's layout among the ones it lists, the plan_* columns of results.csv
(plan_figures: which figures the prediction used, as the planner says), measuring this machine's
figures once before a sweep that plans without them (`trainer plan --calibrate`), and --check's
verdict on a point (the trainer's print-config, then the planner's layout check).
"""

import json
import subprocess


def figures_line(stderr):
    """What `trainer plan --json` says on stderr of the figures it used ("" if nothing)."""
    return next((l.split("figures:", 1)[1].strip() for l in stderr.splitlines() if l.startswith("plan: figures:")), "")


def ensure_calibrated(sweep, env):
    """Before a sweep plans: when its plan_args leave the compute rate to the planner and the
    planner has no figures measured on this machine (none, or stale), measure them once with
    `trainer plan --calibrate` (a minute at most), so that no prediction uses another machine's.
    Prints what it did; never fatal (the predictions then say which figures they used)."""
    if not sweep.plan or "--gpu-tflops" in sweep.plan_args or not sweep.points:
        return
    np_ = max(p.np for p in sweep.points)
    # The first point's model and micro-batch (the sweep's [set] applied): what the rate is measured on.
    sets = sweep.points[0].set_args()
    layouts, error = run_plan(sweep, sweep.base, np_, sets, env)
    said = layouts[0]["figures"] if layouts else ""
    if error or said.startswith("this machine's figures"):
        return
    print(f"sweep: the planner has no figures of this machine ({said.split(';')[0]}): measuring them with "
          f"`trainer plan --calibrate` first", flush=True)
    cmd = [str(sweep.trainer), "plan", str(sweep.base), "--gpus", str(np_), "--calibrate"] + sweep.plan_args + sets
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=sweep.here)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"sweep: trainer plan --calibrate: {e}", flush=True)
        return
    for line in (res.stdout + res.stderr).splitlines():
        if line.strip():
            print(f"  {line}", flush=True)


def run_plan(sweep, config, np_, extra, env):
    """`trainer plan CONFIG --gpus NP --json` -> (the layouts it lists, None) or (None, why not);
    each layout carries "figures", what the planner says of the figures it used."""
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
    figures = figures_line(res.stderr)

    def collect(node):
        if isinstance(node, dict):
            if all(k in node for k in ("tp", "pp", "dp")):
                layouts.append(dict(node, figures=figures))
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
    sets = point.set_args()
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
