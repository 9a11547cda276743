"""Which episodes flip between backends: MuJoCo Warp tapes replayed on CPU MuJoCo (issue 41,
``rolltape verify TAPES --flips``).

MJWarp computes in float32 and its solver rounds otherwise, so its tapes cannot verify
exactly on CPU MuJoCo; what a user needs is, episode by episode, how far apart the two
simulators drift and whether that changes the outcome. :func:`flip_report` replays each tape
on the CPU env the tape names (Gymnasium's, its time limit included) from the tape's own
initial state (its ``qpos[0]``/``qvel[0]``, after ``reset(seed)`` so the rest of the env is
as pass 1 left it) with the tape's actions (no policy runs), and writes one
:class:`EpisodeFlip` per tape:

- the largest state divergence (max abs over qpos and qvel, every frame both have), and
  the first step whose state differs by more than ``state_tol``;
- each backend's return and their difference;
- the outcome on each: how it ended (terminated, truncated, or still running where the tape
  stopped) and after how many steps, and success where the env reports it. An episode
  *flips* when its ending, its length or its success differs, or its return differs by more
  than ``return_tol`` (relative to the MJWarp return, or 1 if that is smaller).

A flip is a finding, not an error: the verb exits 0. A tape that MJWarp did not make is
refused in one sentence (exact verification is plain ``rolltape verify``). Tapes are data:
one naming env code that is not an installed package of Gymnasium envs is refused before
anything is imported.

May import: errors, files, flags, tape, envs, numpy; gymnasium and mujoco through envs.
Never: policies, pass 1, pass 2, executors, outputs.

>>> row = EpisodeFlip(tape="w0.npz", env_id="Ant-v5", seed=0, steps=20, cpu_steps=12,
...                   end="truncated", cpu_end="terminated", max_divergence=0.4,
...                   first_past=3, tape_return=9.5, cpu_return=5.0, success=None,
...                   cpu_success=None, flipped=("ending", "length", "return"))
>>> row.flips, row.return_difference
(True, -4.5)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rolltape.errors import UsageError
from rolltape.files import write_json
from rolltape.flags import VIDEO, above, check_flags, flag
from rolltape.tape import MJWARP, Tape

REPORT = "flips.json"


@dataclass(frozen=True, kw_only=True)
class FlipOptions:
    """``verify``'s flip report: whether to make it instead of exact verification, and the
    tolerances it states."""

    flips: bool = flag(False, "Replay MuJoCo Warp tapes on CPU MuJoCo and report each "
                       "episode's state divergence and outcome flips (writes flips.json "
                       "beside the tapes, or to --out), instead of exact verification.",
                       panel=VIDEO)
    state_tol: float = flag(1e-3, "--flips: a step whose qpos/qvel differ by more than this "
                            "(max abs) has diverged.", panel=VIDEO, rule=above(0))
    return_tol: float = flag(0.01, "--flips: returns that differ by more than this fraction "
                             "(of at least 1) are a flipped outcome.", panel=VIDEO,
                             rule=above(0))

    def __post_init__(self) -> None:
        check_flags(self)


@dataclass(frozen=True)
class EpisodeFlip:
    """One tape's row of the flip report (``end``/``steps``/``tape_return``/``success``: as
    MJWarp recorded it; ``cpu_*``: as CPU MuJoCo replayed it). ``end`` is "terminated",
    "truncated" or "running" (the tape's actions ran out first); ``first_past`` is the first
    step (1-based; 0 is the initial state) whose state passed the tolerance, or None;
    ``flipped`` names what differs: ending, length, success, return."""

    tape: str
    env_id: str
    seed: int | None
    steps: int
    cpu_steps: int
    end: str
    cpu_end: str
    max_divergence: float
    first_past: int | None
    tape_return: float
    cpu_return: float
    success: bool | None
    cpu_success: bool | None
    flipped: tuple[str, ...]

    @property
    def flips(self) -> bool:
        """Whether the outcome differs between the backends."""
        return bool(self.flipped)

    @property
    def return_difference(self) -> float:
        """CPU MuJoCo's return minus MJWarp's."""
        return self.cpu_return - self.tape_return

    def line(self) -> str:
        """The row as one line of text."""
        past = "never" if self.first_past is None else f"step {self.first_past}"
        verdict = f"FLIPS ({', '.join(self.flipped)})" if self.flips else "same outcome"
        return (f"{Path(self.tape).name}: {verdict}; state off by at most "
                f"{self.max_divergence:.3g} (past tolerance: {past}); return "
                f"{self.tape_return:.4g} on mjwarp, {self.cpu_return:.4g} on mujoco; "
                f"{self.end} after {self.steps} / {self.cpu_end} after {self.cpu_steps}")


@dataclass(frozen=True)
class FlipReport:
    """Every episode's :class:`EpisodeFlip` and the tolerances they were judged by."""

    rows: tuple[EpisodeFlip, ...]
    state_tol: float
    return_tol: float

    @property
    def flipped(self) -> int:
        """How many episodes' outcomes differ."""
        return sum(row.flips for row in self.rows)

    def summary(self) -> str:
        """One line: how many of N flip, and how far the states drifted."""
        most = max((row.max_divergence for row in self.rows), default=0.0)
        past = sum(row.first_past is not None for row in self.rows)
        return (f"{self.flipped} of {len(self.rows)} episodes flip between mjwarp and "
                f"mujoco (return tolerance {self.return_tol:g}); {past} passed the state "
                f"tolerance {self.state_tol:g}; largest divergence {most:.3g}.")

    def as_json(self) -> dict[str, Any]:
        """The report as JSON-ready data (an infinite divergence, a NaN state, as null)."""
        def clean(value: Any) -> Any:
            return None if isinstance(value, float) and not math.isfinite(value) else value

        rows = [{k: clean(v) for k, v in {**asdict(row), "flips": row.flips,
                                          "return_difference": row.return_difference}.items()}
                for row in self.rows]
        return {"backend": MJWARP, "replayed_on": "mujoco", "state_tol": self.state_tol,
                "return_tol": self.return_tol, "episodes": len(self.rows),
                "flipped": self.flipped, "rows": rows}

    def write(self, path: str | Path) -> Path:
        """Writes the report as JSON (atomically: no half-written file), making its folder."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return write_json(path, self.as_json())


def tape_paths(given: Iterable[str | Path]) -> list[Path]:
    """The tape files named: files as given, folders as their ``*.npz`` (sorted)."""
    paths: list[Path] = []
    for item in map(Path, given):
        paths.extend(sorted(item.glob("*.npz")) if item.is_dir() else [item])
    if not paths:
        raise UsageError("No tapes to compare: name .npz tape files or folders holding them.")
    return paths


def mjwarp_tape(path: Path) -> Tape:
    """The tape at ``path``, refused in one sentence unless MJWarp made it and it holds the
    physics states and env the report needs."""
    tape = Tape.load(path)
    backend = (tape.meta or {}).get("backend")
    if backend != MJWARP:
        made = f"backend {backend!r}" if backend else "the default backend"
        raise UsageError(f"Tape '{path}' was made by {made}, not MuJoCo Warp; --flips compares "
                         "MJWarp tapes with CPU MuJoCo, verify this one without --flips.")
    if tape.qpos is None or tape.qvel is None:
        raise UsageError(f"Tape '{path}' has no physics states to compare; re-record it with "
                         "`rolltape eval --simulator mjwarp`.")
    from rolltape.envs.ids import check_tape_env_module

    check_tape_env_module(tape.env_id, str(path))
    return tape


def _ending(terminated: bool, truncated: bool) -> str:
    return "terminated" if terminated else "truncated" if truncated else "running"


def _success(info: dict[str, Any]) -> bool | None:
    for key in ("is_success", "success"):
        if key in info:
            return bool(info[key])
    return None


def _check_shapes(tape: Tape, nq: int, nv: int, action_shape: tuple[int, ...] | None) -> None:
    """Refuse, in one sentence, a tape whose states or actions do not fit its env (a tape is
    untrusted data: a wrong shape must not surface as the simulator's traceback)."""
    assert tape.qpos is not None and tape.qvel is not None
    fits = (tape.qpos.ndim == 2 and tape.qpos.shape[1] == nq and tape.qvel.ndim == 2
            and tape.qvel.shape[1] == nv and len(tape.qpos) == len(tape.qvel) == tape.length + 1
            and tape.actions.shape[1:] == tuple(action_shape or ()))
    if not fits:
        raise UsageError(f"Tape of {tape.env_id} (seed {tape.seed}) has states or actions "
                         f"shaped {tape.qpos.shape}, {tape.qvel.shape}, {tape.actions.shape}, "
                         f"not what {tape.env_id} takes (nq {nq}, nv {nv}, actions "
                         f"{action_shape}); re-record it.")


def replay_on_cpu(tape: Tape) -> tuple[np.ndarray, np.ndarray, list[float], str, bool | None]:
    """The tape's actions on its CPU env from its initial state: (qpos (T'+1, nq), qvel,
    rewards, ending, success at the end), stopping where the CPU episode ends."""
    from rolltape.envs.build import make_env

    env = make_env(tape.env)
    try:
        env.reset(seed=tape.seed, options=tape.options)
        base: Any = env.unwrapped
        assert tape.qpos is not None and tape.qvel is not None  # mjwarp_tape checked
        _check_shapes(tape, base.model.nq, base.model.nv, env.action_space.shape)
        base.set_state(tape.qpos[0], tape.qvel[0])  # MJWarp's start (float32-rounded)
        qpos, qvel = [base.data.qpos.copy()], [base.data.qvel.copy()]
        rewards: list[float] = []
        ended, info = "running", {}
        for action in tape.actions:
            _, reward, terminated, truncated, info = env.step(action)
            rewards.append(float(reward))
            qpos.append(base.data.qpos.copy())
            qvel.append(base.data.qvel.copy())
            ended = _ending(bool(terminated), bool(truncated))
            if ended != "running":
                break
    finally:
        env.close()
    return np.stack(qpos), np.stack(qvel), rewards, ended, _success(info)


def compare_episode(path: Path, tape: Tape, state_tol: float, return_tol: float) -> EpisodeFlip:
    """One tape's :class:`EpisodeFlip`."""
    qpos, qvel, rewards, cpu_end, cpu_success = replay_on_cpu(tape)
    assert tape.qpos is not None and tape.qvel is not None
    frames = min(len(qpos), len(tape.qpos))
    gap = np.maximum(np.abs(qpos[:frames] - tape.qpos[:frames]).max(axis=1),
                     np.abs(qvel[:frames] - tape.qvel[:frames]).max(axis=1))
    gap = np.where(np.isnan(gap), np.inf, gap)  # a NaN state is as far as it gets
    past = np.flatnonzero(gap > state_tol)
    end = _ending(bool(tape.terminated[-1]), bool(tape.truncated[-1])) if tape.length else "running"
    success = tape.success_at_end
    tape_return, cpu_return = float(np.sum(tape.rewards)), float(np.sum(rewards))
    differs = {
        "ending": end != cpu_end,
        "length": tape.length != len(rewards),
        "success": success is not None and cpu_success is not None and success != cpu_success,
        "return": not abs(cpu_return - tape_return) <= return_tol * max(abs(tape_return), 1.0),
    }
    return EpisodeFlip(
        tape=str(path), env_id=tape.env_id, seed=tape.seed, steps=tape.length,
        cpu_steps=len(rewards), end=end, cpu_end=cpu_end, max_divergence=float(gap.max()),
        first_past=int(past[0]) if len(past) else None, tape_return=tape_return,
        cpu_return=cpu_return, success=success, cpu_success=cpu_success,
        flipped=tuple(name for name, yes in differs.items() if yes))


def flip_report(tapes: Sequence[str | Path], options: FlipOptions | None = None) -> FlipReport:
    """Every tape (files, or folders of ``*.npz``) replayed on CPU MuJoCo and compared; all
    tapes are checked before the first replay, so a refusal costs nothing."""
    options = options or FlipOptions(flips=True)
    paths = tape_paths(tapes)
    loaded = [(path, mjwarp_tape(path)) for path in paths]
    rows = tuple(compare_episode(path, tape, options.state_tol, options.return_tol)
                 for path, tape in loaded)
    return FlipReport(rows, options.state_tol, options.return_tol)


def report_path(tapes: Sequence[str | Path], out: str | None) -> Path:
    """Where the report goes: ``out`` (a ``.json`` file, else a folder for flips.json), else
    beside the first tape (in the folder named, when a folder was named)."""
    if out is not None:
        target = Path(out)
        return target if target.suffix == ".json" else target / REPORT
    first = Path(tapes[0])
    return (first if first.is_dir() else first.parent) / REPORT


def verify_flips(tapes: Sequence[str | Path], options: FlipOptions,
                 out: str | None = None) -> tuple[FlipReport, Path]:
    """What ``rolltape verify --flips`` does: the :func:`flip_report` of ``tapes``, written
    to :func:`report_path` (returned with the report)."""
    report = flip_report(tapes, options)
    return report, report.write(report_path(tapes, out))
