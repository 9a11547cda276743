"""Success and return against inference latency: one run per latency and execution mode.

``rolltape eval ENV --policy P --latency 0,2,4,8 --execution sync,async`` evaluates P once
per (execution, D) into ``OUT/<execution>-d<D>/`` (normal runs: tapes, report, resumable;
all on the same seeds), then writes ``OUT/latency.json`` and ``OUT/latency.html``: per task,
success (with 95% Wilson bands) and mean return (with bootstrap bands) against D, sync and
async side by side, and smoothness measures read from the executed actions of the tapes:

- **jerk**: the mean absolute third difference of the actions, |a[t] - 3a[t-1] + 3a[t-2] -
  a[t-3]|, over steps and action dimensions (action units per step cubed);
- **jumps**: chunk boundaries (a step played by another chunk, or a hold, than the step
  before) at which some action dimension moves by more than 10% of that dimension's range
  over every executed action of the task in the sweep, per episode;
- **steps to success**: the mean length of the successful episodes that ended by
  terminating (envs whose episodes end when they succeed, such as PushT; none for a
  continuing task).

With D = 0, async executes exactly as sync (each chunk is asked for once its K actions are
played), so ``async`` at D = 0 is the ``sync-d0`` run, not a second one.

May import: evaluate, compare, stats, outputs, files, errors. Never: torch, SB3, GL.

Example (not run: it evaluates a policy):
    >>> result = evaluate_latencies("gym_pusht/PushT-v0", "ws://127.0.0.1:8000",
    ...                             latencies=[0, 2, 4], executions=["sync", "async"],
    ...                             out="runs/latency", episodes=20)
    >>> result["tasks"][0]["sync"][1]["success"]["pc_success"]
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rolltape import stats
from rolltape.compare.runs import LoadedRun
from rolltape.errors import UsageError
from rolltape.files import write_texts
from rolltape.outputs import plots

__all__ = ["JUMP_FRACTION", "evaluate_latencies", "folder_name", "parse_sweep", "smoothness",
           "summary_lines", "write_latency"]

JUMP_FRACTION = 0.1  # of a dimension's range: a bigger move at a chunk boundary is a jump
COLORS = {"sync": plots.PALETTE[0], "async": plots.PALETTE[1]}


def folder_name(execution: str, latency: int) -> str:
    """The run folder of one (execution, D): ``sync-d4``; async at D = 0 is ``sync-d0``."""
    return f"{'sync' if latency == 0 else execution}-d{latency}"


def evaluate_latencies(env: str | None, policy: str, *, latencies: Sequence[int],
                       executions: Sequence[str], out: str | os.PathLike[str],
                       hold: str = "last", blend: str = "none", overwrite: bool = False,
                       resume: bool = False, show_progress: bool = False,
                       command: list[str] | None = None, **options: Any) -> dict[str, Any]:
    """Evaluate ``policy`` once per (execution, D) under ``out`` and write the latency
    report; returns what ``latency.json`` holds. ``options`` are :func:`rolltape.evaluate`'s."""
    from rolltape.drivers.sweep import evaluate_runs, prepare_root, undone_on_usage_error
    from rolltape.pass1.clock import Clock

    if len(set(latencies)) != len(latencies) or len(set(executions)) != len(executions):
        raise UsageError("--latency and --execution list each value once; drop the repeats.")
    for d in latencies:
        for ex in executions:
            Clock(d, ex, hold, blend if ex == "async" else "none")  # bad values: before any run
    root, created = prepare_root(out, overwrite=overwrite, resume=resume)
    vecnormalize = options.pop("vecnormalize", None)
    if options.pop("baseline", None) is not None:
        raise UsageError("A latency sweep compares a policy with itself at each latency; drop "
                         "--baseline.")
    jobs = [(folder_name(ex, d), policy, vecnormalize,
             {**options, "latency": str(d), "execution": ex if d else "sync", "hold": hold,
              "blend": blend if ex == "async" and d else "none"})
            for d in sorted(latencies) for ex in executions if d or ex == executions[0]]
    done: list[Any] = []
    with undone_on_usage_error(created, done):
        evaluate_runs(env, jobs, root, done, overwrite=overwrite, resume=resume,
                      show_progress=show_progress, command=command, on_run=None)
    runs = {(ex, d): LoadedRun.load(root / folder_name(ex, d), folder_name(ex, d))
            for d in latencies for ex in executions}
    result = latency_table(runs, executions, sorted(latencies), hold, blend)
    write_latency(result, root)
    return result


