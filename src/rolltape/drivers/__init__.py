"""What ``rolltape eval`` runs, chosen in one place: :func:`run_eval` plays one policy
(:func:`rolltape.evaluation.evaluate`), several on the same seeds (``drivers.sweep``), an
evaluation until the evidence decides or recipes of several training runs
(``drivers.evidence``), or a latency sweep (``drivers.latency``), from an :class:`EvalPlan`
(the choices that pick the driver) and the evaluation's own options (``EvalConfig``'s).

May import: config, groups, flags, errors; the drivers lazily. Never: typer, torch, GL.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, List, Optional

from rolltape.errors import RunFailed, UsageError, check_choice
from rolltape.flags import OUTPUT, POLICY, UNTIL, VIDEO, check_flags, flag
from rolltape.groups import Episodes, PolicySource, Reference, RunFolder, Sampling

Say = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class EvalPlan(PolicySource, Sampling, Reference, RunFolder):
    """Which policies ``rolltape eval`` plays and how it goes on: the choices that pick
    the driver, beside the evaluation's own options."""

    env: str | None = flag(
        None, "Gymnasium env id (HalfCheetah-v5), MODULE:EnvId, or FILE.py:CLASS (a class or "
        "factory); leave it out with --suite.", panel=POLICY, argument=True)
    checkpoint: str | None = flag(
        None, "With --policy zoo:FOLDER: last (the final model, default), best "
        "(best_model.zip) or N (rl_model_N_steps.zip).", panel=POLICY)
    resume: bool = flag(False, "Continue an interrupted run in --out.", panel=OUTPUT)
    recipe: tuple[str, ...] = flag(
        (), "NAME='sb3:GLOB': the checkpoints of several training runs of one recipe (each "
        "with its VecNormalize statistics); repeat per recipe. Every run plays the same "
        "seeds; `rolltape compare OUT` compares the recipes.", panel=UNTIL,
        cli_type=Optional[List[str]], cli_default=None, parse=tuple)
    until: str | None = flag(
        None, "Stop early: 'width<W' (every task's 95% anytime-valid interval narrower than "
        "W: percentage points for success, return units otherwise) or 'decided' (two "
        "policies' paired difference excludes 0, or lies within --margin). Needs "
        "--max-episodes.", panel=UNTIL)
    margin: float = flag(0.0, "With --until decided: differences within +-margin count as "
                              "equivalent (decided too).", panel=UNTIL)
    max_episodes: int | None = flag(None, "With --until: the most episodes per task and "
                                          "policy.", panel=UNTIL)
    batch: int = flag(10, "With --until: episodes per batch (a look after each).",
                      panel=UNTIL)
    return_bounds: str | None = flag(
        None, "With --until on returns: LO,HI, the least and most one episode can return "
        "(the anytime-valid interval of a mean needs bounds), e.g. 0,500.", panel=UNTIL)
    branch: bool = flag(
        False, "Then branch the rendered episodes (`rolltape branch`: 16 branches every 10 "
        "steps) and draw P(success | state at t) under their videos.", panel=VIDEO,
        names=("--branch",))

    def __post_init__(self) -> None:
        check_flags(self)

    @property
    def evidence(self) -> bool:
        """Batches until decided, or recipes of several runs (drivers.evidence)."""
        return bool(self.until is not None or self.recipe or self.max_episodes is not None
                    or self.return_bounds or self.margin)


