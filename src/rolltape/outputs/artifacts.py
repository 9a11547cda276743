"""A run on disk: atomic writes, a staging folder, and provenance.

A run is built in a hidden staging folder beside its final place (``.NAME.partial``) and
moved into place when it is complete, so a reader never sees half a run, an existing run
is never replaced without ``overwrite``, and an interrupted run can be resumed.

May import: tape, envs, stats, files, errors, outputs, pass2.formats (the table of formats).
Never: policies, pass 1, executors.

Example (not run: it makes a run folder):
    >>> run = RunDir("runs/cheetah", overwrite=False, resume=False)
    >>> write_json(run.path / "results.json", {"schema_version": 1})
    >>> run.commit()
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rolltape.errors import UsageError
from rolltape.files import move_into_place, write_json, write_text  # noqa: F401  (re-exported)
from rolltape.interpreter import GL_VARIABLES
from rolltape.pass2.formats import TABLE, file_suffixes, names

if TYPE_CHECKING:
    from rolltape.tape import Tape


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


def lock_folder(staging: Path, final: Path, flag: str = "--out") -> int:
    """Lock ``staging`` (``flock`` on the folder itself) for as long as the returned
    descriptor is open (the process ending closes it), or refuse: another rolltape process
    is writing ``final`` through it. Used by runs (:class:`RunDir`) and exports."""
    import fcntl

    fd = os.open(staging, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UsageError(f"Another rolltape process is writing to '{final}' right now "
                         "(its staging folder is locked); wait for it to finish or choose "
                         f"another {flag}.") from None
    return fd


class RunDir:
    """The folder of one run, staged until :meth:`commit`.

    The staging folder is locked (``flock`` on the folder itself) for as long as this
    object is open, so that a second eval, resume or ``--overwrite`` on the same ``--out``
    is refused instead of writing into a live run; the lock goes with the process, so a
    killed run leaves a staging folder that can be resumed. ``status.json`` in staging
    says whether a stopped run was interrupted or failed, for the next command to tell.
    """

    def __init__(self, final: str | os.PathLike[str], *, overwrite: bool = False,
                 resume: bool = False) -> None:
        self.final = Path(final)
        self.staging = self.final.with_name(f".{self.final.name}.partial")
        self.resumed = False
        self.copied = False  # staging is a copy of a finished run (resuming it)
        self._lock: int | None = None
        if overwrite and resume:
            raise UsageError("--overwrite and --resume contradict each other: --resume "
                             "continues the run in --out, --overwrite starts it again; pass one.")
        if resume and self.final.exists() and not self.final.is_dir():
            raise UsageError(f"--out '{self.final}' is a file, not a run to resume; give the "
                             "run's folder.")
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
            self._take_lock()
            if resume:
                self.resumed = True
            elif overwrite:
                _clear(self.staging)
            else:
                self.release()
                raise UsageError(f"{self.stopped_run_text()} is kept in '{self.staging}'; "
                                 "pass --resume to continue it or --overwrite to discard it.")
        else:
            try:
                self.staging.mkdir()
            except FileExistsError:  # another run made it a moment ago
                pass
            self._take_lock()
            if resume and self.final.exists():
                # Resuming a finished run: work on a copy in staging, then put it back. A copy
                # that fails (a full disk) leaves the finished run as it was and no staging.
                try:
                    shutil.copytree(self.final, self.staging, dirs_exist_ok=True)
                except OSError as exc:
                    self.discard()
                    raise UsageError(f"Cannot copy '{self.final}' to resume it ({_why(exc)}); "
                                     "it is untouched. Free some space and try again.") from None
                self.resumed = self.copied = True
        (self.staging / "status.json").unlink(missing_ok=True)
        remove_temporaries(self.staging)
        (self.staging / "tapes").mkdir(parents=True, exist_ok=True)
        (self.staging / "videos").mkdir(exist_ok=True)

    def _take_lock(self) -> None:
        self._lock = lock_folder(self.staging, self.final)

    def release(self) -> None:
        """Let go of the lock (the process ending does the same). Safe to call twice."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    @property
    def path(self) -> Path:
        """Where files go while the run is being made."""
        return self.staging

    def stopped_run_text(self) -> str:
        """'An interrupted run of X' or 'A failed run of X (why)', from status.json."""
        try:
            status = json.loads((self.staging / "status.json").read_text())
            state, reason = str(status["state"]), str(status.get("reason") or "")
        except (OSError, ValueError, KeyError, TypeError):
            state, reason = "interrupted", ""
        if state == "failed":
            return f"A failed run of '{self.final}'" + (f" ({reason.rstrip('.')})" if reason else "")
        return f"An interrupted run of '{self.final}'"

    def mark_stopped(self, state: str, reason: str = "", detail: str = "") -> None:
        """Say in staging why the run stopped ('interrupted' or 'failed'), with the
        traceback of a failure when there is one (for a bug report). The temporary files of
        writers that were killed go now (the workers are stopped by then), not at --resume."""
        remove_temporaries(self.staging)
        try:
            write_json(self.staging / "status.json",
                       {"state": state, "reason": reason, "traceback": detail or None})
        except OSError:
            pass  # a full disk: the next command then calls it interrupted

    def commit(self) -> Path:
        """Move the finished run into place, replacing an old one only now that it is whole."""
        remove_temporaries(self.staging)
        move_into_place(self.staging, self.final)
        self.release()
        return self.final

    def discard(self) -> None:
        """Remove the staging folder (bad input found before anything worth keeping), and
        the parent folders this run created."""
        shutil.rmtree(self.staging, ignore_errors=True)
        self.release()
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
                what = "; ".join(_difference(k, before.get(k), config.get(k)) for k in changed)
                raise UsageError(f"Cannot resume '{self.final}': {what}. Pass what it was "
                                 "started with, or --overwrite to start over.")
        write_json(path, config)