def parse_sweep(latency: str, execution: str) -> tuple[list[int], list[str]]:
    """``--latency 0,2,4`` and ``--execution sync,async`` as lists (a sweep's latencies are
    whole steps: its folders and chart are per step).

    >>> parse_sweep("0, 2,4", "sync,async")
    ([0, 2, 4], ['sync', 'async'])
    """
    from rolltape.pass1.clock import Clock

    texts = [t.strip() for t in latency.split(",")]
    if not all(t.isdigit() for t in texts):
        raise UsageError(f"--latency '{latency}': a sweep's latencies are whole numbers of "
                         "control steps, e.g. 0,2,4,8.")
    latencies = [int(t) for t in texts]
    executions = [e.strip() for e in execution.split(",")]
    for d in latencies:
        for ex in executions:
            Clock(d, ex)  # refuses a bad value before anything runs
    return latencies, executions


def summary_lines(result: dict[str, Any], root: Path) -> list[str]:
    """What the CLI prints after a sweep: per task and execution, success or return by D."""
    lines = []
    for task in result["tasks"]:
        for ex in result["executions"]:
            cells = []
            for row in task[ex]:
                s = row["success"]
                cells.append(f"D={row['latency']}: " + (
                    f"{s['pc_success']:.0f}%" if s and s["pc_success"] is not None
                    else f"return {row['return']['mean']:.4g}"))
            lines.append(f"{task['name']} [{ex}] " + " · ".join(cells))
    lines.append(f"latency report: {root / 'latency.html'} (and latency.json)")
    return lines


def smoothness(actions: np.ndarray, chunk_index: np.ndarray | None,
               jump_size: np.ndarray) -> tuple[float | None, int]:
    """One episode's mean absolute jerk (None below 4 steps) and its number of jumps
    (``jump_size``: per action dimension, the move that counts as one)."""
    a = np.asarray(actions, dtype=np.float64).reshape(len(actions), -1)
    jerk = float(np.mean(np.abs(np.diff(a, n=3, axis=0)))) if len(a) >= 4 else None
    if chunk_index is None or len(a) < 2:
        return jerk, 0
    boundary = np.asarray(chunk_index)[1:] != np.asarray(chunk_index)[:-1]
    moved = (np.abs(np.diff(a, axis=0)) > jump_size).any(axis=1)
    return jerk, int(np.count_nonzero(boundary & moved))


def _tapes(run: LoadedRun, keys: list[Any]) -> list[Any]:
    from rolltape.tape import Tape

    return [Tape.load(run.run.tape_path(run.rows[k])) for k in keys]


