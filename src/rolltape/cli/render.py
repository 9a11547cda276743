"""The ``render`` and ``verify`` verbs: replay tapes in isolated render processes.

Each builds a :class:`rolltape.rendering.RenderJob` from its flags, calls
:func:`rolltape.rendering.replay_tapes` and prints a line per tape.

May import: typer, cli.options, cli.show, the render side's records; the replaying itself
lazily (``--help`` stays fast). Never: torch, GL, policy code.
"""

from __future__ import annotations

from typing import Any

from rolltape.cli.options import config_values, options_of, takes
from rolltape.cli.show import replays, say
from rolltape.compare.flips import FlipOptions
from rolltape.errors import DivergenceError
from rolltape.groups import RunFolder
from rolltape.pass2.request import BatchOptions, RenderRequest, ReplayVerb

VERIFY = ("tapes", "env", "trust_module", "workers", "quiet", "rtol", "atol")


@takes(options_of(ReplayVerb), options_of(RunFolder), options_of(RenderRequest, only=("fps",)),
       options_of(BatchOptions))
def render(**given: Any) -> None:
    """Replay tapes in isolated render processes, verify them and write videos.

    --out: one tape's output file, or a folder for several (or PNG frames: end it with /);
    by default each video goes to its run's videos/ folder, else beside its tape.
    --renderer mjwarp: all tapes at once on MuJoCo Warp (GPU or CPU), from recorded states."""
    from rolltape.rendering import RenderJob, replay_batch, replay_tapes

    job = RenderJob(fps=given.get("fps"), **config_values(ReplayVerb, given),
                    **config_values(RunFolder, given), **config_values(BatchOptions, given))
    if job.batch:
        done = replay_batch(job)
        replays(list(done.results))
        say(done.summary())
        return
    diverged = replays(replay_tapes(job))
    if diverged and job.on_divergence == "fail":
        raise DivergenceError(f"{diverged} replay(s) diverged from pass 1.")


@takes(options_of(ReplayVerb, only=VERIFY), options_of(RunFolder, only=(*VERIFY, "out")),
       options_of(FlipOptions))
def verify(**given: Any) -> None:
    """Re-simulate tapes (no rendering) and check they earn exactly what pass 1 earned.

    --flips: MuJoCo Warp tapes (folders of them too) replayed on CPU MuJoCo, one line per
    episode (state divergence, outcome flips) and flips.json (--out: a .json file or a
    folder); flips are findings, so it exits 0."""
    from rolltape.rendering import RenderJob, replay_tapes

    if given.get("flips"):
        from rolltape.compare.flips import verify_flips

        report, path = verify_flips(config_values(ReplayVerb, given)["tapes"],
                                    FlipOptions(**config_values(FlipOptions, given)),
                                    given.get("out"))
        for row in report.rows:
            say(row.line())
        say(f"{report.summary()} Report: {path}")
        return

    job = RenderJob(draw=False, **config_values(ReplayVerb, given),
                    **config_values(RunFolder, given))
    if replays(replay_tapes(job)):
        raise DivergenceError("Some tapes did not replay exactly; see the first divergent step above.")


VERBS = {"render": render, "verify": verify}
