"""``rolltape compare``: what it is asked for (:class:`CompareConfig`) and the one function
that does it (:func:`compare_folders`), choosing by what the folders hold: one ``eval
--recipe`` folder (its recipes compared, :mod:`rolltape.compare.recipes`), a sweep's own
folder (its comparison rebuilt in place) or several runs on the same seeds
(:mod:`rolltape.compare.report`).

May import: compare's report, recipes and runs, outputs.artifacts, executors.launch (signals
deferred while a stopped comparison is removed), groups, flags, errors.
Never: torch, GL, pass 1 or pass 2's workers.
"""

from __future__ import annotations

import shutil
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Any, List

from rolltape.errors import Interrupted, UsageError
from rolltape.flags import OUTPUT, check_flags, flag
from rolltape.groups import Reference, RunFolder


def _paths(given: Any) -> tuple[Path, ...]:
    return tuple(Path(p) for p in given)


@dataclass(frozen=True, kw_only=True)
class CompareConfig(Reference, RunFolder):
    """Which runs to compare and where the comparison goes (``out``: default beside the
    first run, compare-A-vs-B; a sweep's or recipes' folder: in it)."""

    runs: tuple[Path, ...] = flag(MISSING, "Run folders evaluated on the same seeds (or the "
                                  "folder of a multi-policy eval).", panel=OUTPUT,
                                  argument=True, cli_type=List[Path], parse=_paths)

    def __post_init__(self) -> None:
        object.__setattr__(self, "runs", _paths(self.runs))
        check_flags(self)
        if self.reference is not None and self.is_recipes:
            raise UsageError("--reference normalizes policies' scores; a recipe comparison "
                             "has none to normalize, drop it.")

    @property
    def is_recipes(self) -> bool:
        """One folder that ``eval --recipe`` wrote."""
        return len(self.runs) == 1 and (self.runs[0] / "recipes.json").is_file()


@dataclass(frozen=True)
class Compared:
    """What :func:`compare_folders` wrote: the folder, and comparison.json's content (of
    runs) or the summary lines (of recipes, ``result`` None)."""

    path: Path
    result: dict[str, Any] | None = None
    lines: tuple[str, ...] = ()


def compare_folders(config: CompareConfig) -> Compared:
    """Write the comparison ``config`` asks for; an interrupted one leaves nothing."""
    from rolltape.compare.report import write_comparison
    from rolltape.compare.runs import load_runs, sweep_runs
    from rolltape.outputs.artifacts import refuse_existing

    runs = config.runs
    output = None if config.out is None else Path(config.out)
    if config.is_recipes:
        from rolltape.compare.recipes import summary_lines, write_recipe_comparison

        if output is not None and output != runs[0]:
            refuse_existing(output / "comparison.json", config.overwrite)
        result = write_recipe_comparison(runs[0], output)
        return Compared(output or runs[0], None, tuple(summary_lines(result)))
    loaded = load_runs(runs)
    own = len(runs) == 1 and sweep_runs(runs[0]) is not None  # rebuild a sweep's own
    if output is None:
        output = runs[0] if own else runs[0].parent / (
            "compare-" + "-vs-".join(r.label for r in loaded if not r.baseline))
    if not own or output != runs[0]:
        refuse_existing(output / "comparison.json", config.overwrite)
    made = [p for p in (output, output / "comparison.json", output / "comparison.html")
            if not p.exists()]
    try:
        return Compared(output, write_comparison(loaded, output, reference=config.reference))
    except (KeyboardInterrupt, Interrupted):  # a comparison is whole or not there
        from rolltape.executors.launch import signals_deferred

        with signals_deferred():
            remove_made(made)
        raise


def remove_made(made: list[Path]) -> None:
    """Remove what a stopped command made: ``made`` lists paths absent when it began (a
    folder first: then everything in it is the command's)."""
    for path in made:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
            return
        path.unlink(missing_ok=True)
