"""A run on disk: atomic writes, a staging folder, and provenance.

A run is built in a hidden staging folder beside its final place (``.NAME.partial``) and
moved into place when it is complete, so a reader never sees half a run, an existing run
is never replaced without ``overwrite``, and an interrupted run can be resumed.

Example:
    >>> run = RunDir("runs/cheetah", overwrite=False, resume=False)
    >>> write_json(run.path / "results.json", {"schema_version": 1})
    >>> run.commit()
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from .errors import UsageError

RESULTS_SCHEMA_VERSION = 1
_UMASK = os.umask(0)
os.umask(_UMASK)


def write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Write JSON atomically; NaN and infinity are refused (they are not JSON)."""
    text = json.dumps(obj, indent=2, allow_nan=False)
    return write_text(path, text + "\n")


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write a text file atomically: a temporary sibling, then a rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; a plain open() would honour umask
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def append_jsonl(path: str | os.PathLike[str], row: dict[str, Any]) -> None:
    """Append one row and flush, so a reader (or a resume) sees each episode as it ends."""
    with open(path, "a") as f:
        f.write(json.dumps(row, allow_nan=False) + "\n")
        f.flush()


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Rows of a JSON-lines file; a torn last line (the process died mid-write) is dropped."""
    rows = []
    if Path(path).is_file():
        for line in Path(path).read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return rows


def refuse_existing(path: str | os.PathLike[str], overwrite: bool) -> None:
    """One clear sentence when an output exists and the user did not ask to replace it."""
    if Path(path).exists() and not overwrite:
        raise UsageError(f"'{path}' already exists; pass --overwrite to replace it or choose "
                         "another --out.")


class RunDir:
    """The folder of one run, staged until :meth:`commit`."""

    def __init__(self, final: str | os.PathLike[str], *, overwrite: bool = False,
                 resume: bool = False) -> None:
        self.final = Path(final)
        self.staging = self.final.with_name(f".{self.final.name}.partial")
        self.resumed = False
        self.copied = False  # staging is a copy of a finished run (resuming it)
        if not resume:
            refuse_existing(self.final, overwrite)
        parent = self.final.parent
        # Folders we create for this run go again if it fails before anything is kept.
        self._created = next((p for p in reversed([parent, *parent.parents])
                              if not p.exists()), None)
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"Cannot create the output folder '{parent}' ({exc.strerror}); "
                             "choose a writable --out.") from None
        if not os.access(parent, os.W_OK):
            raise UsageError(f"The output folder '{parent}' is not writable; choose a writable "
                             "--out.")
        if self.staging.exists():
            if resume:
                self.resumed = True
            elif overwrite:
                shutil.rmtree(self.staging)
            else:
                raise UsageError(f"An interrupted run of '{self.final}' is in '{self.staging}'; "
                                 "pass --resume to continue it or --overwrite to start over.")
        elif resume and self.final.exists():
            # Resuming a finished run: work on it in staging, then put it back.
            shutil.copytree(self.final, self.staging)
            self.resumed = self.copied = True
        (self.staging / "tapes").mkdir(parents=True, exist_ok=True)
        (self.staging / "videos").mkdir(exist_ok=True)

    @property
    def path(self) -> Path:
        """Where files go while the run is being made."""
        return self.staging

    def commit(self) -> Path:
        """Move the finished run into place, replacing an old one only now that it is whole."""
        old = None
        if self.final.exists():
            old = self.final.with_name(f".{self.final.name}.old-{os.getpid()}")
            os.replace(self.final, old)
        os.replace(self.staging, self.final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return self.final

    def discard(self) -> None:
        """Remove the staging folder (bad input found before anything worth keeping), and
        the parent folders this run created."""
        shutil.rmtree(self.staging, ignore_errors=True)
        if self._created is not None:
            for folder in [self.final.parent, *self.final.parent.parents]:
                try:
                    folder.rmdir()  # only ever removes empty folders
                except OSError:
                    break
                if folder == self._created:
                    break

    def check_config(self, config: dict[str, Any]) -> None:
        """Record what decides the tapes; refuse to resume a run made with other choices."""
        path = self.staging / "config.json"
        if path.is_file():
            before = json.loads(path.read_text())
            changed = sorted(k for k in set(before) | set(config) if before.get(k) != config.get(k))
            if changed:
                raise UsageError(f"Cannot resume '{self.final}' with different {', '.join(changed)} "
                                 "than it was started with; pass the same options or --overwrite.")
        write_json(path, config)


def git_commit(path: str | os.PathLike[str] | None) -> dict[str, Any] | None:
    """The git commit (and whether the tree is dirty) of the folder holding ``path``, if it
    names a file or folder (a policy source such as "random" has none)."""
    import subprocess

    if not path:
        return None
    source = Path(path)
    if not source.exists() and ":" in str(path):  # "file.py:ATTR" names a file
        source = Path(str(path).rpartition(":")[0])
    if not source.exists():  # "random", "module:attr": no folder of the user's to ask
        return None
    folder = source if source.is_dir() else source.parent
    try:
        head = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip())}


def write_sidecar(artifact: str | os.PathLike[str], record: dict[str, Any]) -> Path:
    """``<artifact>.metadata.json`` beside an artifact: what made it, from what."""
    path = Path(str(artifact).rstrip("/"))
    return write_json(path.with_name(path.name + ".metadata.json"), record)


ARTIFACT_FORMATS = ("mp4", "webm", "gif", "png", "npz", "jsonl")


def artifact_paths(base: str | os.PathLike[str], formats: str | None) -> tuple[str, ...]:
    """Output paths for ``--out base`` and ``--format a,b``: the suffix of ``base`` when no
    format is given (mp4 when it has none), else one path per format (png: a folder)."""
    text = str(base)
    known = {f".{f}" for f in ARTIFACT_FORMATS if f != "png"}
    if formats is None:
        if text.endswith("/") or Path(text).suffix in known:
            return (text,)
        formats = "mp4"
    path = Path(text.rstrip("/"))
    stem = path.with_suffix("") if path.suffix in known else path
    paths = []
    for fmt in filter(None, (f.strip().lower() for f in formats.split(","))):
        if fmt not in ARTIFACT_FORMATS:
            raise UsageError(f"Unknown format '{fmt}'; use one or more of "
                             f"{', '.join(ARTIFACT_FORMATS)}, comma-separated.")
        paths.append(f"{stem}/" if fmt == "png" else f"{stem}.{fmt}")
    return tuple(paths)


def write_episode_jsonl(path: str | os.PathLike[str], tape: Any, record: dict[str, Any]) -> Path:
    """A rendered episode without pixels: a metadata line, an episode line, one line per frame."""
    import math

    lines = [{"type": "metadata", **record},
             {"type": "episode", "env_id": tape.env_id, "seed": tape.seed, "steps": tape.length,
              "return": tape.total_return, "success": tape.success, "metrics": tape.metrics}]
    total = 0.0
    for f in range(tape.length + 1):
        reward = float(tape.rewards[f - 1]) if f else None
        total = math.fsum([total, reward]) if reward is not None else total
        lines.append({"type": "frame", "index": f, "step": f, "reward": reward, "return": total,
                      "terminated": bool(tape.terminated[f - 1]) if f else False,
                      "truncated": bool(tape.truncated[f - 1]) if f else False})
    return write_text(path, "".join(json.dumps(line, allow_nan=False) + "\n" for line in lines))


def write_tape_copy(path: str | os.PathLike[str], tape: Any, record: dict[str, Any]) -> Path:
    """The tape itself, with what rendered it (config, result, provenance) in its header."""
    from dataclasses import replace

    return replace(tape, meta={**tape.meta, "render": record}).save(path)


def versions() -> dict[str, str | None]:
    """Versions of the parts that decide the numbers, read without importing them."""
    from .envs import package_version

    names = ["rolltape", "numpy", "gymnasium", "mujoco", "stable-baselines3", "torch", "av"]
    return {"python": platform.python_version(), **{n: package_version(n) for n in names}}


def provenance(command: list[str] | None = None) -> dict[str, Any]:
    """What ran, where: the command line, versions and platform."""
    return {
        "command": command if command is not None else list(sys.argv),
        "cwd": os.getcwd(),
        "versions": versions(),
        "platform": {
            "system": platform.system(),
            "release": platform.release(),
            "machine": platform.machine(),
            "processor": platform.processor() or None,
            "cpu_count": os.cpu_count(),
        },
        "environment": {k: os.environ.get(k) for k in ("MUJOCO_GL", "PYOPENGL_PLATFORM")},
    }
