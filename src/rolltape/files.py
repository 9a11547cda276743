"""Files, written so that a reader never sees half of one, and their digests.

Every file rolltape writes goes through :func:`atomic_file`, and every folder swapped into
place whole (PNG frames, the 3-D viewer) through :func:`atomic_folder`: a temporary sibling
(``.NAME.<random>.partial``, which a killed writer may leave and
:func:`rolltape.outputs.artifacts.remove_temporaries` sweeps), then a rename. (A run folder
is staged as ``.NAME.partial``, a name --resume finds again: :class:`rolltape.outputs.
artifacts.RunDir`; a video writer's temporary names its process, so that a live writer's is
told from a dead one's: :mod:`rolltape.pass2.encode`.)

May import: the standard library only (every side of the package uses it).

>>> import tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> write_json(folder / "a.json", {"x": 1}).read_text()
'{\\n  "x": 1\\n}\\n'
>>> len(sha256_of(folder / "a.json"))
64
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator

_UMASK = os.umask(0)
os.umask(_UMASK)


@contextmanager
def atomic_file(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO[Any]]:
    """Open a temporary sibling of ``path`` for writing; rename it onto ``path`` when the
    block ends, or remove it if the block raises (a full disk, Ctrl-C)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; a plain open() would honour umask
        with os.fdopen(fd, mode) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` at ``path`` atomically."""
    with atomic_file(path) as f:
        f.write(data)
    return Path(path)


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write a text file atomically."""
    with atomic_file(path, "w") as f:
        f.write(text)
    return Path(path)


def write_texts(files: dict[Path, str]) -> None:
    """Write several text files atomically, all or none: on an OSError (a full disk) those
    already written are removed again before it is raised (a page without its data, or the
    other way round, would be half a result)."""
    written: list[Path] = []
    try:
        for path, text in files.items():
            written.append(write_text(path, text))
    except OSError:
        for path in written:
            path.unlink(missing_ok=True)
        raise


def write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Write JSON atomically; NaN and infinity are refused (they are not JSON)."""
    return write_text(path, json.dumps(obj, indent=2, allow_nan=False) + "\n")


@contextmanager
def atomic_folder(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Fill a temporary sibling folder (yielded), then put it at ``path`` in one rename,
    replacing what was there; on an exception the temporary is removed and ``path`` is
    left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent))
    try:
        yield tmp
        move_into_place(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def move_into_place(built: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """Rename the finished folder ``built`` to ``path``; what was there (a folder is first
    renamed aside as ``.NAME.PID.old.partial``, then removed) is replaced."""
    path = Path(path)
    old = None
    if os.path.lexists(path):
        if path.is_dir() and not path.is_symlink():
            old = path.with_name(f".{path.name}.{os.getpid()}.old.partial")
            os.rename(path, old)
        else:
            os.remove(path)
    os.rename(built, path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_folder(path: str | os.PathLike[str], files: dict[str, bytes]) -> Path:
    """Put a folder of files (e.g. PNG frames) at ``path`` atomically, replacing an old one.

    >>> folder = Path(tempfile.mkdtemp()) / "frames"
    >>> sorted(p.name for p in write_folder(folder, {"0.png": b"x", "../1.png": b"y"}).iterdir())
    ['0.png', '1.png']
    """
    with atomic_folder(path) as tmp:
        for name, data in files.items():
            (tmp / Path(name).name).write_bytes(data)  # a bare name: never a path elsewhere
    return Path(path)


def unmap_paths(text: str, paths: dict[str, str]) -> str:
    """Name the caller's paths, not a task's temporary ones, in a message.

    >>> unmap_paths("cannot read /tmp/t1/a.npz", {"/tmp/t1/a.npz": "runs/x/a.npz"})
    'cannot read runs/x/a.npz'
    """
    for local, original in paths.items():
        text = text.replace(local, original)
    return text


def sha256_of(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file, for provenance."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
