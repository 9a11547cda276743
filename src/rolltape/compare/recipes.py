"""Recipes: several training runs per recipe, evaluated on the same seeds and compared.

``rolltape eval ENV --recipe A='sb3:runs/a/seed*/model.zip' --recipe B=... -n 20 --out OUT``
evaluates every checkpoint the globs match (each a training run, with its VecNormalize
statistics found as :mod:`rolltape.compare.checkpoints` finds them) into
``OUT/<recipe>/<run>/``, a normal run folder each, all on seeds ``seed .. seed + n - 1``,
writes ``OUT/recipes.json`` (what each folder holds) and then the comparison
(``OUT/comparison.json``, ``OUT/comparison.html``); ``rolltape compare OUT`` rebuilds it.

The statistics are :mod:`rolltape.stats.recipes`: per recipe the mean over runs with a
bootstrap over runs, IQM over runs x episodes, spread between and within runs; between
recipes rliable's probability of improvement over runs and the seed-paired difference with
a two-level bootstrap. A task is scored by its success (when every episode reports one)
or else by its return.

Evaluating the recipes' runs is :mod:`rolltape.drivers.recipes`; this module reads and
compares what they wrote.

May import: compare, stats, outputs, record, files, errors. Never: the drivers, torch,
SB3, GL.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from rolltape.errors import UsageError
from rolltape.files import write_text
from rolltape.record import Run
from rolltape.stats.recipes import recipe_comparison, recipe_summary

__all__ = ["is_recipe_folder", "recipe_result", "summary_lines", "write_recipe_comparison"]

MANIFEST = "recipes.json"


def is_recipe_folder(folder: Path) -> bool:
    return (Path(folder) / MANIFEST).is_file()


# ----------------------------------------------------------------------------- comparing


def _load(root: Path) -> tuple[dict[str, Any], dict[str, list[Run]]]:
    try:
        manifest = json.loads((root / MANIFEST).read_text())
        runs = {name: [Run.load(root / r["folder"]) for r in rows]
                for name, rows in manifest["recipes"].items()}
    except (OSError, ValueError, KeyError, TypeError):
        raise UsageError(f"'{root / MANIFEST}' or a run it names cannot be read; rerun the "
                         "eval --recipe that wrote it (with --resume to keep what finished)."
                         ) from None
    return manifest, runs


def _matrices(runs: list[Run]) -> tuple[str, dict[str, np.ndarray]]:
    """(measure, {task: (runs, episodes) scores}) of one recipe's runs; every run must have
    played the same seeds."""
    first = runs[0].results
    tasks = first.tasks
    per: dict[str, list[list[float]]] = {}
    success = True
    for run in runs:
        res = run.results
        for task in tasks:
            eps = sorted((e for e in res.episodes if e.key.task_key == task),
                         key=lambda e: e.key.index)
            flags = [e.success(res.rule_of(task)) for e in eps]
            success = success and all(f is not None for f in flags)
    for run in runs:
        res = run.results
        for task in tasks:
            eps = sorted((e for e in res.episodes if e.key.task_key == task),
                         key=lambda e: e.key.index)
            name = "/".join(p for p in task if p) or res.env_id
            row = [float(bool(e.success(res.rule_of(task)))) if success else
                   (e.ret if e.ret is not None else float("nan")) for e in eps]
            per.setdefault(name, []).append(row)
    out = {}
    for name, rows in per.items():
        if len({len(r) for r in rows}) != 1:
            raise UsageError(f"task '{name}': the runs played different numbers of episodes "
                             f"({sorted({len(r) for r in rows})}); rerun with --resume so that "
                             "every run plays the same seeds.")
        arr = np.asarray(rows, dtype=float)
        if not np.all(np.isfinite(arr)):
            raise UsageError(f"task '{name}' has episodes without a finite return; they "
                             "cannot be averaged.")
        out[name] = arr
    return ("success" if success else "return"), out


def recipe_result(root: str | os.PathLike[str]) -> dict[str, Any]:
    """The comparison of the recipes in ``root`` (a folder written by eval --recipe)."""
    root = Path(root)
    manifest, runs = _load(root)
    measures, scores = {}, {}
    for name, rs in runs.items():
        measures[name], scores[name] = _matrices(rs)
    measure = "success" if set(measures.values()) == {"success"} else "return"
    if measure == "return" and "success" in measures.values():
        for name, rs in runs.items():  # one recipe reports success, another not: returns
            scores[name] = _matrices([_without_success(r) for r in rs])[1]
    summaries = {name: recipe_summary(s) for name, s in scores.items()}
    names = list(scores)
    pairs = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            pair = recipe_comparison(scores[a], scores[b])
            named = {"A better": f"{a} better", "B better": f"{b} better"}
            pair["verdict"] = named.get(pair["verdict"], pair["verdict"])
            pairs.append({"a": a, "b": b, **pair})
    return {"kind": "recipes", "env": manifest.get("env"), "suite": manifest.get("suite"),
            "measure": measure, "episodes": manifest.get("episodes"),
            "seed": manifest.get("seed"),
            "recipes": {name: {**summaries[name],
                               "runs_folders": [r["folder"] for r in manifest["recipes"][name]]}
                        for name in names},
            "pairs": pairs}


def _without_success(run: Run) -> Run:
    from dataclasses import replace

    eps = tuple(replace(e, success_at_end=None, success_once=None)
                for e in run.results.episodes)
    return replace(run, results=replace(run.results, episodes=eps))


def write_recipe_comparison(root: str | os.PathLike[str],
                            out: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Write comparison.json and comparison.html of the recipes in ``root`` into ``out``
    (default ``root``). Returns comparison.json's content."""
    result = recipe_result(root)
    dest = Path(out) if out is not None else Path(root)
    dest.mkdir(parents=True, exist_ok=True)
    html = _html(result)
    write_text(dest / "comparison.json", json.dumps(result, indent=2, allow_nan=False) + "\n")
    write_text(dest / "comparison.html", html)
    return result


