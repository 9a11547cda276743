"""The ``eval`` verb: pass 1 with rendering off, then verified videos (pass 2).

It builds an :class:`rolltape.drivers.EvalPlan` and the evaluation's options
(``EvalConfig``'s fields) from its flags and calls :func:`rolltape.drivers.run_eval`, which
picks one policy, several, evidence or a latency sweep.

May import: typer, cli.options, cli.show, config (EvalConfig), drivers, the executors'
option records; the evaluation lazily (``--help`` stays fast). Never: torch, GL at module
level.
"""

from __future__ import annotations

import sys
from typing import Any

from rolltape.cli.options import config_values, options_of, takes
from rolltape.cli.show import comparison, print_run, say
from rolltape.config import EvalConfig
from rolltape.drivers import EvalPlan
from rolltape.executors.base import option_records


@takes(options_of(EvalPlan), options_of(EvalConfig), *map(options_of, option_records()))
def eval_(**given: Any) -> None:
    """Evaluate a policy (pass 1, rendering off), then render verified videos (pass 2).

    --out: the run folder (default runs/ENV-TIME)."""
    from rolltape.drivers import run_eval

    executor_options = {k: v for record in option_records()
                        for k, v in config_values(record, given).items()}
    run_eval(EvalPlan(**config_values(EvalPlan, given)), config_values(EvalConfig, given),
             executor_options, sys.argv, say,
             lambda run: print_run(run.results, run.path), comparison)


VERBS = {"eval": eval_}
