"""Several policies in one command: one complete run per policy, then their comparison.

``rolltape eval ENV --policy A --policy B`` (or a glob of checkpoints) evaluates each
policy with :func:`rolltape.evaluate` into ``OUT/<label>/`` (a normal run folder: tapes,
videos, summary, report, resumable), all on the same seeds, with the random baseline as one
more run (``OUT/random/``, evaluated once), then writes ``OUT/comparison.json``,
``OUT/comparison.html``, ``OUT/sweep.json`` (what each folder holds) and, for checkpoints
with videos, ``OUT/strip.mp4`` across them. ``--workers`` and ``--executor ray`` apply to
each run.

May import: evaluate, compare, outputs, files, errors. Never: torch, SB3, GL.

Example (not run: it evaluates checkpoints):
    >>> sweep = evaluate_many("Hopper-v5", ["sb3:ckpt/rl_model_*_steps.zip"],
    ...                       baseline="random", episodes=20, out="runs/sweep")
    >>> sweep.comparison["pairs"][0]["returns"]["verdict"]
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from rolltape.compare.checkpoints import Entry, expand_policies, is_glob
from rolltape.compare.report import write_comparison
from rolltape.compare.runs import LoadedRun
from rolltape.errors import UsageError
from rolltape.files import write_json
from rolltape.outputs.artifacts import check_writable_folder, refuse_existing

__all__ = ["SweepResult", "evaluate_many", "wants_sweep"]

BASELINE = "random"  # the baseline's folder and label


@dataclass(frozen=True)
class SweepResult:
    """A finished multi-policy run: its folder, the entries and comparison.json's content."""

    path: Path
    entries: list[Entry]
    runs: list[Any]  # rolltape.record.Run, one per entry (and the baseline last)
    comparison: dict[str, Any]


def wants_sweep(policies: list[str]) -> bool:
    """Several policies, or a glob of checkpoints: a multi-policy run."""
    return len(policies) > 1 or any(p.startswith("sb3:") and is_glob(p[4:]) for p in policies)


def _finished(folder: Path) -> bool:
    staging = folder.with_name(f".{folder.name}.partial")
    return (folder / "results.json").is_file() and not staging.exists()


def evaluate_many(env: str | None, policies: list[str], *, out: str | os.PathLike[str],
                  vecnormalize: str | os.PathLike[str] | None = None,
                  baseline: str | None = None, reference: str | None = None,
                  overwrite: bool = False, resume: bool = False, show_progress: bool = False,
                  command: list[str] | None = None,
                  on_run: Callable[[str, Any], None] | None = None,
                  strip: bool | None = None, **options: Any) -> SweepResult:
    """Evaluate each of ``policies`` (globs expanded, checkpoints ordered by steps) on the
    same seeds, each into its own run folder under ``out``, and compare them.

    ``options`` are :func:`rolltape.evaluate`'s (episodes, seed, video, workers, ...);
    with ``suite`` (and ``tasks``) instead of ``env``, every policy plays the suite's tasks
    and the comparison pairs seeds within each task.
    ``reference`` names the entry whose score normalizes to 1 for the suite aggregates.
    ``on_run(label, run)`` sees each run as it finishes. With ``resume``, finished runs are
    kept and interrupted ones continued. ``strip`` (default: when videos are asked for)
    renders one video across the numbered checkpoints.
    """
    entries = expand_policies(list(policies), None if vecnormalize is None else str(vecnormalize))
    if baseline not in (None, BASELINE):
        raise UsageError(f"--baseline '{baseline}' is not supported; use 'random' or leave "
                         "it off.")
    if len(entries) + (baseline is not None) < 2:
        raise UsageError(f"--policy names {len(entries)} policy; a comparison needs two or "
                         "more (another --policy, a glob of several checkpoints, or "
                         "--baseline random).")
    labels = [e.label for e in entries]
    if reference is not None and reference not in labels:  # before minutes of evaluation
        raise UsageError(f"--reference '{reference}' is not one of the policies' folder names "
                         f"({', '.join(labels)}); name one of them.")
    root, created = prepare_root(out, overwrite=overwrite, resume=resume)
    jobs = [(e.label, e.policy, e.vecnormalize, options) for e in entries]
    if baseline is not None:  # evaluated once, no videos: it is the yardstick
        jobs.append((BASELINE, "random", None, {**options, "video": 0}))
    write_json(root / "sweep.json", _manifest(env, entries, baseline, options))
    runs: list[Any] = []  # filled as each run finishes
    with undone_on_usage_error(created, runs):
        evaluate_runs(env, jobs, root, runs, overwrite=overwrite, resume=resume,
                      show_progress=show_progress, command=command, on_run=on_run)
    # The runs just made (or kept by --resume) are their own records: no need to read them.
    loaded = [LoadedRun.of(run, e.label, e.steps) for e, run in zip(entries, runs)]
    base = LoadedRun.of(runs[-1], BASELINE, baseline=True) if baseline else None
    strip_info = None
    checkpoints = [r for r in loaded if r.steps is not None]
    if strip is None:
        strip = options.get("video") not in (None, 0, "0", "", "none")
    if strip and len(checkpoints) >= 2:
        from rolltape.compare.strip import make_strip

        strip_info = make_strip(root, checkpoints, env, options=options)
    result = write_comparison(loaded, root, baseline=base, reference=reference,
                              strip=strip_info)
    return SweepResult(root, entries, runs, result)