def latency_table(runs: dict[tuple[str, int], LoadedRun], executions: Sequence[str],
                  latencies: Sequence[int], hold: str, blend: str) -> dict[str, Any]:
    """latency.json's content: per task and execution, one row per latency."""
    first = runs[(executions[0], latencies[0])]
    tasks = []
    for group, keys in first.tasks().items():
        tapes = {ek: _tapes(run, keys) for ek, run in runs.items()}
        executed = np.concatenate([np.asarray(t.actions, np.float64).reshape(t.length, -1)
                                   for ts in tapes.values() for t in ts if t.length])
        jump_size = JUMP_FRACTION * (executed.max(axis=0) - executed.min(axis=0))
        task: dict[str, Any] = {"suite": group[0], "task": group[1],
                                "name": "/".join(str(g) for g in group if g) or
                                first.run.results.env_id}
        for ex in executions:
            rows = []
            for d in latencies:
                run = runs[(ex, d)]
                measured = [smoothness(t.actions, t.chunk_index, jump_size)
                            for t in tapes[(ex, d)]]
                jerks = [j for j, _ in measured if j is not None]
                wins = run.successes(keys)
                known = [w for w in wins if w is not None]
                returns = run.returns(keys)
                # an episode that ends on success (terminated): its length is the time
                lengths = [t.length for t, w in zip(tapes[(ex, d)], wins)
                           if w and t.terminated[-1]]
                rows.append({
                    "latency": d, "run": folder_name(ex, d), "episodes": len(keys),
                    "success": stats.success_percent(wins) if known else None,  # percent
                    "return": {"mean": float(np.mean(returns)),
                               "ci": list(stats.bootstrap_ci(returns, np.mean))},
                    "jerk": float(np.mean(jerks)) if jerks else None,
                    "jumps_per_episode": float(np.mean([n for _, n in measured])),
                    "steps_to_success": float(np.mean(lengths)) if lengths else None,
                })
            task[ex] = rows
        tasks.append(task)
    return {"executions": list(executions), "latencies": list(latencies), "hold": hold,
            "blend": blend, "jump_fraction": JUMP_FRACTION, "tasks": tasks}


def _charts(task: dict[str, Any], executions: Sequence[str]) -> list[str]:
    uid = "".join(c if c.isalnum() else "-" for c in task["name"])
    charts = []
    if any(r["success"] for ex in executions for r in task[ex]):
        series = []
        for ex in executions:
            rows = [r for r in task[ex] if r["success"]]
            rates = [r["success"]["pc_success"] for r in rows]
            lows, highs = zip(*(r["success"]["pc_success_ci95"] for r in rows))
            series.append(plots.Series(
                ex, [r["latency"] for r in rows], rates, COLORS[ex], dash=ex == "async",
                band=(lows, highs),
                tips=[f"{ex}, D={r['latency']}: {rate:.0f}% of {r['episodes']} [{lo:.0f}, "
                      f"{hi:.0f}]" for r, rate, lo, hi in zip(rows, rates, lows, highs)]))
        charts.append(plots.line_chart(
            series, title=f"{task['name']}: success vs latency", uid=f"s-{uid}",
            desc="Success rate in percent with 95% Wilson bands, per latency in control steps.",
            xlabel="latency D (control steps)", ylabel="success %", integer_x=True))
    charts.append(plots.line_chart(
        [plots.Series(ex, [r["latency"] for r in task[ex]], [r["return"]["mean"] for r in task[ex]],
                      COLORS[ex], dash=ex == "async",
                      band=([r["return"]["ci"][0] for r in task[ex]],
                            [r["return"]["ci"][1] for r in task[ex]]))
         for ex in executions],
        title=f"{task['name']}: mean return vs latency", uid=f"r-{uid}",
        desc="Mean return with 95% bootstrap bands, per latency in control steps.",
        xlabel="latency D (control steps)", ylabel="mean return", integer_x=True))
    return charts


def write_latency(result: dict[str, Any], root: Path) -> None:
    """``latency.json`` and ``latency.html`` in ``root``; both or neither."""
    from rolltape.outputs.report import render_page

    executions = result["executions"]
    page = render_page(
        "latency.html.j2", r=result,
        charts={t["name"]: _charts(t, executions) for t in result["tasks"]},
        written=time.strftime("%Y-%m-%d %H:%M:%S %Z"), fmt=_fmt)
    text = json.dumps(result, indent=2, allow_nan=False) + "\n"
    try:
        write_texts({root / "latency.json": text, root / "latency.html": page})
    except OSError as exc:
        raise UsageError(f"Cannot write the latency report to '{root}' ({exc.strerror}); "
                         "free some space, then rerun with --resume.") from None


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{x:.{digits}g}" if isinstance(x, float) else str(x)
