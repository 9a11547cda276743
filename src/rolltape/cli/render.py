"""The ``render`` and ``verify`` verbs: replay tapes in isolated render processes.

May import: typer, cli.options, cli.show, the render side's request types and checks;
the replaying itself lazily (``--help`` stays fast). Never: torch, GL, policy code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional

import typer

from rolltape.cli.options import config_values, options_of, takes
from rolltape.cli.show import replays
from rolltape.errors import DivergenceError, Interrupted, check_choice
from rolltape.flags import OUTPUT, SCALE, VIDEO
from rolltape.pass2 import formats
from rolltape.pass2.backends import BACKENDS_HELP, DEFAULT_ORDER
from rolltape.pass2.request import RenderOptions, RenderRequest

TRUST_HELP = ("MODULE: replay tapes whose env id names this module (MODULE:EnvId) as if "
              "given with --env; repeatable. Packages of Gymnasium envs need no flag.")
ENV_HELP = ("Replay on this env (id, MODULE:EnvId or FILE.py:CLASS) instead of the tape's; a "
            "tape of your own env needs it: tapes never import code.")


def default_video_path(tape: Path) -> Path:
    """Beside the run's tapes/ folder in videos/, else beside the tape (no suffix yet)."""
    folder = tape.parent.parent / "videos" if tape.parent.name == "tapes" else tape.parent
    return folder / tape.stem


#: and export's --workers default to (check_workers); a count given must be 1 or more.
RENDER_WORKERS = ("Render processes (default: one per CPU core, as eval's and export's; a long "
                  "video is split across them).")


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
    diverged = replays(results)
    if diverged and on_divergence == "fail":
        raise DivergenceError(f"{diverged} replay(s) diverged from pass 1.")


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
    if replays(results):
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


VERBS = {"render": render, "verify": verify}
