"""The table of output formats: every format rolltape writes, one row each.

A row says how a path names the format, who writes it (a writer of drawn frames in the
render worker, or, for a format without pixels, the orchestrator from the tape), how the
parts of one episode drawn by several workers are joined, and how a page shows it. The
CLI's help, ``--format``'s checks and sentences, segment joins, the sidecars' data files
and the report all read it; a new format is a row here plus its writer.

The table is plain data (writers are named, imported on use), so the CLI can list the
formats without importing PyAV and Pillow.

May import: the standard library. Never: anything heavy (it is read at CLI start).

Example:
    >>> names()
    'mp4, webm, gif, png, npz, jsonl'
    >>> TABLE["gif"].join, TABLE["npz"].pixels, by_suffix("ep.MP4").name
    ('frames', False, 'mp4')
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for annotations only: nothing heavy is imported at run time
    from rolltape.tape import Tape

__all__ = ["TABLE", "Format", "by_suffix", "data_suffixes", "file_suffixes", "names",
           "pixel_formats", "suffix_list"]


@dataclass(frozen=True)
class Format:
    """One output format.

    ``suffix`` names it in a path (``""``: a folder, of PNG frames). ``writer`` opens a
    streaming writer of drawn frames, ``writer(path, fps, overwrite=...)``; a format
    without one has no pixels and ``tape_writer`` writes it from the tape,
    ``tape_writer(path, tape, record)``; both are ``"module:function"``. ``join`` says how
    parts of one episode drawn by several workers are put together: ``"packets"``
    (compressed packets copied, no re-encoding), ``"frames"`` (frames read back from a
    lossless folder and written again) or ``"whole"`` (written once, from the whole tape).
    ``shown_as`` is how a page shows it: ``"video"``, ``"img"``, ``"frames"`` (a folder) or
    ``"data"`` (a link).
    """

    name: str
    suffix: str
    join: str
    shown_as: str
    writer: str | None = None
    tape_writer: str | None = None

    @property
    def pixels(self) -> bool:
        return self.writer is not None

    def open_writer(self, path: str | os.PathLike[str], fps: float, **options: Any) -> Any:
        """The row's writer of drawn frames, opened on ``path``."""
        assert self.writer is not None, f"{self.name} has no pixels"
        return _resolve(self.writer)(path, fps, **options)

    def write_from_tape(self, path: str, tape: Tape, record: dict[str, Any]) -> Any:
        """Write the row's pixel-free output of ``tape`` (with what rendered it)."""
        assert self.tape_writer is not None, f"{self.name} is drawn from pixels"
        return _resolve(self.tape_writer)(path, tape, record)


def _resolve(name: str) -> Any:
    module, _, attr = name.partition(":")
    return getattr(importlib.import_module(module), attr)


_ENCODE = "rolltape.pass2.encode"
_ARTIFACTS = "rolltape.outputs.artifacts"

#: Every output format by name, in the order the CLI lists them.
TABLE: dict[str, Format] = {f.name: f for f in (
    Format("mp4", ".mp4", "packets", "video", writer=f"{_ENCODE}:open_writer"),
    Format("webm", ".webm", "packets", "video", writer=f"{_ENCODE}:open_writer"),
    Format("gif", ".gif", "frames", "img", writer=f"{_ENCODE}:_open_gif"),
    Format("png", "", "frames", "frames", writer=f"{_ENCODE}:_open_png"),
    Format("npz", ".npz", "whole", "data", tape_writer=f"{_ARTIFACTS}:write_tape_copy"),
    Format("jsonl", ".jsonl", "whole", "data", tape_writer=f"{_ARTIFACTS}:write_episode_jsonl"),
)}


def names() -> str:
    """'mp4, webm, gif, png, npz, jsonl': every format, for help texts and sentences."""
    return ", ".join(TABLE)


def pixel_formats() -> tuple[str, ...]:
    """Names of the formats whose frames are drawn (mp4, webm, gif, png, ...)."""
    return tuple(name for name, f in TABLE.items() if f.pixels)


def data_suffixes() -> tuple[str, ...]:
    """Suffixes of the formats without pixels ('.npz', '.jsonl'): the orchestrator writes
    them from the tape; render workers never see them."""
    return tuple(f.suffix for f in TABLE.values() if not f.pixels)


def file_suffixes() -> list[str]:
    """Suffixes of every format that is one file (all but folders), in the table's order."""
    return [f.suffix for f in TABLE.values() if f.suffix]


def by_suffix(path: str | os.PathLike[str]) -> Format | None:
    """The format whose suffix ends ``path`` (any case), or None (a folder, or unknown)."""
    suffix = Path(os.fspath(path)).suffix.lower()
    return next((f for f in TABLE.values() if f.suffix and f.suffix == suffix), None)


def suffix_list(pixels: bool = True) -> str:
    """'.mp4, .webm or .gif': the file suffixes of the drawn formats (or of all), in words."""
    found = [f.suffix for f in TABLE.values() if f.suffix and (f.pixels or not pixels)]
    return ", ".join(found[:-1]) + f" or {found[-1]}" if len(found) > 1 else found[0]
