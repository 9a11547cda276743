"""The ``export`` verb: build an :class:`rolltape.datasets.ExportConfig` from the flags,
call :func:`rolltape.datasets.export_run`, say what it wrote.

May import: typer, cli.options, cli.show, and the export package's record (its writers
lazily, inside the work). Never at module level: minari, pyarrow, gymnasium, mujoco, torch.
"""

from __future__ import annotations

from typing import Any

from rolltape.cli.options import config_values, options_of, takes
from rolltape.cli.show import say, warn
from rolltape.datasets import NOT_EXPORTED, ExportConfig


@takes(options_of(ExportConfig, skip=tuple(NOT_EXPORTED)))
def export(**given: Any) -> None:
    """Replay a run's tapes (verified step by step) and write them as a dataset: with
    --to minari under --out (default MINARI_DATASETS_PATH), with --to lerobot in --out."""
    from rolltape.datasets import export_run

    outcome = export_run(ExportConfig(**config_values(ExportConfig, given)))
    for label, why in outcome.without_tape:
        warn(f"rolltape: left out {label}: {why}")
    for label, why in outcome.left_out:
        warn(f"rolltape: left out {label}: its replay diverged at {why}")
    out_count = len(outcome.left_out) + len(outcome.without_tape)
    notes = [f"{out_count} left out"] if out_count else []
    if outcome.resumed:
        notes.append(f"resumed after {outcome.resumed} replayed episodes")
    say(f"wrote {outcome.path} ({outcome.format}: {outcome.episodes} episodes, "
        f"{outcome.steps} steps{''.join(', ' + n for n in notes)})")
    if outcome.drawn_by:  # --renderer mjwarp: the frames are not env.render()'s
        say(f"its {outcome.drawn_by}.")


VERBS = {"export": export}
