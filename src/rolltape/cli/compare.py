"""The ``compare`` and ``diff`` verbs: read finished runs and say how they differ.

Each builds its record (:class:`rolltape.compare.folders.CompareConfig`,
:class:`rolltape.compare.diff.DiffConfig`), calls one API function and prints.

May import: cli.options, cli.show, the comparisons' records; their work lazily (``--help``
stays fast). Never: torch, GL, pass 1 or pass 2's workers.
"""

from __future__ import annotations

from typing import Any

from rolltape.cli.options import config_values, options_of, takes
from rolltape.cli.show import comparison, say
from rolltape.compare.diff import DiffConfig
from rolltape.compare.folders import CompareConfig


@takes(options_of(CompareConfig, skip=("quiet",)))
def compare(**given: Any) -> None:
    """Paired statistics of runs on the same seeds: verdicts, intervals, pictures.

    --out: default beside the first run, compare-A-vs-B (a sweep's or recipes' folder: in
    it)."""
    from rolltape.compare.folders import compare_folders

    compared = compare_folders(CompareConfig(**config_values(CompareConfig, given)))
    if compared.result is None:  # recipes: their own summary
        for line in compared.lines:
            say(line)
    else:
        comparison(compared.result, compared.path)


@takes(options_of(DiffConfig))
def diff_(**given: Any) -> None:
    """Why two runs disagree: protocol card, first diverging step and field, its kind, the numbers."""
    from rolltape.compare.diff import diff, report_lines

    config = DiffConfig(**config_values(DiffConfig, given))
    for line in report_lines(diff(config), explain=config.explain):
        say(line)


VERBS = {"compare": compare, "diff": diff_}
