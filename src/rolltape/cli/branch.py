"""The ``rolltape branch`` verb: parse its flags, call :func:`rolltape.branching.branch`,
print one line per episode.

May import: cli_options, outputs.branch_chart; the orchestrator lazily (``--help`` stays
fast). Never: torch, GL.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from rolltape.cli.show import say
from rolltape.outputs.branch_chart import summary_line


def branch_(
    run: Path = typer.Argument(..., help="A run folder (what `rolltape eval` wrote)."),
    episodes: str = typer.Option(
        "worst:3", "--episodes", "-n",
        help="Which episodes: worst:N, best:N, median, all, a count N (the first N), or "
             "indices like 0,3."),
    branches: int = typer.Option(16, help="Branches K played from each grid step."),
    every: int = typer.Option(10, help="Grid: a branch point every N steps from step 0."),
    noise: Optional[float] = typer.Option(
        None, help="Gaussian action noise, in half-widths of the action range, added to "
                   "a deterministic policy's actions (discrete actions: the probability "
                   "of a random one); default 0.1, or 0 for a stochastic policy (its own "
                   "sampling). 0 with a deterministic policy replays the tape."),
    budget: Optional[int] = typer.Option(
        None, help="At most this many env steps in all: the grid is thinned to fit."),
    threshold: float = typer.Option(
        0.5, help="The point of no return (safety) is where the band's upper (lower) "
                  "end stays below (above) this."),
    seed: int = typer.Option(0, help="Seeds every branch's sampling and noise."),
    workers: int = typer.Option(0, help="Worker processes (0: one per CPU core)."),
    executor: str = typer.Option("local", help="local (process pool) or ray: the "
                                 "branches are dealt as pass-1 episodes are."),
    ray_address: Optional[str] = typer.Option(
        None, help="Ray cluster (host:port, auto, ray://host:10001); default "
                   "RAY_ADDRESS, else a private local Ray. On a cluster the run's tapes "
                   "and policy files must sit at the same path on every machine."),
    policy: Optional[str] = typer.Option(
        None, "--policy", "-p",
        help="The policy, when not the run's own (needed for a module or .py policy)."),
    vecnormalize: Optional[str] = typer.Option(None, help="VecNormalize statistics, with "
                                               "--policy."),
    env: Optional[str] = typer.Option(
        None, help="Branch on this env (MODULE:EnvId or FILE.py:CLASS) instead of the "
                   "tapes' own; a tape of your own env needs it: tapes never import code."),
    output: Optional[Path] = typer.Option(None, "--out", "-o",
                                          help="Folder for the results (default RUN/branch)."),
    overwrite: bool = typer.Option(False, help="Replace an existing --out."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Where was an episode decided? P(success | state at t) from branch rollouts."""
    from rolltape.branching import branch

    result = branch(str(run), episodes=episodes, branches=branches, every=every,
                    noise=noise, budget=budget, threshold=threshold, seed=seed,
                    workers=workers, policy=policy, vecnormalize=vecnormalize, env=env,
                    out=None if output is None else str(output), overwrite=overwrite,
                    quiet=quiet, executor=executor,
                    executor_options={"address": ray_address} if ray_address else {})
    if result.thinned:
        say(result.thinned)
    for record in result.episodes:
        say(summary_line(record))
    for note in result.notes:
        say(f"note: {note}")
    say(f"branch.json and branch.png per episode in {result.out}")


VERBS = {"branch": branch_}