def _clear(folder: Path) -> None:
    """Empty a folder but keep it (it is the one we hold the lock on)."""
    for child in folder.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def _difference(name: str, before: Any, now: Any) -> str:
    """'suite task mazes/umaze: kwargs.continuing_task was true, now false': the first place
    two recorded values differ, named (a suite's task by its suite/name), not two blobs."""
    if isinstance(before, dict) and isinstance(now, dict):
        for key in sorted(set(before) | set(now), key=str):
            if before.get(key) != now.get(key):
                return _difference(f"{name}.{key}", before.get(key), now.get(key))
    if isinstance(before, list) and isinstance(now, list):
        for i, (a, b) in enumerate(zip(before, now)):
            if a != b:
                if isinstance(a, dict) and isinstance(b, dict) and "name" in a and \
                        (a.get("suite"), a.get("name")) == (b.get("suite"), b.get("name")):
                    return _difference(f"task {a.get('suite')}/{a.get('name')}:", a, b) \
                        .replace(":.", ": ", 1)
                return _difference(f"{name}[{i}]", a, b)
        if len(before) != len(now):
            return f"{name} had {len(before)} entries, now {len(now)}"
    return f"{name} was {_short(before)}, now {_short(now)}"


def _short(value: Any) -> str:
    if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value):
        return value[:12] + "..."  # a sha256: its start tells two files apart
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


# What killed writers leave behind: NAME.partial-PID[-N], NAME.old-PID, .NAME.segmentK-PID
# (tapes, encoders, segment renders) and write_text's .NAME.<random>.partial.
_TEMPORARY = re.compile(r"\.(partial|old|segment\d+)-\d+|^\..*\.partial$")


def remove_temporaries(folder: Path) -> None:
    """Delete the temporary files and folders of writers that were killed, so that a
    committed run holds finished files only."""
    for path in sorted(folder.rglob("*"), reverse=True):  # children before their folders
        if _TEMPORARY.search(path.name):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


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




def _path_for(stem: Path, fmt: str) -> str:
    suffix = TABLE[fmt].suffix
    return f"{stem}{suffix}" if suffix else f"{stem}/"  # no suffix: a folder (PNG frames)


