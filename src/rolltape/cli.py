"""The ``rolltape`` command: a thin layer over the Python API.

Each verb parses its flags, calls one API function and prints what it did. Bad input is
one sentence on stderr and exit status 2; a replay that diverged with
``--on-divergence fail`` exits 1.

May import: anything of rolltape, lazily inside each verb (so `rolltape --help` stays fast).
Never: torch or GL at module level.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Mapping, Optional

import typer
from rich.console import Console
from rich.table import Table

from rolltape import branch_command as _branch_command
from rolltape import server_commands as _server_commands
from rolltape.cli_options import PanelCommand, config_values, options_of, takes
from rolltape.config import EvalConfig
from rolltape.datasets import command as _dataset_commands
from rolltape.errors import DivergenceError, Interrupted, RunFailed, UsageError, check_choice
from rolltape.flags import OUTPUT, POLICY, SCALE, UNTIL, VIDEO
from rolltape.flags import parse_kwargs as parse_kwargs  # the CLI's KEY=VALUE grammar
from rolltape.outputs.summary import (
    improvement_line,
    success_rule_text,
    summary_rows,
    summary_title,
)
from rolltape.pass2 import formats
from rolltape.pass2.backends import BACKENDS_HELP, DEFAULT_ORDER
from rolltape.pass2.request import RenderOptions, RenderRequest

if TYPE_CHECKING:
    from rolltape.record import Results

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="Evaluate RL policies with rendering off; render their tapes faithfully.")
# Not a terminal (a log, CI): a fixed width so tables do not wrap at 80 columns. Lines are
# never wrapped, so a per-tape line stays one line for grep whatever its path's length.
out = Console(width=None if sys.stdout.isatty() else 120, soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)  # a message stays one line, for grep and logs

TRUST_HELP = ("MODULE: replay tapes whose env id names this module (MODULE:EnvId) as if "
              "given with --env; repeatable. Packages of Gymnasium envs need no flag.")
ENV_HELP = ("Replay on this env (id, MODULE:EnvId or FILE.py:CLASS) instead of the tape's; a "
            "tape of your own env needs it: tapes never import code.")


def _print_version(value: bool) -> None:
    if value:
        from rolltape import __version__

        out.print(f"rolltape {__version__}", highlight=False)
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def _options(ctx: typer.Context,
             version: bool = typer.Option(False, "--version", is_eager=True,
                                          callback=_print_version,
                                          help="Print the version and exit.")) -> None:
    """Evaluate RL policies with rendering off; render their tapes faithfully."""
    # Not typer's no_args_is_help: that prints the whole help, a usage error is one line.
    if ctx.invoked_subcommand is None:
        verbs = ", ".join(c.name or c.callback.__name__ for c in app.registered_commands
                          if c.callback is not None)
        raise UsageError(f"give a command: {verbs}; try `rolltape --help`.")


@app.command("eval", cls=PanelCommand)
@takes(options_of(EvalConfig))
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
    trust_module: Optional[List[str]] = typer.Option(
        None, "--trust-module", rich_help_panel=POLICY,
        help="With --policy zoo:FOLDER: a module (top-level name) its env_wrapper or "
             "gym_packages may import though it is not an installed package of Gymnasium "
             "envs; repeat per module. Its code then runs: name only code you trust."),
    ray_address: Optional[str] = typer.Option(
        None, rich_help_panel=SCALE,
        help="Ray cluster (host:port, auto, ray://host:10001); default RAY_ADDRESS, else a "
             "private local Ray."),
    ray_render_gpus: float = typer.Option(0.0, rich_help_panel=SCALE,
                                          help="GPUs each Ray render task asks for."),
    out_dir: Optional[Path] = typer.Option(None, "--out", "-o", rich_help_panel=OUTPUT,
                                           help="Run folder (default runs/ENV-TIME)."),
    overwrite: bool = typer.Option(False, rich_help_panel=OUTPUT,
                                   help="Replace an existing run folder."),
    resume: bool = typer.Option(False, rich_help_panel=OUTPUT,
                                help="Continue an interrupted run in --out."),
    quiet: bool = typer.Option(False, "--quiet", "-q", rich_help_panel=OUTPUT,
                               help="No progress bars."),
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
    """Evaluate a policy (pass 1, rendering off), then render verified videos (pass 2)."""
    from rolltape.compare.sweep import wants_sweep
    from rolltape.evaluation import evaluate

    policies = policy or ["random"]
    values = config_values(EvalConfig, config)
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
    if trust_module and not policies[0].startswith("zoo:"):
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
        out=out_dir or Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}",
        **({"deterministic": not stochastic} if stochastic or deterministic else {}),
        **({"checkpoint": checkpoint} if checkpoint is not None else {}),
        **({"trust_module": tuple(trust_module)} if trust_module else {}),
        executor_options={k: v for k, v in (("address", ray_address),
                                            ("render_gpus", ray_render_gpus)) if v},
        overwrite=overwrite, resume=resume, show_progress=not quiet, command=sys.argv,
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
        _branch_rendered(run, policies[0], env, values.get("vecnormalize"), quiet,
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
    _print_comparison(sweep.comparison, sweep.path)
    failed = [r.path for r in sweep.runs if r.results.failed]
    if failed:
        raise RunFailed(f"episodes failed in {', '.join(map(str, failed))}; rerun with "
                        "--resume to play them again.")


def _print_comparison(result: dict[str, Any], path: Path) -> None:
    from rolltape.compare.report import summary_lines

    for line in summary_lines(result):
        out.print(line, highlight=False, markup=False)
    for w in result.get("warnings") or []:
        err.print(f"warning: {w}", highlight=False, markup=False)
    strip = result.get("strip")
    if strip and strip.get("path"):
        state = "verified" if strip["verified"] else "NOT verified"
        out.print(f"video across checkpoints: {path / strip['path']} (seed {strip['seed']}, "
                  f"{state})", highlight=False)
    out.print(f"comparison written to {path / 'comparison.html'} (and comparison.json)",
              highlight=False)


TABLE_WIDTH = 80  # off a terminal the table fits what a log viewer or an 80-column tty shows


def summary_table(results: Results, width: int) -> Table:
    """The per-role summary as a rich table of at most ``width`` columns (cells and the
    columns that go when it is narrow: :func:`rolltape.outputs.summary.summary_rows`)."""
    header, rows = summary_rows(results.summary, width)
    table = Table(title=summary_title(results),
                  caption=f"success: {success_rule_text(results.success_rule)}"
                  if any(s.success_rate is not None for s in results.summary.values()) else None)
    for name in header:
        table.add_column(name, justify="right")
    for row in rows:
        table.add_row(*row)
    return table


def suite_table(suite: Mapping[str, Any], name: str) -> Table:
    """A suite run's per-task table (``Results.suite``) as the CLI prints it: compact
    columns that fit 80 characters (:data:`rolltape.outputs.suite_view.COMPACT`), the rule
    in the caption."""
    from rolltape.outputs.suite_view import compact_caption, task_rows

    header, rows = task_rows(suite, compact=True)
    table = Table(title=f"{name}: success per task (95% Wilson interval)",
                  caption=compact_caption(suite), caption_justify="left")
    for column in header:
        table.add_column(column, justify="left" if column == "task" else "right")
    for row in rows:
        table.add_row(*row)
    return table


def print_run(results: Results, path: Path) -> None:
    """The summary table, the videos and where everything went."""
    if results.suite is not None:
        from rolltape.outputs.suite_view import headline_text

        out.print(suite_table(results.suite, results.env_id))
        # A suite's headline is success: returns of different tasks do not pool.
        out.print(headline_text(results.suite), highlight=False)
    else:
        out.print(summary_table(results, out.width if out.is_terminal else TABLE_WIDTH))
        line = improvement_line(results)
        if line:
            out.print(line)
    for v in results.videos:
        if v.path is None:
            out.print(f"{v.key.label}: not rendered")
            continue
        status = ("verified: replay earned exactly what pass 1 earned" if v.verified
                  else f"DIVERGED at {v.get('divergence_text')}" if v.verified is False
                  else "drawn from recorded states (not re-simulated)")
        if fell_back(v.get("mode"), v.verified):
            status += f"; {FELL_BACK}"
        out.print(f"video {path / v.path} ({v.get('frames')} frames, {gl_name(v.get('backend'))}, "
                  f"{camera_text(v.get('cameras'))}): {status}")
        if v.get("camera_hint"):
            err.print(f"hint: {v.key.label}: {v.get('camera_hint')}.", highlight=False,
                      soft_wrap=True)
    # MuJoCo's own warnings (deprecated XML in Gymnasium's models) are kept, not shouted.
    quiet = [w for w in results.warnings if w.startswith("MuJoCo: ")]
    for w in results.warnings:
        if w not in quiet:
            err.print(f"warning: {w}")
    if quiet:
        err.print(f"note: {len(quiet)} MuJoCo warning(s) recorded in metadata.json")
    out.print(f"run written to {path}/ ({', '.join(_existing(path, RUN_FILES))})")
    # Only what is there: a report whose notebook did not fit on the disk names no notebook.
    extras = [text for name, text in (("report.ipynb", "notebook: report.ipynb"),
                                      ("viewer", f"3-D replay: `rolltape view {path}`"))
              if (path / name).exists()]
    if (path / "report.html").is_file():
        out.print(f"report: {path / 'report.html'}" + (f" ({'; '.join(extras)})" if extras else ""))
    elif (path / "report.ipynb").is_file():
        out.print(f"notebook: {path / 'report.ipynb'}")


RUN_FILES = ("results.json", "episodes.jsonl", "metadata.json", "tapes/", "videos/")


def _existing(path: Path, names: tuple[str, ...]) -> list[str]:
    """The ``names`` (a folder ends in '/') that exist in ``path``."""
    return [n for n in names if ((path / n).is_dir() if n.endswith("/") else (path / n).is_file())]


FELL_BACK = ("--mode auto fell back to restore: the video draws the recorded states, so it "
             "shows what pass 1 did")


def fell_back(mode: str | None, verified: bool | None) -> bool:
    """True when --mode auto re-simulated, diverged and drew the recorded states instead
    (restore itself verifies nothing, so it never reports False)."""
    return verified is False and mode == "restore"


def gl_name(backend: str | None) -> str:
    """The GL backend that drew a video, or "no GL" for frames the env draws itself (ALE's
    screens, pygame's classic control and Box2D)."""
    return backend or "no GL"


def camera_text(cameras: list[str] | tuple[str, ...] | None) -> str:
    """'camera default', 'cameras default + track:torso'."""
    names = list(cameras or ()) or ["default"]
    return f"camera{'s' if len(names) > 1 else ''} {' + '.join(names)}"


def default_video_path(tape: Path) -> Path:
    """Beside the run's tapes/ folder in videos/, else beside the tape (no suffix yet)."""
    folder = tape.parent.parent / "videos" if tape.parent.name == "tapes" else tape.parent
    return folder / tape.stem




#: render's and verify's --workers: unset, one per CPU core, as eval's --render-workers
#: and export's --workers default to (check_workers); a count given must be 1 or more.
RENDER_WORKERS = ("Render processes (default: one per CPU core, as eval's and export's; a long "
                  "video is split across them).")


@app.command(cls=PanelCommand)
@takes(options_of(RenderOptions), options_of(RenderRequest, only=("fps",)))
def render(
    tapes: List[Path] = typer.Argument(..., help="Tape files (.npz)."),
    # A string, not a Path: a trailing slash (a folder) must survive.
    output: Optional[str] = typer.Option(None, "--out", "-o", rich_help_panel=OUTPUT,
                                         help="Output file (one tape) or folder (several, or "
                                              "PNG frames: end it with /)."),
    video_format: Optional[str] = typer.Option(
        None, "--format", rich_help_panel=VIDEO,
        help=f"Comma-separated: {formats.names()} (png: a folder of frames)."),
    env: Optional[str] = typer.Option(None, help=ENV_HELP),
    trust_module: Optional[List[str]] = typer.Option(None, "--trust-module", help=TRUST_HELP),
    backends: str = typer.Option(",".join(DEFAULT_ORDER), rich_help_panel=VIDEO,
                                 help=BACKENDS_HELP),
    workers: Optional[int] = typer.Option(None, rich_help_panel=SCALE, help=RENDER_WORKERS),
    on_divergence: str = typer.Option("warn", rich_help_panel=VIDEO, help="warn or fail."),
    overwrite: bool = typer.Option(False, rich_help_panel=OUTPUT,
                                   help="Replace existing files."),
    quiet: bool = typer.Option(False, "--quiet", "-q", rich_help_panel=OUTPUT,
                               help="No progress bar."),
    **config: Any,
) -> None:
    """Replay tapes in isolated render processes, verify them and write videos."""
    from rolltape.config import check_render_options
    from rolltape.outputs.artifacts import artifact_paths, check_output_name

    check_choice("--on-divergence", on_divergence, ("warn", "fail"))
    drawn = RenderOptions(**config_values(RenderOptions, config))  # checks itself
    fps = config.get("fps")
    check_render_options(fps=fps, formats=video_format)
    workers = check_workers(workers)
    if output is not None:
        check_output_name(output, several=len(tapes) > 1)
    requests = []
    for tape in tapes:
        base: str | Path
        if output is None:
            base = default_video_path(tape)
        elif len(tapes) == 1:
            base = output
        else:
            base = Path(output) / tape.stem
        requests.append(RenderRequest(str(tape), artifact_paths(base, video_format), fps=fps,
                                      overwrite=overwrite, **drawn.render_options(),
                                      env_id=trusted_env(tape, env, trust_module)))
    results = _run_with_bar(requests, backends, workers, quiet)
    diverged = _print_replays(results)
    if diverged and on_divergence == "fail":
        raise DivergenceError(f"{diverged} replay(s) diverged from pass 1.")


@app.command(cls=PanelCommand)
@takes(options_of(RenderOptions, only=("rtol", "atol")))
def verify(
    tapes: List[Path] = typer.Argument(..., help="Tape files (.npz)."),
    env: Optional[str] = typer.Option(None, help=ENV_HELP),
    trust_module: Optional[List[str]] = typer.Option(None, "--trust-module", help=TRUST_HELP),
    workers: Optional[int] = typer.Option(None, rich_help_panel=SCALE,
                                          help="Verification processes (default: one per CPU "
                                               "core, as eval's and export's)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", rich_help_panel=OUTPUT,
                               help="No progress bar."),
    **config: Any,
) -> None:
    """Re-simulate tapes (no rendering) and check they earn exactly what pass 1 earned."""
    tolerances = RenderOptions(**config_values(RenderOptions, config))  # checks itself
    workers = check_workers(workers)
    requests = [RenderRequest(str(t), (), rtol=tolerances.rtol, atol=tolerances.atol,
                              env_id=trusted_env(t, env, trust_module)) for t in tapes]
    results = _run_with_bar(requests, DEFAULT_ORDER, workers, quiet)
    if _print_replays(results):
        raise DivergenceError("Some tapes did not replay exactly; see the first divergent step above.")


def trusted_env(tape: Path, env: str | None, trusted: list[str] | None) -> str | None:
    """The env a tape replays on, as if the user named it: ``--env``, else the tape's own
    id when its module is one ``--trust-module`` names (a tape's other env modules are
    imported only if they are packages of Gymnasium envs: rolltape.envs.ids.env_package)."""
    if env is not None or not trusted:
        return env
    from rolltape.envs.ids import trusted_env_id
    from rolltape.tape import Tape

    return trusted_env_id(Tape.load(tape).env_id, trusted)


def check_workers(workers: int | None) -> int:
    """The render or verify verb's --workers checked, as a count (unset: one per core)."""
    from rolltape.executors.launch import check_worker_count, per_core

    if workers is not None:
        check_worker_count("--workers", workers)
    return per_core(workers or 0)


def _run_with_bar(requests: list[Any], backends: str | tuple[str, ...], workers: int,
                  quiet: bool) -> list[Any]:
    from rolltape.executors.launch import sigterm_raises
    from rolltape.progress import Progress
    from rolltape.rendering import check_requests
    from rolltape.rendering import render as render_tapes
    from rolltape.tape import Tape

    # Loading every tape first also reports a bad one before any work or progress bar.
    totals = [stop - first for first, stop in (Tape.load(r.tape).frame_range for r in requests)]
    check_requests(requests, backends, workers)
    finished: list[int] = []
    with Progress(not quiet) as bar:
        on_progress, on_result = bar.frames(f"replaying {len(requests)} tape(s)", totals)

        def result(i: int, r: Any) -> None:
            finished.append(i)
            on_result(i, r)

        try:
            with sigterm_raises():
                return render_tapes(requests, backends=backends, workers=workers,
                                    on_progress=on_progress, on_result=result)
        except (KeyboardInterrupt, Interrupted) as exc:
            raise Interrupted.saying(exc, f"{Interrupted.heading(exc)}: {len(finished)} of "
                                          f"{len(requests)} "
                                          "tape(s) were finished and their files kept; the "
                                          "others wrote nothing. Rerun with the other tapes "
                                          "(or --overwrite).") from None


def _print_replays(results: list[Any]) -> int:
    from rolltape.tape import Tape

    diverged = 0
    for r in results:
        if r.verified is False:
            diverged += 1
            out.print(f"[red]DIVERGED[/red] {r.tape}: first at {r.divergence.describe()}")
            if fell_back(r.mode, r.verified):
                out.print(f"  {FELL_BACK}")
        elif r.replay_return is None:  # restore: nothing re-simulated, the tape's own return
            out.print(f"[green]ok[/green] {r.tape}: {r.steps} steps, recorded return "
                      f"{Tape.load(r.tape).total_return}, drawn from recorded states")
        else:
            what = ("drawn from recorded states" if not r.verified else "verified"
                    if r.checked == "observations" else f"verified: {r.checked}"
                    if r.checked != "rewards" else "rewards and flags match (observations "
                    "not compared: the tape has no digests, or a tolerance was given)")
            out.print(f"[green]ok[/green] {r.tape}: {r.steps} steps, return "
                      f"{r.replay_return}, {what}")
        for path in r.outputs:
            out.print(f"  wrote {path} ({r.frames} frames, backend {gl_name(r.backend)}, "
                      f"{camera_text(r.cameras)})")
        if r.camera_hint:
            err.print(f"hint: {Path(r.tape).name}: {r.camera_hint}.", highlight=False,
                      soft_wrap=True)
        for backend, why in r.failures:
            err.print(f"  note: {backend} failed first: {why}")
    return diverged


@app.command("suites", cls=PanelCommand)
def suites_(
    action: Optional[str] = typer.Argument(None, help="'install': build a benchmark's own "
                                                      "environment (see the listing)."),
    name: Optional[str] = typer.Argument(None, help="With install: the benchmark (metaworld, aloha)."),
) -> None:
    """List the built-in suites, their tasks, and what each needs installed; `suites install
    metaworld` builds Meta-World's own environment, which its suites run in."""
    from rich.markup import escape

    from rolltape.suites.builtin import listing

    if action is not None:
        from rolltape.suites import benchmarks

        if action != "install" or name is None:
            raise UsageError(f"`rolltape suites {action}` is not a command; use `rolltape suites` "
                             "to list them or `rolltape suites install NAME` (NAME: "
                             f"{', '.join(benchmarks.BENCHMARKS)}).")
        bench = benchmarks.benchmark(name)
        seconds = benchmarks.install(bench, log=lambda line: out.print(line, highlight=False,
                                                                       markup=False))
        where = benchmarks.home() / bench.name
        out.print(f"{bench.name}: ready in {where}" + (f" (built in {seconds:.0f} s)"
                  if seconds else " (already built)"), highlight=False, markup=False)
        return

    table = Table(title="built-in suites (rolltape eval --suite NAME)")
    for name in ("suite", "tasks", "success from", "needs", "installed"):
        table.add_column(name)
    missing = set()
    for entry in listing():
        table.add_row(*(escape(cell) for cell in (
                      entry["suite"], ", ".join(entry["tasks"]),
                      f"info['{entry['success_key']}']" if entry["success_key"] else
                      "none (returns only)", entry["needs"],
                      "yes" if entry["installed"] else "no")))
        if entry["install"]:
            missing.add(entry["install"])
    out.print(table)
    for line in sorted(missing):
        out.print(f"the suites not installed need: {line}", highlight=False, markup=False)
    out.print("your own suites: a YAML manifest (see README, 'Benchmark suites'): "
              "rolltape eval --suite my.yaml", highlight=False)


@app.command(cls=PanelCommand)
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
    _print_comparison(result, output)


@app.command("diff", cls=PanelCommand)
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


@app.command(cls=PanelCommand)
def doctor(
    backends: str = typer.Option("egl,osmesa,glfw", help=BACKENDS_HELP),
    timeout: float = typer.Option(60.0, help="Seconds before a probe counts as hung."),
) -> None:
    """Probe each GL backend in a subprocess: which work here, why the others fail."""
    from rolltape.pass2.backends import doctor as run_doctor
    from rolltape.pass2.backends import first_working, format_doctor

    results = run_doctor(backends, timeout=timeout)
    out.print(format_doctor(results), highlight=False)
    if first_working(results, [r.backend for r in results]) is None:
        raise typer.Exit(1)


@app.command(cls=PanelCommand)
def demo(
    episodes: int = typer.Option(10, "--episodes", "-n"),
    output: Path = typer.Option(Path("runs/demo"), "--out", "-o"),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """Evaluate the bundled demo policy against a random baseline and render one verified video."""
    from rolltape.demo import demo_assets
    from rolltape.evaluation import evaluate

    assets = demo_assets()
    out.print(f"demo: {assets['env_id']} with the bundled PPO policy "
              f"({assets['timesteps']:,} training steps), {episodes} episodes vs random")
    run = evaluate(assets["env_id"], f"sb3:{assets['policy']}", vecnormalize=assets["vecnormalize"],
                   env_kwargs=assets["env_kwargs"], episodes=episodes, seed=1000,
                   baseline="random", video="best", out=output, viewer=True,
                   overwrite=True, show_progress=not quiet, command=sys.argv)
    print_run(run.results, run.path)


@app.command(cls=PanelCommand)
def bench(
    output: Path = typer.Option(Path("bench-out"), "--out", "-o", help="Folder for bench.json and bench.png."),
    quick: bool = typer.Option(False, help="Tiny sizes (seconds), for tests; numbers not meaningful."),
    only: Optional[str] = typer.Option(None, help="NAME[,NAME]: run only these benchmarks."),
    rss_frames: Optional[str] = typer.Option(
        None, metavar="SHORT,LONG",
        help="Steps of the short and long render_rss tapes (default 1000,5000; --quick 30,80)."),
) -> None:
    """Measure speed and memory targets as ratios against baselines run alongside."""
    from dataclasses import replace

    from rolltape.bench import FULL, QUICK, run_and_print

    config = QUICK if quick else FULL
    if rss_frames is not None:
        try:
            short, long = (int(n) for n in rss_frames.split(","))
        except ValueError:
            short = long = 0
        if short < 1 or long < 1:
            raise UsageError(f"--rss-frames must be two step counts SHORT,LONG such as "
                             f"1000,5000, got '{rss_frames}'.")
        config = replace(config, rss_short=short, rss_long=long)
    raise typer.Exit(run_and_print(only, quick=quick, out=output, config=config))


@app.command(cls=PanelCommand)
def report(
    run: Path = typer.Argument(..., help="Run folder written by `rolltape eval`."),
    output: Optional[Path] = typer.Option(None, "--out", "-o",
                                          help="Where to write the page (default RUN/report.html)."),
) -> None:
    """Write RUN/report.html: the run's numbers, plots, videos and provenance on one page."""
    from rolltape.outputs.report import build_report

    out.print(f"report written to {build_report(run, out=output)}", highlight=False,
              soft_wrap=True)


@app.command(cls=PanelCommand)
def view(
    run: Path = typer.Argument(..., help="Run folder written by `rolltape eval`."),
    port: int = typer.Option(0, help="Port to serve on (0: any free port)."),
    host: str = typer.Option("127.0.0.1", help="Address to serve on."),
    refresh: bool = typer.Option(False, help="Rebuild RUN/viewer even when it is up to date."),
) -> None:
    """Serve RUN's 3-D tape viewer (MuJoCo in WebAssembly) on localhost until Ctrl-C."""
    from rolltape.outputs.viewer import export_viewer, serve, viewer_is_current

    if refresh or not viewer_is_current(run):
        info = export_viewer(run, overwrite=True)
        if info["href"] is None:
            raise UsageError(info["note"])
        if info["note"]:
            err.print(f"note: {info['note']}", highlight=False, soft_wrap=True)
    server, url = serve(run, port=port, host=host)
    out.print(f"open {url}", highlight=False, soft_wrap=True)
    out.file.flush()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        out.print("stopped serving", highlight=False)
    finally:
        server.shutdown()
        server.server_close()


# `serve` and `parity` live with the env server (rolltape.server_commands).
_server_commands.register(app, lambda line: out.print(line, highlight=False, markup=False))
# `branch` lives with its orchestrator (rolltape.branch_command).
_branch_command.register(app, lambda line: out.print(line, highlight=False, markup=False))
# `export` lives with the dataset writers (rolltape.datasets.command).
_dataset_commands.register(app, lambda line: out.print(line, highlight=False, markup=False),
                           lambda line: err.print(f"rolltape: {line}", highlight=False,
                                                  markup=False, soft_wrap=True))


def main(argv: list[str] | None = None) -> int:
    """Console entry point: run the app, turning our errors into one line and an exit code.

    The one signal handling of every verb: SIGTERM raises :class:`Interrupted` (as Ctrl-C
    raises KeyboardInterrupt) wherever the verb is, so that what it started is stopped by
    the same ``finally`` blocks; the command then prints one line and exits 143 (130)."""
    from rolltape.executors.launch import sigterm_raises

    with sigterm_raises():
        return _main(sys.argv[1:] if argv is None else argv)


def _main(argv: list[str]) -> int:
    try:
        # Not standalone: typer returns an exit code (typer.Exit(n), --help) instead of
        # calling sys.exit, and raises its usage errors for us to print in one line.
        code = app(args=argv, prog_name="rolltape", standalone_mode=False)
    except (UsageError, DivergenceError) as exc:
        err.print(f"rolltape: {exc}", highlight=False, markup=False, soft_wrap=True)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except RunFailed as exc:  # what was kept and how to go on
        err.print(f"rolltape: {exc}", highlight=False, markup=False, soft_wrap=True)
        return exc.exit_code
    except Interrupted as exc:
        err.print(f"rolltape: {interrupted_line(exc, argv)}", highlight=False, markup=False,
                  soft_wrap=True)
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        err.print(f"rolltape: {interrupted_line(Interrupted(2), argv)}", highlight=False,
                  markup=False, soft_wrap=True)
        return 130
    except OSError as exc:  # a full disk, a vanished folder: not a bug to show a traceback for
        where = f" ({exc.filename})" if exc.filename else ""
        err.print(f"rolltape: {exc.strerror or exc}{where}.", highlight=False, markup=False,
                  soft_wrap=True)
        return 1
    except ClickError as exc:  # the parser's own errors: unknown option, bad value, ...
        err.print(f"rolltape: {usage_line(exc)}", highlight=False, markup=False,
                  soft_wrap=True)
        return 2
    if code == 130:  # typer answers Ctrl-C (outside eval and render) with this status
        err.print(f"rolltape: {interrupted_line(Interrupted(2), argv)}", highlight=False,
                  markup=False, soft_wrap=True)
    return code if isinstance(code, int) else 0


def interrupted_line(stopped: Interrupted, argv: list[str]) -> str:
    """The verb's own account of what it kept (eval, render), else the same line for all."""
    if stopped.explained:
        return str(stopped)
    verb = next((a for a in argv if not a.startswith("-")), "")
    if verb in _SERVING:  # runs until stopped: a stop is its ordinary end, nothing unfinished
        return (f"{Interrupted.heading(stopped)}: `rolltape {verb}` stopped serving, and so "
                "did every process it started.")
    return (f"{Interrupted.heading(stopped)}: `rolltape {verb}` stopped before it finished, "
            "and so did every process it started; rerun it to finish.")


_SERVING = ("view", "serve", "serve-policy")  # verbs that serve until they are stopped


# The base of every error typer's parser raises. typer exposes BadParameter in every
# version, whether it vendors click (0.2x, no `click` installed) or uses click itself, so
# its ClickException is found from there rather than by importing `click`.
ClickError: type[Exception] = next(c for c in typer.BadParameter.__mro__
                                   if c.__name__ == "ClickException")


def usage_line(exc: Exception) -> str:
    """One line for a parser error, naming the fix (instead of click's usage box)."""
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "rolltape"
    if type(exc).__name__ == "NoSuchOption":
        similar = getattr(exc, "possibilities", None)
        guess = f" (did you mean {' or '.join(sorted(similar))}?)" if similar else ""
        return f"no option {getattr(exc, 'option_name', '')}{guess}; try `{where} --help`."
    # A ClickException (ClickError: typer may vendor click, so not importable by name);
    # a choice list spans lines.
    message = " ".join(exc.format_message().split())  # type: ignore[attr-defined]
    if message.endswith("?"):  # click's "Did you mean 'eval'?": a question ends the sentence
        return f"{message} Try `{where} --help`."
    return f"{message.rstrip('.')}; try `{where} --help`."


if __name__ == "__main__":
    sys.exit(main())
