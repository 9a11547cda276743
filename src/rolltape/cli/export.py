"""The ``export`` verb, registered on the CLI's app by :func:`register`.

May import: typer, errors, cli_options (its help layout), and (lazily, inside the verb) the
export package. Never at module level: minari, pyarrow, gymnasium, mujoco, torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from rolltape.cli.show import say, warn
from rolltape.pass2.backends import DEFAULT_ORDER


def export(
    run: Path = typer.Argument(..., help="A run folder (what `rolltape eval` wrote)."),
    to: str = typer.Option(..., "--to", help="minari or lerobot."),
    dataset_id: Optional[str] = typer.Option(
        None, "--id", help="Minari: NAMESPACE/NAME-vN (needed). LeRobot: the repo id "
                           "(default rolltape/<folder name>)."),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", help="Minari: the datasets folder (default "
                                  "MINARI_DATASETS_PATH). LeRobot: the dataset folder."),
    role: str = typer.Option("policy", help="Whose episodes: policy or baseline."),
    only: Optional[str] = typer.Option(None, help="success: only episodes that succeeded."),
    min_return: Optional[float] = typer.Option(None, help="Only episodes with at least "
                                               "this return."),
    episodes: Optional[str] = typer.Option(None, help="Only these episode indices: 0,3,7."),
    camera: Optional[List[str]] = typer.Option(
        None, "--camera", help="LeRobot: a camera to store as a video (default, free, a "
                               "model camera or track:BODY); repeatable."),
    fps: Optional[float] = typer.Option(None, help="Video frame rate (the env's by "
                                        "default)."),
    width: Optional[int] = typer.Option(None), height: Optional[int] = typer.Option(None),
    workers: int = typer.Option(0, help="Render processes replaying the tapes (0: one "
                                "per CPU core)."),
    backends: str = typer.Option(",".join(DEFAULT_ORDER), help="GL backends to try."),
    overwrite: bool = typer.Option(False, help="Replace an existing dataset."),
    mode: str = typer.Option("resim", help="resim: observations and frames from a "
                             "verified re-simulation; restore (MuJoCo): from the states "
                             "the tapes recorded, each observation checked against pass "
                             "1's digest."),
    trust_module: Optional[List[str]] = typer.Option(
        None, "--trust-module", help="A module (top-level name) whose envs the tapes may "
                                     "name, imported to replay them; repeatable."),
    env: Optional[str] = typer.Option(
        None, "--env", help="The env to replay the tapes on, named by you: their own "
                            "FILE.py:ATTR or module:EnvId (a tape may not name code)."),
) -> None:
    """Replay a run's tapes (verified step by step) and write them as a dataset."""
    from rolltape.datasets import export as run_export

    outcome = run_export(run, to=to, out=out, dataset_id=dataset_id, role=role, only=only,
                         min_return=min_return, episodes=episodes,
                         cameras=tuple(camera or ()), fps=fps, width=width, height=height,
                         workers=workers, overwrite=overwrite, backends=backends,
                         mode=mode, trust_module=tuple(trust_module or ()), env=env,
                         show_progress=True)
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


VERBS = {"export": export}