def artifact_paths(base: str | os.PathLike[str], formats: str | None) -> tuple[str, ...]:
    """Output paths for ``--out base`` and ``--format a,b``: the suffix of ``base`` when no
    format is given (mp4 when it has none), else one path per format (png: a folder)."""
    text = str(base)
    known = file_suffixes()
    if formats is None:
        if text.endswith("/") or Path(text).suffix in known:
            return (text,)
        formats = "mp4"
    path = Path(text.rstrip("/"))
    stem = path.with_suffix("") if path.suffix in known else path
    paths = []
    for fmt in filter(None, (f.strip().lower() for f in formats.split(","))):
        if fmt not in TABLE:
            raise UsageError(f"Unknown format '{fmt}' (--format); use one or more of "
                             f"{names()}, comma-separated.")
        paths.append(_path_for(stem, fmt))
    if not paths:
        raise UsageError(f"--format '{formats}' names no format; give one or more of "
                         f"{names()}, comma-separated.")
    return tuple(paths)


def check_output_name(out: str, several: bool) -> None:
    """Refuse a user's ``--out`` that would be silently renamed or misread: a suffix rolltape
    does not write (``x.avi`` would become ``x.avi.mp4``), or one file for several tapes."""
    known = file_suffixes()
    suffix = Path(out.rstrip("/")).suffix
    if not out.strip() or out.rstrip("/") in (".", ""):
        raise UsageError(f"--out '{out}' names no file or folder; give a path such as "
                         "videos/ep.mp4 or videos/.")
    if several and not out.endswith("/") and suffix in known:
        raise UsageError(f"--out '{out}' is one file but several tapes were given; name a "
                         f"folder with a trailing slash (--out {out[:-len(suffix)]}/) to get one "
                         "file per tape.")
    if not several and not out.endswith("/") and suffix and suffix not in known:
        raise UsageError(f"--out '{out}': rolltape does not write {suffix} files; end it in "
                         f"{', '.join(known)}, or with / for a folder of PNG frames.")


def check_writable_folder(out: str | os.PathLike[str], flag: str = "--out") -> None:
    """Refuse, before any work, an output folder that cannot be made: the current folder or
    one above it (a run replaces its folder), the root, a file in the way, or no permission.
    Permission is tried for real (a temporary folder, removed at once): as root
    ``os.access`` says yes even on read-only or virtual file systems."""
    text = str(out)
    path = Path(os.path.abspath(Path(text).expanduser()))  # '..' resolved, links kept
    if not text.strip() or path == Path(path.anchor) or path in (Path.cwd(), *Path.cwd().parents):
        raise UsageError(f"{flag} '{text}' is not a folder a run can own (it would replace "
                         f"the folder it is in); give a new folder such as {flag} runs/NAME.")
    existing = next(p for p in path.parents if p.exists())
    if not existing.is_dir():
        raise UsageError(f"{flag} '{text}': '{existing}' is a file, not a folder; choose "
                         f"another {flag}.")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".rolltape-probe-", dir=existing))
    except OSError as exc:
        raise UsageError(f"{flag} '{text}' cannot be written: '{existing}' refuses new files "
                         f"({exc.strerror}); choose a writable {flag}.") from None


def write_episode_jsonl(path: str | os.PathLike[str], tape: Tape, record: dict[str, Any]) -> Path:
    """A rendered episode without pixels: a metadata line, an episode line, one line per frame."""
    import math

    lines = [{"type": "metadata", **record},
             {"type": "episode", "env_id": tape.env_id, "seed": tape.seed, "steps": tape.length,
              "return": tape.total_return, "success_at_end": tape.success_at_end,
              "success_once": tape.success_once, "metrics": tape.metrics}]
    total = 0.0
    for f in range(tape.length + 1):
        reward = float(tape.rewards[f - 1]) if f else None
        total = math.fsum([total, reward]) if reward is not None else total
        lines.append({"type": "frame", "index": f, "step": f, "reward": reward, "return": total,
                      "terminated": bool(tape.terminated[f - 1]) if f else False,
                      "truncated": bool(tape.truncated[f - 1]) if f else False})
    return write_text(path, "".join(json.dumps(line, allow_nan=False) + "\n" for line in lines))


def write_tape_copy(path: str | os.PathLike[str], tape: Tape, record: dict[str, Any]) -> Path:
    """The tape itself, with what rendered it (config, result, provenance) in its header."""
    from dataclasses import replace

    return replace(tape, meta={**tape.meta, "render": record}).save(path)


def versions() -> dict[str, str | None]:
    """Versions of the parts that decide the numbers, read without importing them."""
    from rolltape.envs.ids import package_version

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
        "environment": {k: os.environ.get(k) for k in GL_VARIABLES},
    }
