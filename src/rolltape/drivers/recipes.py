"""Evaluating recipes: every training run of every recipe (``eval --recipe
NAME='sb3:GLOB'``) on the same seeds, into ``OUT/<recipe>/<run>/``, then their comparison
(:mod:`rolltape.compare.recipes`, which reads what this writes).

May import: drivers.sweep, compare (checkpoints, recipes), files, errors. Never: torch,
SB3, GL.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from rolltape.compare.checkpoints import Entry, expand_policies
from rolltape.compare.recipes import MANIFEST, write_recipe_comparison
from rolltape.errors import UsageError
from rolltape.files import write_json

__all__ = ["evaluate_recipes", "parse_recipes"]

_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def parse_recipes(texts: list[str]) -> dict[str, list[Entry]]:
    """``NAME=SOURCE`` per --recipe: each recipe's runs (a glob of checkpoints, expanded)."""
    recipes: dict[str, list[Entry]] = {}
    for text in texts:
        name, sep, source = text.partition("=")
        name = name.strip()
        if not sep or not source or not _NAME.match(name):
            raise UsageError(f"--recipe '{text}' is not NAME=SOURCE; give e.g. "
                             "--recipe A='sb3:runs/a/seed*/model.zip' (NAME: letters, digits, "
                             "_ . -).")
        if name in recipes:
            raise UsageError(f"--recipe names '{name}' twice; give each recipe one name and "
                             "one glob.")
        if name == "random":
            raise UsageError("--recipe 'random' is reserved for the baseline; rename it.")
        source = source.strip()
        if not source.startswith("sb3:"):
            source = f"sb3:{source}" if source.endswith(".zip") else source
        if not source.startswith("sb3:"):  # 'random', a zoo folder, FILE.py: no training run
            raise UsageError(f"--recipe {name}={source[:80]} names no checkpoints; a recipe's "
                             "runs are SB3 checkpoints of separate trainings, e.g. "
                             f"--recipe {name}='sb3:runs/{name}/seed*/model.zip' (compare a "
                             "policy with random by `rolltape eval --baseline random`).")
        # A recipe's runs in path order (seed0, seed1, ...): they are runs, not checkpoints.
        entries = sorted(expand_policies([source]), key=lambda e: e.policy)
        recipes[name] = [Entry(label, e.policy, e.vecnormalize, e.steps)
                         for label, e in zip(_run_labels([e.policy for e in entries]), entries)]
    if len(recipes) < 1:
        raise UsageError("--recipe needs at least one NAME=SOURCE.")
    return recipes


def _run_labels(sources: list[str]) -> list[str]:
    """A folder name per run: the parts of the checkpoint paths that differ between runs
    (seed1, seed2, ...), else run1, run2, ..."""
    parts = [Path(s.partition(":")[2] or s).with_suffix("").parts for s in sources]
    if len(parts) > 1 and len({len(p) for p in parts}) == 1:
        differ = [k for k in range(len(parts[0])) if len({p[k] for p in parts}) > 1]
        labels = ["-".join(p[k] for k in differ) for p in parts]
        labels = [re.sub(r"[^A-Za-z0-9_.-]+", "-", x).strip("-.") for x in labels]
        if all(labels) and len(set(labels)) == len(labels):
            return labels
    return [f"run{k + 1}" for k in range(len(sources))]


def evaluate_recipes(env: str | None, texts: list[str], *, out: str | os.PathLike[str],
                     episodes: int = 10, overwrite: bool = False, resume: bool = False,
                     vecnormalize: str | None = None, baseline: str | None = None,
                     **options: Any) -> dict[str, Any]:
    """Evaluate every run of every recipe on the same seeds, then compare the recipes.
    ``options`` are :func:`rolltape.evaluate`'s. Returns comparison.json's content."""
    from rolltape.drivers.sweep import evaluate_runs, prepare_root, undone_on_usage_error

    if vecnormalize is not None:
        raise UsageError("--vecnormalize applies to one checkpoint; a recipe's runs use the "
                         "statistics saved beside each checkpoint.")
    if baseline is not None:
        raise UsageError("--baseline is not part of a recipe comparison; drop it (evaluate "
                         "random as a recipe of its own to see it beside them).")
    recipes = parse_recipes(texts)
    root, created = prepare_root(out, overwrite=overwrite, resume=resume)
    write_json(root / MANIFEST, {
        "env": env, "suite": options.get("suite"), "tasks": options.get("tasks"),
        "episodes": episodes, "seed": options.get("seed", 0),
        "recipes": {name: [{"label": e.label, "folder": f"{name}/{e.label}",
                            "policy": e.policy, "vecnormalize": e.vecnormalize}
                           for e in entries] for name, entries in recipes.items()}})
    show, command = options.pop("show_progress", False), options.pop("command", None)
    opts = {**options, "episodes": episodes}
    # A resumed folder holds earlier runs: it is kept whatever stops this command.
    with undone_on_usage_error(None if resume else created):
        for name, entries in recipes.items():
            runs: list[Any] = []
            evaluate_runs(env, [(e.label, e.policy, e.vecnormalize, opts) for e in entries],
                          root / name, runs, overwrite=overwrite, resume=resume,
                          show_progress=show, command=command, on_run=None)
    return write_recipe_comparison(root)