def run_eval(plan: EvalPlan, values: dict[str, Any], executor_options: dict[str, Any],
             command: list[str], say: Say, show_run: Callable[[Any], None],
             show_comparison: Callable[[dict[str, Any], Path], None]) -> None:
    """Evaluate as ``rolltape eval`` does: ``values`` are the evaluation's own options
    (``EvalConfig``'s fields that were given); ``say`` prints a line, ``show_run`` a
    finished run, ``show_comparison`` several policies' comparison. Raises
    :class:`RunFailed` when episodes failed (their numbers are written)."""
    from rolltape.drivers.sweep import wants_sweep

    policies, values = list(plan.policy) or ["random"], dict(values)
    episodes = values.pop("episodes", Episodes.episodes)
    many = wants_sweep(policies)
    _check(plan, policies, values, many)
    zoo = policies[0][4:].rstrip("/") if policies[0].startswith("zoo:") else None
    name = Path(plan.env or zoo or Path(values.get("suite") or "suite").stem).name
    if "viewer" in values:  # the 3-D replay is part of the report
        values["viewer"] = values["viewer"] and values.get("report", True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    options: dict[str, Any] = dict(
        values, out=Path(plan.out or Path("runs") / f"{name.replace(':', '-')}-{stamp}"),
        **({"deterministic": plan.deterministic} if plan.deterministic is not None else {}),
        **({"checkpoint": plan.checkpoint} if plan.checkpoint is not None else {}),
        executor_options=executor_options, overwrite=plan.overwrite, resume=plan.resume,
        show_progress=not plan.quiet, command=command)
    if plan.evidence:
        from rolltape.drivers.evidence import eval_evidence

        for line in eval_evidence(plan.env, list(plan.policy), list(plan.recipe),
                                  until=plan.until, margin=plan.margin,
                                  max_episodes=plan.max_episodes, batch=plan.batch,
                                  episodes=episodes, return_bounds=plan.return_bounds,
                                  reference=plan.reference, **options):
            say(line)
        return
    latency, execution = values.get("latency"), values.get("execution") or "sync"
    if latency is not None and ("," in latency or "," in execution):
        if many or values.get("suite") is None and plan.env is None:
            raise UsageError("A latency sweep (several --latency or --execution values) "
                             "evaluates one policy on one env or suite; give one --policy and "
                             "drop --until and --recipe.")
        from rolltape.drivers.latency import evaluate_latencies, parse_sweep, summary_lines

        latencies, executions = parse_sweep(options.pop("latency"),
                                            options.pop("execution", "sync"))
        result = evaluate_latencies(plan.env, policies[0], latencies=latencies,
                                    executions=executions, episodes=episodes, **options)
        for line in summary_lines(result, Path(options["out"])):
            say(line)
        return
    if many:
        from rolltape.drivers.sweep import evaluate_many

        sweep = evaluate_many(plan.env, policies, episodes=episodes, reference=plan.reference,
                              **options)
        show_comparison(sweep.comparison, sweep.path)
        failed = [r.path for r in sweep.runs if r.results.failed]
        if failed:
            raise RunFailed(f"episodes failed in {', '.join(map(str, failed))}; rerun with "
                            "--resume to play them again.")
        return
    from rolltape.evaluation import evaluate

    run = evaluate(plan.env, policies[0], episodes=episodes, **options)
    show_run(run)
    if plan.branch:
        _branch_rendered(run, plan, policies[0], values, executor_options, say)
    if run.results.failed:  # the numbers are written, but not all the numbers asked for
        raise RunFailed(f"{len(run.results.failed)} episode(s) failed (see the warning "
                        "above); rerun with --resume to play them again.")


def _check(plan: EvalPlan, policies: list[str], values: dict[str, Any], many: bool) -> None:
    """The rules between the plan's choices (each field's own were checked as it was made)."""
    algo = values.get("algo")
    if algo is not None:  # here, where every --policy is known (each run gets the flag)
        from rolltape.policies import SB3_ALGOS, is_sb3_source

        if not any(is_sb3_source(p) for p in policies):
            raise UsageError(f"--algo names the algorithm of an SB3 checkpoint; drop it for "
                             f"--policy {policies[0]}, or give --policy sb3:PATH.zip.")
        check_choice("--algo", algo.upper(), SB3_ALGOS)
    if plan.checkpoint is not None and not policies[0].startswith("zoo:"):
        raise UsageError("--checkpoint picks a model of --policy zoo:FOLDER; give the "
                         "checkpoint's own path with --policy sb3:PATH.zip instead.")
    if values.get("trust_module") and not policies[0].startswith("zoo:"):
        raise UsageError("--trust-module names a module a --policy zoo:FOLDER may import; for "
                         "an env module of your own, name the env (MODULE:EnvId) instead.")
    if plan.reference is not None and not many:
        raise UsageError(f"--reference '{plan.reference}' names one of several policies; "
                         "give two or more --policy, or leave --reference off.")
    if plan.branch and (many or plan.evidence or values.get("suite")):
        raise UsageError("--branch branches one policy's rendered episodes of one env; run "
                         "`rolltape branch RUN` on each run instead.")


def _branch_rendered(run: Any, plan: EvalPlan, policy: str, values: dict[str, Any],
                     executor_options: dict[str, Any], say: Say) -> None:
    """``eval --branch``: branch the policy's rendered episodes with ``rolltape branch``'s
    defaults; the policy, env and executor are the ones named on this command line."""
    from rolltape.branching import branch
    from rolltape.outputs.branch_chart import summary_line

    shown = sorted({v.key.index for v in run.results.videos
                    if v.path and v.key.role == "policy"})
    if not shown:
        raise UsageError("--branch draws its curves under the rendered episodes, and none was "
                         "rendered; give --video (worst, for one).")
    own = plan.env if plan.env is not None and ":" in plan.env else None  # a module or file
    result = branch(str(run.path), pick=tuple(shown), policy=policy,
                    vecnormalize=values.get("vecnormalize"), env=own, overwrite=True,
                    quiet=plan.quiet, executor=values.get("executor", "local"),
                    executor_options={k: v for k, v in executor_options.items()
                                      if k == "address"})
    for line in [*([result.thinned] if result.thinned else []),
                 *(summary_line(r) for r in result.episodes), *result.notes]:
        say(line)
