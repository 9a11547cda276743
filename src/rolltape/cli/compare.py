"""The ``compare`` and ``diff`` verbs: read finished runs and say how they differ.

May import: typer, cli.show; the comparisons lazily (``--help`` stays fast). Never: torch,
GL, pass 1 or pass 2's workers.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from rolltape.cli.show import comparison, out
from rolltape.errors import Interrupted, UsageError


def compare(
    runs: List[Path] = typer.Argument(..., help="Run folders evaluated on the same seeds (or "
                                                "the folder of a multi-policy eval)."),
    output: Optional[Path] = typer.Option(
        None, "--out", "-o", help="Folder for comparison.json and comparison.html (default "
                                  "beside the first run, compare-A-vs-B)."),
    reference: Optional[str] = typer.Option(
        None, help="The run (by folder name) that scores 1 in normalized aggregates; random "
                   "scores 0."),
    overwrite: bool = typer.Option(False, help="Replace an existing comparison."),
) -> None:
    """Paired statistics of runs on the same seeds: verdicts, intervals, pictures."""
    from rolltape.compare.report import write_comparison
    from rolltape.compare.runs import load_runs, sweep_runs
    from rolltape.outputs.artifacts import refuse_existing

    if len(runs) == 1 and (runs[0] / "recipes.json").is_file():  # eval --recipe's folder
        from rolltape.compare.recipes import summary_lines, write_recipe_comparison

        if reference is not None:
            raise UsageError("--reference normalizes policies' scores; a recipe comparison "
                             "has none to normalize, drop it.")
        if output is not None and output != runs[0]:
            refuse_existing(output / "comparison.json", overwrite)
        for line in summary_lines(write_recipe_comparison(runs[0], output)):
            out.print(line, highlight=False, markup=False)
        return
    loaded = load_runs(runs)
    own = len(runs) == 1 and sweep_runs(runs[0]) is not None  # rebuild a sweep's own
    if output is None:
        output = runs[0] if own else runs[0].parent / (
            "compare-" + "-vs-".join(r.label for r in loaded if not r.baseline))
    if not own or output != runs[0]:
        refuse_existing(output / "comparison.json", overwrite)
    made = [p for p in (output, output / "comparison.json", output / "comparison.html")
            if not p.exists()]
    try:
        result = write_comparison(loaded, output, reference=reference)
    except (KeyboardInterrupt, Interrupted):  # a comparison is whole or not there
        from rolltape.executors.launch import signals_deferred

        with signals_deferred():
            _remove_made(made)
        raise
    comparison(result, output)


def diff_(
    run_a: Path = typer.Argument(..., help="A run folder written by `rolltape eval`."),
    run_b: Optional[Path] = typer.Argument(None, help="Another run of the same env or suite, "
                                                      "same seeds (or give --against)."),
    episode: Optional[int] = typer.Option(None, "--episode", help="Only this episode index."),
    explain: bool = typer.Option(False, "--explain",
                                 help="Say where every parting episode parts, not only the first."),
    json_out: Optional[Path] = typer.Option(None, "--json",
                                            help="Also write the whole report to this file."),
    html: Optional[Path] = typer.Option(None, "--html",
                                        help="Also write the page (diff.html) to this file."),
    against: Optional[Path] = typer.Option(
        None, "--against", help="A Minari dataset or a LeRobotDataset (its folder) to compare "
                                "RUN_A's episodes with, paired by seed, instead of RUN_B."),
) -> None:
    """Why two runs disagree: protocol card, first diverging step and field, its kind, the numbers."""
    from rolltape.compare.diff import diff_runs, report_lines, write_page

    report = diff_runs(run_a, run_b, episode=episode, against=against)
    if json_out is not None:
        from rolltape.outputs.artifacts import write_json

        write_json(json_out, report)
    if html is not None:
        from rolltape.compare.diff_videos import render_first

        write_page(report, html, render_first(report, html))
    for line in report_lines(report, explain=explain):
        out.print(line, highlight=False, markup=False)


def _remove_made(made: list[Path]) -> None:
    """Remove what a stopped command made: ``made`` lists paths absent when it began (a
    folder first: then everything in it is the command's)."""
    import shutil

    for path in made:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
            return
        path.unlink(missing_ok=True)


VERBS = {"compare": compare, "diff": diff_}
