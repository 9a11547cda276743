"""The tape: one episode, recorded in pass 1, self-contained enough to replay anywhere.

A tape holds what ``reset`` was called with, every action at full precision, what the env
returned for each step, a digest of each observation, and for MuJoCo envs the physics state
of each frame. It is one ``.npz`` file with a JSON header inside, so it can be rendered
later, elsewhere, many times.

Example:
    >>> tape = Tape.load("runs/cheetah/tapes/policy-0000.npz")
    >>> tape.length, tape.total_return
    (1000, 4391.2...)
"""

from __future__ import annotations

import json
import math
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import UsageError

SCHEMA_VERSION = 1
_REQUIRED_ARRAYS = ("actions", "rewards", "terminated", "truncated")
_OPTIONAL_ARRAYS = ("obs_digest", "qpos", "qvel", "physics")


@dataclass(frozen=True, eq=False)
class Tape:
    """One recorded episode.

    Attributes:
        env: how to rebuild the env: ``{"id", "kwargs", "max_episode_steps", "versions"}``.
        seed: the seed ``reset`` was called with.
        options: the ``options`` given to ``reset`` (or None).
        actions: (T, ...) array exactly as passed to ``env.step`` (ints for Discrete).
        rewards: (T,) float64, exactly as the env returned them.
        terminated, truncated: (T,) bool flags as the env returned them.
        obs_digest: (T+1,) uint64 digests of the reset observation and each step's, or None.
        qpos, qvel: (T+1, nq) and (T+1, nv) MuJoCo state per frame, or None.
        physics: (T+1, n) MuJoCo state per frame (:func:`rolltape.envs.physics_spec`), from
            which stepping continues bit for bit; lets one episode render in segments.
        success: ``info["is_success"]`` at the last step, None when the env does not say.
        metrics: ``info["metrics"]`` at the last step (JSON-safe), or None.
        policy: what produced the actions: kind, source, sha256, deterministic.
        wall_s: wall-clock seconds the episode took in pass 1.
        meta: free-form extras (run role, episode index, ...).
    """

    env: dict[str, Any]
    seed: int | None
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    options: dict[str, Any] | None = None
    obs_digest: np.ndarray | None = None
    qpos: np.ndarray | None = None
    qvel: np.ndarray | None = None
    physics: np.ndarray | None = None
    success: bool | None = None
    metrics: dict[str, Any] | None = None
    policy: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_shapes(self, where="tape")

    # -- derived numbers -------------------------------------------------------------
    @property
    def length(self) -> int:
        """Number of steps (frames of a render are ``length + 1``)."""
        return int(self.rewards.shape[0])

    @property
    def total_return(self) -> float:
        """Sum of rewards, correctly rounded (math.fsum) so it does not depend on order."""
        return math.fsum(self.rewards.tolist())

    @property
    def has_state(self) -> bool:
        """True when the tape holds MuJoCo physics states (``restore`` mode can draw it)."""
        return self.qpos is not None and self.qvel is not None

    @property
    def env_id(self) -> str:
        return str(self.env["id"])

    # -- file format -----------------------------------------------------------------
    def header(self) -> dict[str, Any]:
        """The JSON header stored inside the ``.npz``."""
        return {
            "schema_version": SCHEMA_VERSION,
            "env": self.env,
            "seed": self.seed,
            "options": self.options,
            "success": self.success,
            "metrics": self.metrics,
            "policy": self.policy,
            "wall_s": self.wall_s,
            "meta": self.meta,
            "length": self.length,
            "return": self.total_return,
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the tape atomically (temporary file, then rename) and return its path."""
        path = Path(path)
        if path.suffix != ".npz":
            raise UsageError(f"A tape file must end in .npz, got '{path}'; rename it.")
        arrays = {name: getattr(self, name) for name in _REQUIRED_ARRAYS}
        for name in _OPTIONAL_ARRAYS:
            if getattr(self, name) is not None:
                arrays[name] = getattr(self, name)
        header = json.dumps(self.header(), allow_nan=False).encode()
        arrays["header"] = np.frombuffer(header, dtype=np.uint8)
        tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
        try:
            with open(tmp, "wb") as f:
                np.savez_compressed(f, **arrays)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Tape:
        """Read and validate a tape; any problem is one clear :class:`UsageError`."""
        path = Path(path)
        if not path.is_file():
            raise UsageError(f"Tape '{path}' does not exist; give the path of a .npz tape.")
        try:
            with np.load(path, allow_pickle=False) as data:
                contents = {name: data[name] for name in data.files}
        except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as exc:
            raise UsageError(
                f"Tape '{path}' is corrupt or truncated ({type(exc).__name__}); "
                "re-record it with `rolltape eval`."
            ) from None
        if "header" not in contents:
            raise UsageError(f"'{path}' is an .npz file but not a rolltape tape (no header).")
        try:
            header = json.loads(contents.pop("header").tobytes().decode())
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise UsageError(f"Tape '{path}' has a corrupt header; re-record it.") from None
        version = header.get("schema_version")
        if version != SCHEMA_VERSION:
            raise UsageError(
                f"Tape '{path}' has schema version {version!r} but this rolltape reads "
                f"version {SCHEMA_VERSION}; use the rolltape release that wrote it."
            )
        missing = [name for name in _REQUIRED_ARRAYS if name not in contents]
        if missing:
            raise UsageError(f"Tape '{path}' lacks the arrays {missing}; re-record it.")
        try:
            return cls(
                env=header["env"],
                seed=header["seed"],
                options=header.get("options"),
                success=header.get("success"),
                metrics=header.get("metrics"),
                policy=header.get("policy", {}),
                wall_s=float(header.get("wall_s", 0.0)),
                meta=header.get("meta", {}),
                **{name: contents[name] for name in _REQUIRED_ARRAYS},
                **{name: contents.get(name) for name in _OPTIONAL_ARRAYS},
            )
        except UsageError as exc:
            raise UsageError(f"Tape '{path}': {exc}") from None
        except KeyError as exc:
            raise UsageError(f"Tape '{path}' header lacks {exc}; re-record it.") from None


def _check_shapes(tape: Tape, where: str) -> None:
    """Refuse arrays that disagree in length or type: a replay of them would be wrong."""
    n = tape.rewards.shape[0] if tape.rewards.ndim == 1 else -1
    if n < 0:
        raise UsageError(f"{where} rewards must be one value per step.")
    if tape.rewards.dtype != np.float64:
        raise UsageError(f"{where} rewards must be float64, got {tape.rewards.dtype}.")
    for name in ("terminated", "truncated"):
        arr = getattr(tape, name)
        if arr.dtype != np.bool_ or arr.shape != (n,):
            raise UsageError(f"{where} {name} must be {n} booleans, got {arr.dtype}{arr.shape}.")
    if tape.actions.shape[:1] != (n,):
        raise UsageError(
            f"{where} has {tape.actions.shape[0]} actions but {n} rewards; "
            "the arrays must agree in length."
        )
    if tape.obs_digest is not None and tape.obs_digest.shape != (n + 1,):
        raise UsageError(
            f"{where} obs_digest has {tape.obs_digest.shape[0]} rows, expected {n + 1}."
        )
    for name in ("qpos", "qvel", "physics"):
        arr = getattr(tape, name)
        if arr is not None and (arr.ndim != 2 or arr.shape[0] != n + 1):
            raise UsageError(f"{where} {name} must have {n + 1} rows, got shape {arr.shape}.")
    if n and (tape.terminated[:-1].any() or tape.truncated[:-1].any()):
        raise UsageError(f"{where} ends before its last step; only the last step may be done.")