def prepare_root(out: str | os.PathLike[str], *, overwrite: bool, resume: bool
                 ) -> tuple[Path, Path | None]:
    """The folder of a multi-run command, made (refused when it exists without --overwrite
    or --resume), and the first folder this command made, to remove again if bad input
    stops the first run (None when it made none)."""
    if overwrite and resume:
        raise UsageError("--overwrite and --resume contradict each other: --resume continues "
                         "the run in --out, --overwrite starts it again; pass one.")
    root = Path(out)
    check_writable_folder(root)
    if not resume:
        refuse_existing(root, overwrite)
    created = next((p for p in reversed([root, *root.parents]) if not p.exists()), None)
    root.mkdir(parents=True, exist_ok=True)
    return root, created


@contextlib.contextmanager
def undone_on_usage_error(created: Path | None, finished: Sequence[Any] = ()) -> Iterator[None]:
    """Remove ``created`` (the first folder the command made: :func:`prepare_root`) when
    bad input (a UsageError) stops the command while ``finished`` holds no finished run, and
    re-raise: a refused command leaves no half-made folder, and a finished run is kept."""
    try:
        yield
    except UsageError:
        if created is not None and not finished:
            shutil.rmtree(created, ignore_errors=True)
        raise


def evaluate_runs(env: str | None, jobs: list[tuple[str, str, str | None, dict[str, Any]]],
                  root: Path, runs: list[Any], *, overwrite: bool, resume: bool,
                  show_progress: bool, command: list[str] | None,
                  on_run: Callable[[str, Any], None] | None) -> None:
    """One evaluate() per job, in order, each finished run appended to ``runs``; with
    ``resume`` a finished run is kept as it is."""
    from rolltape.evaluation import evaluate
    from rolltape.record import Run

    for label, policy, stats, opts in jobs:
        folder = root / label
        if resume and _finished(folder):
            run = Run.load(folder)
        else:
            run = evaluate(env, policy, out=folder, vecnormalize=stats, baseline=None,
                           overwrite=overwrite, resume=resume, show_progress=show_progress,
                           command=command, **opts)
        runs.append(run)
        if on_run is not None:
            on_run(label, run)


def _manifest(env: str | None, entries: list[Entry], baseline: str | None,
              options: dict[str, Any]) -> dict[str, Any]:
    rows = [{"label": e.label, "folder": e.label, "policy": e.policy,
             "vecnormalize": e.vecnormalize, "steps": e.steps, "baseline": False}
            for e in entries]
    if baseline is not None:
        rows.append({"label": BASELINE, "folder": BASELINE, "policy": "random",
                     "vecnormalize": None, "steps": None, "baseline": True})
    return {"env": env, "suite": options.get("suite"), "tasks": options.get("tasks"),
            "entries": rows}