# ----------------------------------------------------------------------------- showing


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def _ci(pair: list[float | None] | None) -> str:
    return "n/a" if not pair else f"[{_fmt(pair[0])}, {_fmt(pair[1])}]"


def runs_chart(result: dict[str, Any], task: str) -> str:
    """Per recipe, each training run's score as a dot, with the recipe's mean over runs
    and its bootstrap interval over runs (as rliable draws an aggregate's interval)."""
    from rolltape.outputs.plots import PALETTE, Strip, strip_chart

    strips = []
    for k, (name, r) in enumerate(result["recipes"].items()):
        values = r["run_scores"][task]
        folders = r["runs_folders"]
        one = result["recipes"][name]["tasks"] == 1
        center = r["mean"]["value"] if one else float(np.mean(values))
        interval = tuple(r["mean"]["ci"]) if one else None
        strips.append(Strip(name, values, PALETTE[k % len(PALETTE)],
                            tips=[f"{f}: {v:.4g}" for f, v in zip(folders, values)],
                            center=center, interval=interval))
    unit = "success rate" if result["measure"] == "success" else "mean return"
    return strip_chart(strips, title=f"Training runs per recipe: {task}",
                       desc=f"each dot one training run's {unit} over the same "
                            f"{result['episodes']} seeds", xlabel=f"{unit} of a run",
                       uid=f"runs-{re.sub(r'[^A-Za-z0-9]', '-', task)}",
                       marker_label="mean over runs, bar: 95% bootstrap over runs")


def _html(result: dict[str, Any]) -> str:
    """The recipe page, from its template (the run report's stylesheet)."""
    from rolltape.outputs.report import render_page

    first = next(iter(result["recipes"].values()))
    return render_page(
        "recipes.html.j2", r=result, where=result["env"] or result["suite"] or "",
        charts=[runs_chart(result, task) for task in first["run_scores"]],
        written=time.strftime("%Y-%m-%d %H:%M:%S"), fmt=_fmt, ci=_ci)


def summary_lines(result: dict[str, Any]) -> list[str]:
    """What the CLI prints after a recipe comparison."""
    lines = [f"recipes on {result['env'] or result['suite']}: {result['episodes']} episodes "
             f"per run on the same seeds, scored by {result['measure']}"]
    for name, r in result["recipes"].items():
        lines.append(f"  {name}: {r['runs']} run(s), mean over runs {_fmt(r['mean']['value'])} "
                     f"{_ci(r['mean']['ci'])}, IQM {_fmt(r['iqm']['value'])}")
        if r["note"]:
            lines.append(f"    {r['note']}")
    for p in result["pairs"]:
        lines.append(f"  {p['a']} vs {p['b']}: {p['verdict']}; difference "
                     f"{_fmt(p['difference']['value'])} {_ci(p['difference']['ci'])} "
                     f"(two-level bootstrap), P({p['a']} > {p['b']}) over runs "
                     f"{_fmt(p['probability_of_improvement']['p'])} "
                     f"({p['probability_of_improvement']['note']})")
    return lines
