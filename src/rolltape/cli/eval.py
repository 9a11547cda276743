"""The ``eval`` verb: pass 1 with rendering off, then verified videos (pass 2).

May import: typer, cli.options, cli.show, config (EvalConfig); the evaluation lazily
(``--help`` stays fast). Never: torch, GL at module level.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, List, Optional

import typer

from rolltape.cli.options import config_values, options_of, takes
from rolltape.cli.show import comparison, out, print_run
from rolltape.config import EvalConfig
from rolltape.errors import RunFailed, UsageError, check_choice
from rolltape.executors.base import option_records
from rolltape.flags import OUTPUT, POLICY, UNTIL, VIDEO
from rolltape.groups import RunFolder


@takes(options_of(EvalConfig), options_of(RunFolder), *map(options_of, option_records()))
def eval_(
    env: Optional[str] = typer.Argument(
        None, help="Gymnasium env id (HalfCheetah-v5), MODULE:EnvId, or FILE.py:CLASS (a class "
                   "or factory); leave it out with --suite."),
    policy: Optional[List[str]] = typer.Option(
        None, "--policy", "-p", rich_help_panel=POLICY,
        help="random | sb3:PATH.zip | zoo:FOLDER (rl-zoo3) | MODULE:ATTR | FILE.py:ATTR | "
             "tape:PATH.npz; repeat, or a quoted glob of SB3 checkpoints, to compare several "
             "on the same seeds."),
    reference: Optional[str] = typer.Option(
        None, rich_help_panel=POLICY,
        help="With several --policy: the one (by folder name) that scores 1 in the "
             "normalized aggregates; random scores 0."),
    stochastic: bool = typer.Option(False, rich_help_panel=POLICY,
                                    help="Sample actions instead of the deterministic ones."),
    deterministic: bool = typer.Option(
        False, rich_help_panel=POLICY,
        help="Take the deterministic actions (the default, but for a zoo: Atari folder, whose "
             "actions are sampled as rl-zoo3's enjoy.py samples them)."),
    checkpoint: Optional[str] = typer.Option(
        None, rich_help_panel=POLICY,
        help="With --policy zoo:FOLDER: last (the final model, default), best "
             "(best_model.zip) or N (rl_model_N_steps.zip)."),
    resume: bool = typer.Option(False, rich_help_panel=OUTPUT,
                                help="Continue an interrupted run in --out."),
    recipe: Optional[List[str]] = typer.Option(
        None, rich_help_panel=UNTIL,
        help="NAME='sb3:GLOB': the checkpoints of several training runs of one recipe (each "
             "with its VecNormalize statistics); repeat per recipe. Every run plays the same "
             "seeds; `rolltape compare OUT` compares the recipes."),
    until: Optional[str] = typer.Option(
        None, rich_help_panel=UNTIL,
        help="Stop early: 'width<W' (every task's 95% anytime-valid interval narrower than W: "
             "percentage points for success, return units otherwise) or 'decided' (two "
             "policies' paired difference excludes 0, or lies within --margin). Needs "
             "--max-episodes."),
    margin: float = typer.Option(0.0, rich_help_panel=UNTIL,
                                 help="With --until decided: differences within +-margin "
                                      "count as equivalent (decided too)."),
    max_episodes: Optional[int] = typer.Option(None, rich_help_panel=UNTIL,
                                               help="With --until: the most episodes per task "
                                                    "and policy."),
    batch: int = typer.Option(10, rich_help_panel=UNTIL,
                              help="With --until: episodes per batch (a look after each)."),
    return_bounds: Optional[str] = typer.Option(
        None, rich_help_panel=UNTIL,
        help="With --until on returns: LO,HI, the least and most one episode can return (the "
             "anytime-valid interval of a mean needs bounds), e.g. 0,500."),
    branch: bool = typer.Option(
        False, "--branch", rich_help_panel=VIDEO,
        help="Then branch the rendered episodes (`rolltape branch`: 16 branches every 10 "
             "steps) and draw P(success | state at t) under their videos."),
    **config: Any,
) -> None:
    """Evaluate a policy (pass 1, rendering off), then render verified videos (pass 2).

    --out: the run folder (default runs/ENV-TIME)."""
    from rolltape.compare.sweep import wants_sweep
    from rolltape.evaluation import evaluate

    policies = policy or ["random"]
    values = config_values(EvalConfig, config)
    folder = config_values(RunFolder, config)
    episodes = values.pop("episodes", EvalConfig.episodes)
    algo = values.get("algo")
    if algo is not None:  # here, where every --policy is known (each run gets the flag)
        from rolltape.policies import SB3_ALGOS, is_sb3_source

        if not any(is_sb3_source(p) for p in policies):
            raise UsageError(f"--algo names the algorithm of an SB3 checkpoint; drop it for "
                             f"--policy {policies[0]}, or give --policy sb3:PATH.zip.")
        check_choice("--algo", algo.upper(), SB3_ALGOS)
    if stochastic and deterministic:
        raise UsageError("--stochastic and --deterministic contradict each other; give one.")
    if checkpoint is not None and not policies[0].startswith("zoo:"):
        raise UsageError("--checkpoint picks a model of --policy zoo:FOLDER; give the "
                         "checkpoint's own path with --policy sb3:PATH.zip instead.")
    if values.get("trust_module") and not policies[0].startswith("zoo:"):
        raise UsageError("--trust-module names a module a --policy zoo:FOLDER may import; for "
                         "an env module of your own, name the env (MODULE:EnvId) instead.")
    zoo = policies[0][4:].rstrip("/") if policies[0].startswith("zoo:") else None
    suite = values.get("suite")
    name = Path(env or zoo or Path(suite or "suite").stem).name.replace(":", "-")
    # Several policies go to the comparison driver, which runs this same evaluate per policy.
    many = wants_sweep(policies)
    if reference is not None and not many:
        raise UsageError(f"--reference '{reference}' names one of several policies; give "
                         "two or more --policy, or leave --reference off.")
    if "viewer" in values:  # the 3-D replay is part of the report
        values["viewer"] = values["viewer"] and values.get("report", True)
    options: dict[str, Any] = dict(
        values,
        out=Path(folder.get("out") or Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"),
        **({"deterministic": not stochastic} if stochastic or deterministic else {}),
        **({"checkpoint": checkpoint} if checkpoint is not None else {}),
        executor_options={k: v for record in option_records()
                          for k, v in config_values(record, config).items()},
        overwrite=folder.get("overwrite", False), resume=resume,
        show_progress=not folder.get("quiet", False), command=sys.argv,
    )
    evidence = until is not None or recipe or max_episodes is not None or return_bounds or margin
    if branch and (many or evidence or suite):
        raise UsageError("--branch branches one policy's rendered episodes of one env; run "
                         "`rolltape branch RUN` on each run instead.")
    if evidence:
        # batches until decided, or recipes of several runs
        from rolltape.compare.evidence import eval_evidence

        for line in eval_evidence(env, policy or [], recipe or [], until=until, margin=margin,
                                  max_episodes=max_episodes, batch=batch, episodes=episodes,
                                  return_bounds=return_bounds, reference=reference, **options):
            out.print(line, highlight=False, markup=False)
        return
    latency, execution = values.get("latency"), values.get("execution") or "sync"
    if latency is not None and ("," in latency or "," in execution):
        if many or evidence or suite is None and env is None:
            raise UsageError("A latency sweep (several --latency or --execution values) "
                             "evaluates one policy on one env or suite; give one --policy and "
                             "drop --until and --recipe.")
        _eval_latencies(env, policies[0], episodes=episodes, **options)
        return
    run = (_eval_many if many else evaluate)(
        # The list goes to _eval_many, one policy to evaluate: one call, two signatures.
        env, policies if many else policies[0], episodes=episodes,  # type: ignore[arg-type]
        **({"reference": reference} if many else {}), **options)  # type: ignore[arg-type]
    if run is None:  # several policies: _eval_many printed them
        return
    print_run(run.results, run.path)
    if branch:
        _branch_rendered(run, policies[0], env, values.get("vecnormalize"),
                         folder.get("quiet", False),
                         values.get("executor", "local"),
                         {k: v for k, v in options["executor_options"].items() if k == "address"})
    failed = run.results.failed
    if failed:  # the numbers are written, but they are not all the numbers asked for
        raise RunFailed(f"{len(failed)} episode(s) failed (see the warning above); rerun "
                        "with --resume to play them again.")


def _branch_rendered(run: Any, policy: str, env: str | None, vecnormalize: str | None,
                     quiet: bool, executor: str, executor_options: dict[str, Any]) -> None:
    """``eval --branch``: branch the policy's rendered episodes with ``rolltape branch``'s
    defaults; the policy, env and executor are the ones named on this command line."""
    from rolltape.branching import branch
    from rolltape.outputs.branch_chart import summary_line

    shown = sorted({v.key.index for v in run.results.videos
                    if v.path and v.key.role == "policy"})
    if not shown:
        raise UsageError("--branch draws its curves under the rendered episodes, and none was "
                         "rendered; give --video (worst, for one).")
    own = env if env is not None and ":" in env else None  # a module or file the user named
    result = branch(str(run.path), episodes=tuple(shown), policy=policy,
                    vecnormalize=vecnormalize, env=own, overwrite=True, quiet=quiet,
                    executor=executor, executor_options=executor_options)
    for line in [*([result.thinned] if result.thinned else []),
                 *(summary_line(r) for r in result.episodes), *result.notes]:
        out.print(line, highlight=False, markup=False)


def _eval_latencies(env: str | None, policy: str, **options: Any) -> None:
    """Several --latency or --execution values: one run each under --out, then the latency
    report (rolltape.compare.latency)."""
    from rolltape.compare.latency import evaluate_latencies, parse_sweep, summary_lines

    latencies, executions = parse_sweep(options.pop("latency"), options.pop("execution", "sync"))
    result = evaluate_latencies(env, policy, latencies=latencies, executions=executions,
                                **options)
    for line in summary_lines(result, Path(options["out"])):
        out.print(line, highlight=False, markup=False)


def _eval_many(env: str | None, policies: list[str], **options: Any) -> None:
    """Several policies (or a glob of checkpoints) on the same seeds: one run each under
    --out, then their comparison (rolltape.compare.sweep)."""
    from rolltape.compare.sweep import evaluate_many

    sweep = evaluate_many(env, policies, **options)
    comparison(sweep.comparison, sweep.path)
    failed = [r.path for r in sweep.runs if r.results.failed]
    if failed:
        raise RunFailed(f"episodes failed in {', '.join(map(str, failed))}; rerun with "
                        "--resume to play them again.")


VERBS = {"eval": eval_}
