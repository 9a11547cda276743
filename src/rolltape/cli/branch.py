"""The ``rolltape branch`` verb: build a :class:`rolltape.branching.BranchConfig` from the
flags, call :func:`rolltape.branching.branch_run`, print one line per episode.

May import: cli.options, cli.show, outputs.branch_chart, the branching record, the
executors' option records (each executor's own flags, as eval offers them); the
orchestrator's work lazily (``--help`` stays fast). Never: torch, GL.
"""

from __future__ import annotations

from typing import Any

from rolltape.branching import BranchConfig
from rolltape.cli.options import config_values, options_of, takes
from rolltape.cli.show import say
from rolltape.executors.base import option_records
from rolltape.outputs.branch_chart import summary_line


@takes(options_of(BranchConfig, skip=("execute_steps",)), *map(options_of, option_records()))
def branch_(**given: Any) -> None:
    """Where was an episode decided? P(success | state at t) from branch rollouts, written
    to --out (default RUN/branch), played by --workers (default one per core)."""
    from rolltape.branching import branch_run

    executor_options = {k: v for record in option_records()
                        for k, v in config_values(record, given).items()}
    result = branch_run(BranchConfig(**config_values(BranchConfig, given),
                                     executor_options=executor_options))
    if result.thinned:
        say(result.thinned)
    for record in result.episodes:
        say(summary_line(record))
    for note in result.notes:
        say(f"note: {note}")
    say(f"branch.json and branch.png per episode in {result.out}")


VERBS = {"branch": branch_}
