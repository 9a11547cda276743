"""Streaming frame writers: RGB frames in, one video (or a folder of PNGs) out.

Frames arrive one at a time and are encoded as they arrive; no writer keeps more than
the frame it is working on (the GIF writer also keeps the previous frame's palette
indices), so memory stays flat however long the episode is.

Every writer is atomic: it writes into a temporary sibling of the output path
(``<stem>.partial-<pid>-<n><suffix>``, or a ``<name>.partial-<pid>-<n>`` folder for PNG
frames) and renames it into place only when :meth:`FrameWriter.close` succeeds. If an
exception escapes the ``with`` block, or :meth:`FrameWriter.abort` is called, the
temporary is deleted and whatever was at the output path before is left untouched.
A process killed with SIGKILL can leave a ``*.partial-<pid>-*`` behind; the pid in the
name says which run it came from.

May import: errors, PyAV, Pillow, numpy. Never: envs, policies, pass 1, executors, outputs.

Example::

    from rolltape.pass2.encode import open_writer

    with open_writer("episode.mp4", fps=1 / 0.05) as writer:
        for frame in frames:  # each an (H, W, 3) uint8 RGB array
            writer.write(frame)
    print(writer.frames_written)

Supported formats (:data:`FORMATS`):

* ``mp4``: H.264 (libx264), yuv420p, crf 23, preset ``veryfast``, on one encoder thread up
  to 640x480 (:data:`ONE_THREAD_PIXELS`). yuv420p needs even
  sizes, so an odd height or width is padded by repeating the last row or column once:
  a 65x47 frame is stored as 66x48.
* ``webm``: VP9 (libvpx-vp9), yuv420p, crf 32, realtime deadline with ``cpu-used=8``.
  Odd sizes are padded like mp4.
* ``gif``: one global 256-colour palette built from the first frame, every frame mapped
  onto it without dithering, looping forever.
* ``png``: a folder holding ``frame_000000.png``, ``frame_000001.png``, ...

This module imports neither torch nor mujoco, so render workers can import it cheaply.
"""

from __future__ import annotations

import abc
import contextlib
import itertools
import math
import os
import queue
import re
import shutil
import threading
import types
from collections.abc import Iterator, Sequence
from fractions import Fraction
from pathlib import Path
from typing import IO, ClassVar

import av
import numpy as np
from PIL import GifImagePlugin, Image

from rolltape.errors import UsageError
from rolltape.pass2.formats import TABLE, by_suffix, pixel_formats, suffix_list

__all__ = [
    "FORMATS",
    "BackgroundWriter",
    "FrameWriter",
    "count_frames",
    "format_from_path",
    "join_videos",
    "open_writer",
    "read_frames",
]

#: The formats drawn from pixels, by a writer in the render worker (the table's rows with
#: a writer), in the order the CLI lists them.
FORMATS: tuple[str, ...] = pixel_formats()

_FRAME_NAME = "frame_{:06d}.png"
_FRAME_RE = re.compile(r"frame_(\d{6,})\.png")
_X264_PRESETS = (
    "ultrafast",
    "superfast",
    "veryfast",
    "faster",
    "fast",
    "medium",
    "slow",
    "slower",
    "veryslow",
    "placebo",
)
# Makes temporary names unique when one process opens several writers side by side.
_temp_counter = itertools.count()


def format_from_path(path: str | os.PathLike[str]) -> str:
    """Returns the output format a path asks for, judged by its suffix.

    ``.mp4``, ``.webm`` and ``.gif`` (any case) name those formats. A path ending in a
    separator, a path with no suffix, or an existing directory with another suffix
    (``runs/v1.2``) means a folder of PNG frames.

    >>> format_from_path("runs/ep0.mp4")
    'mp4'
    >>> format_from_path("runs/ep0_frames/")
    'png'

    Raises:
      UsageError: the suffix is not one of the supported ones.
    """
    text = os.fspath(path)
    p = Path(text)
    if text.endswith(("/", os.sep)):
        return "png"
    suffix = p.suffix.lower()
    found = by_suffix(text)
    if found is not None and found.pixels:
        return found.name
    # Checked after the video suffixes so that a folder named "x.mp4" is an error, not PNGs.
    if not suffix or p.is_dir():
        return "png"
    files = suffix_list()
    if suffix == ".png":
        raise UsageError(
            f"{text} names a single PNG, but PNG output is a folder of frames; "
            f"give a path without a suffix (e.g. {p.with_suffix('')}) or use {files}."
        )
    raise UsageError(
        f"Cannot tell the video format of {text} from its suffix {p.suffix!r}; "
        f"use {files}, or a path without a suffix for a folder of PNG frames."
    )


def _check_frame(frame: object, expected_shape: tuple[int, ...] | None) -> np.ndarray:
    """Returns `frame` as a C-contiguous (H, W, 3) uint8 array, or raises ValueError."""
    if not isinstance(frame, np.ndarray):
        raise ValueError(
            f"A frame must be a numpy array, got {type(frame).__name__}; "
            "pass the (H, W, 3) uint8 RGB array the renderer returned."
        )
    if frame.dtype != np.uint8:
        raise ValueError(
            f"A frame must have dtype uint8, got {frame.dtype}; convert it with "
            "np.clip(frame, 0, 255).astype(np.uint8) (floats in [0, 1]: multiply by 255 first)."
        )
    if frame.ndim != 3 or frame.shape[2] != 3:
        raise ValueError(
            f"A frame must have shape (height, width, 3) for RGB, got {frame.shape}; "
            "drop an alpha channel with frame[..., :3] and grey frames need 3 channels."
        )
    if frame.shape[0] == 0 or frame.shape[1] == 0:
        raise ValueError(f"A frame must not be empty, got shape {frame.shape}.")
    if expected_shape is not None and frame.shape != expected_shape:
        raise ValueError(
            f"Every frame of one video must have the same size: the first was "
            f"{expected_shape[1]}x{expected_shape[0]} (WxH), this one is "
            f"{frame.shape[1]}x{frame.shape[0]}; render all frames at one size."
        )
    # Encoders read the buffer directly; a strided view (e.g. a flipped image) needs a copy.
    return np.ascontiguousarray(frame)


def _check_fps(fps: float) -> Fraction:
    """Returns `fps` as an exact frame rate, or raises UsageError."""
    try:
        value = float(fps)
    except (TypeError, ValueError):
        raise UsageError(f"fps must be a positive number, got {fps!r}.") from None
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"fps must be a positive number, got {fps!r}.")
    # Containers want a rational rate; 1/0.05 = 19.999999999999996 should become 20.
    rate = Fraction(value).limit_denominator(1000)
    if rate <= 0:
        raise UsageError(f"fps {fps!r} is too small; use at least 0.001 frames per second.")
    return rate


def _is_frame_dir(path: Path) -> bool:
    """Whether `path` is a folder holding only ``frame_*.png`` files (or nothing)."""
    return all(
        entry.is_file() and _FRAME_RE.fullmatch(entry.name) for entry in path.iterdir()
    )


class FrameWriter(abc.ABC):
    """Base class of the streaming writers; make one with :func:`open_writer`.

    A writer is a context manager. Leaving the ``with`` block normally calls
    :meth:`close`, which finishes the file and moves it into place; leaving it with an
    exception calls :meth:`abort`, which deletes the temporary and leaves the output
    path as it was. Both are safe to call more than once.

    Attributes:
      path: where the output ends up.
      fps: the frame rate, as an exact fraction.
      frames_written: how many frames :meth:`write` has accepted.
    """

    fmt: ClassVar[str] = ""

    def __init__(
        self, path: str | os.PathLike[str], fps: float, *, overwrite: bool = False
    ) -> None:
        self._closed = True  # until the temporary exists, there is nothing to clean up
        self.path = Path(os.fspath(path))
        self.fps = _check_fps(fps)
        self.overwrite = overwrite
        self.frames_written = 0
        self._shape: tuple[int, ...] | None = None
        self._check_target()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._temp = self._make_temp()
        except OSError as e:
            raise UsageError(
                f"Cannot write {self.path}: {e.strerror or e}; pick a folder you can write to."
            ) from None
        self._closed = False

    # --- public API ---------------------------------------------------------------

    def write(self, frame: np.ndarray) -> None:
        """Encodes one (H, W, 3) uint8 RGB frame.

        Every frame must have the size of the first one.

        Raises:
          ValueError: the frame has the wrong dtype, shape or size.
          RuntimeError: the writer is already closed.
        """
        if self._closed:
            raise RuntimeError(
                f"The writer for {self.path} is closed; open a new one with open_writer()."
            )
        frame = _check_frame(frame, self._shape)
        if self._shape is None:
            self._start(frame)
            self._shape = frame.shape
        self._write(frame)
        self.frames_written += 1

    def close(self) -> None:
        """Finishes the output and moves it into place. Safe to call twice.

        Raises:
          UsageError: no frame was written, or the output path was taken meanwhile
            (and `overwrite` is False). The temporary is deleted in both cases.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self._finish()
            if self.frames_written == 0:
                raise UsageError(f"No frames were written to {self.path}, so it was not created.")
            self._commit()
        except BaseException:
            self._discard()
            raise

    def abort(self) -> None:
        """Deletes the temporary output; the output path keeps its old contents.

        Safe to call twice, and a no-op after a successful :meth:`close`.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self._finish()
        except Exception:  # the output is being thrown away; a broken trailer is fine
            pass
        finally:
            self._discard()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` or :meth:`abort` has run."""
        return self._closed

    def __enter__(self) -> FrameWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __del__(self) -> None:
        # A writer dropped without close() holds an unfinished file: never publish it.
        try:
            self.abort()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (
            f"<{type(self).__name__} {self.fmt} {str(self.path)!r} fps={float(self.fps):g} "
            f"frames_written={self.frames_written} {state}>"
        )

    # --- for subclasses ---------------------------------------------------------

    def _start(self, frame: np.ndarray) -> None:
        """Sets up the encoder once the first frame tells the size."""

    @abc.abstractmethod
    def _write(self, frame: np.ndarray) -> None:
        """Encodes one validated frame."""

    def _finish(self) -> None:
        """Flushes and closes the temporary; runs once, on close() and on abort()."""

    # --- temporaries and renaming -------------------------------------------------

    def _check_target(self) -> None:
        if not os.path.lexists(self.path):
            return
        if self.path.is_dir() and self.fmt != "png":
            raise UsageError(
                f"{self.path} is a folder; give a file path for {self.fmt} output."
            )
        if self.path.is_dir() and not _is_frame_dir(self.path):
            # Replacing a folder means deleting it; only do that to our own frame folders.
            raise UsageError(
                f"{self.path} is a folder holding files other than frame_*.png; "
                "pick a new path for the PNG frames."
            )
        if self.path.is_dir() and not any(self.path.iterdir()):
            return  # an empty folder has nothing to lose
        if not self.overwrite:
            raise UsageError(f"{self.path} already exists; pass --overwrite to replace it.")

    def _temp_name(self) -> Path:
        name = self.path.name
        tag = f".partial-{os.getpid()}-{next(_temp_counter)}"
        if self.fmt == "png":
            return self.path.with_name(name + tag)
        stem, suffix = (self.path.stem, self.path.suffix) if self.path.suffix else (name, "")
        return self.path.with_name(stem + tag + suffix)

    def _make_temp(self) -> Path:
        while True:
            temp = self._temp_name()
            try:
                if self.fmt == "png":
                    temp.mkdir()
                else:
                    # O_EXCL reserves the name; mode 0o666 lets the umask decide, as open() would.
                    os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
                return temp
            except FileExistsError:
                continue

    def _commit(self) -> None:
        # Re-check: another process may have created the output while we encoded.
        self._check_target()
        if self.fmt != "png":
            os.replace(self._temp, self.path)
            return
        old: Path | None = None
        if os.path.lexists(self.path):
            if self.path.is_dir():
                old = self.path.with_name(
                    f"{self.path.name}.old-{os.getpid()}-{next(_temp_counter)}"
                )
                os.rename(self.path, old)
            else:
                os.remove(self.path)
        os.rename(self._temp, self.path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def _discard(self) -> None:
        temp = getattr(self, "_temp", None)
        if temp is None:
            return
        if self.fmt == "png":
            shutil.rmtree(temp, ignore_errors=True)
        else:
            try:
                os.remove(temp)
            except FileNotFoundError:
                pass


#: Frames up to this many pixels are encoded on one thread (x264, SVT-AV1). x264's default
#: (frame threads, 1.5 per core) pays more in waiting than it gains on frames this small, and
#: each thread costs compression: measured on 2 cores, 1,500 Atari screens 0.49 s on one
#: thread vs 0.96 s (a 32% smaller file), 300 MuJoCo frames at 640x480 0.76 s vs 0.83 s with
#: a quarter less CPU. SVT-AV1's threads compete with the drawing beside them (640x480:
#: 13.0 vs 13.5-14.7 ms of CPU a frame). Pass 2 runs a writer per worker anyway.
ONE_THREAD_PIXELS = 640 * 480


class _VideoWriter(FrameWriter):
    """mp4 (H.264, or AV1 for datasets) and webm (VP9) through PyAV, all yuv420p."""

    _codec: ClassVar[str] = ""

    def __init__(
        self,
        path: str | os.PathLike[str],
        fps: float,
        *,
        overwrite: bool = False,
        options: dict[str, str],
    ) -> None:
        self._options = options
        self._container: av.container.OutputContainer | None = None
        self._stream: av.VideoStream | None = None
        self._pad = (0, 0)
        super().__init__(path, fps, overwrite=overwrite)

    def _one_thread(self) -> dict[str, str]:
        """The options with the encoder on one thread (a codec that has no such setting
        here keeps its own)."""
        return self._options

    def _start(self, frame: np.ndarray) -> None:
        height, width = frame.shape[:2]
        if height * width <= ONE_THREAD_PIXELS:
            self._options = self._one_thread()
        # yuv420p stores colour at half resolution, so both sides must be even.
        self._pad = (height % 2, width % 2)
        self._container = av.open(str(self._temp), mode="w", format=self.fmt)
        stream = self._container.add_stream(self._codec, rate=self.fps)
        assert isinstance(stream, av.VideoStream)  # a video codec's stream
        stream.width = width + self._pad[1]
        stream.height = height + self._pad[0]
        stream.pix_fmt = "yuv420p"
        stream.codec_context.time_base = 1 / self.fps
        stream.options = {**self._options}
        self._stream = stream

    def _write(self, frame: np.ndarray) -> None:
        assert self._container is not None and self._stream is not None
        if self._pad != (0, 0):
            frame = np.pad(frame, ((0, self._pad[0]), (0, self._pad[1]), (0, 0)), mode="edge")
        video_frame = av.VideoFrame.from_ndarray(frame, format="rgb24")
        video_frame.pts = self.frames_written
        self._container.mux(self._stream.encode(video_frame))

    def _finish(self) -> None:
        container, self._container = self._container, None
        if container is None:
            return
        try:
            assert self._stream is not None
            container.mux(self._stream.encode(None))  # drain frames the encoder held back
        finally:
            container.close()


class _Mp4Writer(_VideoWriter):
    fmt = "mp4"
    _codec = "libx264"

    def _one_thread(self) -> dict[str, str]:
        return {"threads": "1", **self._options}


class _Av1Mp4Writer(_VideoWriter):
    fmt = "mp4"
    _codec = "libsvtav1"

    def _one_thread(self) -> dict[str, str]:
        # SVT-AV1's thread count is its "lp" (LeRobot's encoder_threads); the stream is the
        # same bytes on any number of threads (tested).
        params = self._options.get("svtav1-params", "")
        if "lp=" in params:
            return self._options
        return {**self._options, "svtav1-params": ":".join(p for p in (params, "lp=1") if p)}


#: LeRobot's own RGB video settings (its ``VideoEncoderConfig`` defaults, read in its v3
#: source): SVT-AV1 in mp4, yuv420p, a keyframe every 2 frames, crf 30, preset 12.
LEROBOT_AV1 = {"g": "2", "crf": "30", "preset": "12", "svtav1-params": "fast-decode=0"}


def open_av1_writer(path: str | os.PathLike[str], fps: float, *, overwrite: bool = False,
                    options: dict[str, str] | None = None) -> FrameWriter:
    """An mp4 writer of AV1 (SVT-AV1) video, with LeRobot's settings unless ``options``
    says otherwise: what a LeRobotDataset's camera videos hold."""
    return _Av1Mp4Writer(path, fps, overwrite=overwrite, options=dict(options or LEROBOT_AV1))


class _WebmWriter(_VideoWriter):
    fmt = "webm"
    _codec = "libvpx-vp9"


class _GifWriter(FrameWriter):
    """GIF written frame by frame with Pillow's GIF helpers, one global palette."""

    fmt = "gif"

    def __init__(
        self, path: str | os.PathLike[str], fps: float, *, overwrite: bool = False
    ) -> None:
        self._file: IO[bytes] | None = None
        self._palette: Image.Image | None = None
        self._previous: np.ndarray | None = None
        super().__init__(path, fps, overwrite=overwrite)

    def _start(self, frame: np.ndarray) -> None:
        self._palette = _gif_palette(frame)
        self._file = open(self._temp, "wb")
        first = Image.fromarray(frame).quantize(palette=self._palette, dither=Image.Dither.NONE)
        header, _ = GifImagePlugin.getheader(first, info={"loop": 0})  # loop 0 = forever
        for block in header:
            self._file.write(block)

    def _write(self, frame: np.ndarray) -> None:
        assert self._file is not None and self._palette is not None
        # No dithering: it is slower, makes flat backgrounds shimmer between frames and
        # defeats the changed-region cropping below.
        image = Image.fromarray(frame).quantize(palette=self._palette, dither=Image.Dither.NONE)
        indices = np.asarray(image)
        offset = (0, 0)
        if self._previous is not None:
            # Frames keep (disposal 1) what they do not cover, so only the rectangle that
            # changed is written; RL cameras often hold still and this shrinks file and time.
            changed = indices != self._previous
            rows = np.flatnonzero(changed.any(axis=1))
            cols = np.flatnonzero(changed.any(axis=0))
            if rows.size:
                box = (int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1)
            else:
                box = (0, 0, 1, 1)  # a GIF frame cannot be empty; rewrite one pixel
            image = image.crop(box)
            offset = box[:2]
        self._previous = indices
        for block in GifImagePlugin.getdata(
            image,
            offset=offset,
            duration=self._duration_cs(self.frames_written) * 10,  # getdata takes ms
            disposal=1,
        ):
            self._file.write(block)

    def _duration_cs(self, index: int) -> int:
        """Display time of frame `index` in centiseconds, GIF's time unit.

        Frame k is shown until round(100 * (k + 1) / fps) cs, so durations alternate
        (30 fps: 3, 4, 3, 3, 4, 3, ...) and the total length stays right. Browsers show
        frames under 2 cs for 10 cs, so each frame lasts at least 2 cs: above 50 fps a GIF
        plays slower than the source.
        """
        rate = self.fps  # frames per second, exact

        def ends_at(k: int) -> int:
            return math.floor(Fraction(100 * k) / rate + Fraction(1, 2))

        return max(2, ends_at(index + 1) - ends_at(index))

    def _finish(self) -> None:
        file, self._file = self._file, None
        self._previous = None
        if file is None:
            return
        try:
            file.write(b";")  # GIF trailer
        finally:
            file.close()


def _gif_palette(frame: np.ndarray) -> Image.Image:
    """Builds the global 256-colour palette, as a 1x1 "P" image, from the first frame.

    Median cut gives the first frame's colours; leftover slots get a uniform colour cube,
    so colours that only appear later (a second object, a flash) still have a near match.
    """
    colours = Image.fromarray(frame).quantize(256, method=Image.Quantize.MEDIANCUT).getpalette()
    assert colours is not None
    colours = colours[: 256 * 3]
    free = 256 - len(colours) // 3
    levels = int(round(free ** (1 / 3)))
    while levels**3 > free:
        levels -= 1
    if levels >= 2:
        steps = np.linspace(0, 255, levels).round().astype(int).tolist()
        colours += [c for rgb in itertools.product(steps, repeat=3) for c in rgb]
    # Pad with repeats of the last colour: nearest-colour search picks the first copy.
    colours += colours[-3:] * (256 - len(colours) // 3)
    palette = Image.new("P", (1, 1))
    palette.putpalette(colours)
    return palette


class _PngWriter(FrameWriter):
    """A folder of ``frame_000000.png``, ``frame_000001.png``, ..."""

    fmt = "png"

    def _write(self, frame: np.ndarray) -> None:
        # Level 1: most of the size win of zlib at a fraction of the default's (6) time.
        Image.fromarray(frame).save(
            self._temp / _FRAME_NAME.format(self.frames_written), compress_level=1
        )


class BackgroundWriter:
    """Feeds a :class:`FrameWriter` from a thread of its own, so that drawing the next frame
    overlaps encoding this one (PyAV and libx264 release the GIL while they encode).

    Same interface as the writer it wraps: ``write``, ``close``, ``abort``,
    ``frames_written``, context manager. At most ``depth`` frames wait in between, so memory
    stays flat. An error in the encoding thread is raised by the next ``write`` or by
    ``close``; the output is then not published.

    >>> with BackgroundWriter(open_writer("ep.mp4", fps=20)) as writer:  # doctest: +SKIP
    ...     for frame in frames:
    ...         writer.write(frame)
    """

    def __init__(self, writer: FrameWriter, depth: int = 4) -> None:
        self.writer = writer
        self.path = writer.path
        self.frames_written = 0  # frames accepted; all of them are encoded once close() returns
        self._queue: queue.Queue[np.ndarray | None] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._drain, name=f"encode {writer.path.name}",
                                         daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while (frame := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self.writer.write(frame)
                except BaseException as exc:  # kept for the caller's thread
                    self._error = exc

    def _stop(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def write(self, frame: np.ndarray) -> None:
        if self._error is not None:
            self.abort()
            raise self._error
        if not self._thread.is_alive():
            raise RuntimeError(f"The writer for {self.path} is closed; open a new one.")
        self._queue.put(frame)
        self.frames_written += 1

    def close(self) -> None:
        """Encodes what is queued, then closes the writer (publishing the output)."""
        self._stop()
        if self._error is not None:
            self.writer.abort()
            raise self._error
        self.writer.close()

    def abort(self) -> None:
        self._stop()
        self.writer.abort()

    def __enter__(self) -> BackgroundWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: types.TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


@contextlib.contextmanager
def finishing(writers: Sequence[FrameWriter | BackgroundWriter]) -> Iterator[None]:
    """Close every writer of ``writers``, in order, when the block ends; abort every one
    (nothing published, the temporaries gone) when the block raises, and those not yet
    closed when a close raises. A writer the block aborted stays aborted (a close after an
    abort does nothing)."""
    try:
        yield
        for w in writers:
            w.close()
    except BaseException:
        for w in writers:
            w.abort()
        raise


def open_writer(
    path: str | os.PathLike[str],
    fps: float,
    fmt: str | None = None,
    *,
    overwrite: bool = False,
    crf: int | None = None,
    preset: str | None = None,
) -> FrameWriter:
    """Opens a streaming writer for `path`; frames go in with ``.write(frame)``.

    Args:
      path: the output file (``.mp4``, ``.webm``, ``.gif``) or folder (PNG frames). Its
        parent folders are created.
      fps: frames per second, any positive number (``1 / env.dt`` is fine: it is rounded
        to a fraction with a denominator of at most 1000).
      fmt: one of :data:`FORMATS`; by default :func:`format_from_path` decides.
      overwrite: replace an existing output (only when :meth:`FrameWriter.close`
        succeeds). An existing folder is only replaced if it holds nothing but
        ``frame_*.png`` files.
      crf: quality for mp4 (0-51, default 23) and webm (0-63, default 32); lower is
        better and bigger.
      preset: libx264 speed preset for mp4, default ``"veryfast"``; slower presets make
        smaller files at the same crf.

    Returns:
      The writer, to use as a context manager.

    Raises:
      UsageError: bad fps, format, crf or preset; the output exists and `overwrite`
        is False; or the folder cannot be written.

    Example::

        with open_writer("out/ep0.gif", fps=20) as writer:
            for frame in frames:
                writer.write(frame)
    """
    if fmt is None:
        fmt = format_from_path(path)
    elif fmt not in FORMATS:
        raise UsageError(f"Unknown video format {fmt!r}; use one of {', '.join(FORMATS)}.")
    if fmt not in ("mp4", "webm"):  # formats without codec options: their row's writer
        if crf is not None or preset is not None:
            raise UsageError(f"{'crf' if crf is not None else 'preset'} only applies to "
                             f"{'mp4 and webm' if crf is not None else 'mp4'}, not {fmt}; "
                             "leave it unset.")
        return TABLE[fmt].open_writer(path, fps, overwrite=overwrite)
    if crf is not None and fmt not in ("mp4", "webm"):
        raise UsageError(f"crf only applies to mp4 and webm, not {fmt}; leave it unset.")
    if preset is not None and fmt != "mp4":
        raise UsageError(f"preset only applies to mp4, not {fmt}; leave it unset.")
    if fmt == "mp4":
        crf = _check_crf(23 if crf is None else crf, 51, fmt)
        preset = "veryfast" if preset is None else preset
        if preset not in _X264_PRESETS:
            raise UsageError(
                f"Unknown x264 preset {preset!r}; use one of {', '.join(_X264_PRESETS)}."
            )
        # +faststart moves the index to the front so browsers can play while loading.
        options = {"crf": str(crf), "preset": preset, "movflags": "+faststart"}
        return _Mp4Writer(path, fps, overwrite=overwrite, options=options)
    if fmt == "webm":
        crf = _check_crf(32 if crf is None else crf, 63, fmt)
        # b=0 makes crf a pure quality target; realtime + cpu-used 8 is libvpx's fastest
        # mode, several times faster than its "good" default on small machines.
        options = {
            "crf": str(crf),
            "b": "0",
            "deadline": "realtime",
            "cpu-used": "8",
            "row-mt": "1",
            "lag-in-frames": "0",
        }
        return _WebmWriter(path, fps, overwrite=overwrite, options=options)
    raise AssertionError(f"no writer for {fmt}")  # mp4 and webm returned above


def join_videos(
    parts: Sequence[str | os.PathLike[str]], path: str | os.PathLike[str], *,
    overwrite: bool = False,
) -> int:
    """Joins mp4 or webm files made by :func:`open_writer` into one, end to end, without
    decoding: their compressed packets are copied with shifted timestamps, as
    ``ffmpeg -f concat -c copy`` does. Every part opens with a keyframe (each writer starts
    a new stream), so the joined video decodes from start to end. Returns the frame count.

    Atomic like the writers: the result is renamed into place only when complete.

    >>> join_videos(["a.mp4", "b.mp4"], "ab.mp4")  # doctest: +SKIP
    250

    Raises:
      UsageError: ``path`` is not mp4/webm, a part has another format, no parts were
        given, or ``path`` exists and ``overwrite`` is False.
    """
    out = Path(os.fspath(path))
    fmt = format_from_path(out)
    if fmt not in ("mp4", "webm") or not parts:
        raise UsageError(f"Only mp4 and webm files can be joined without re-encoding, into "
                         f"{out}; give one or more parts of the same format.")
    for part in parts:
        if _existing(part)[1] != fmt:
            raise UsageError(f"{part} is not {fmt}; every part must have the output's format.")
    if os.path.lexists(out) and not overwrite:
        raise UsageError(f"{out} already exists; pass --overwrite to replace it.")
    out.parent.mkdir(parents=True, exist_ok=True)
    temp = out.with_name(f"{out.stem}.partial-{os.getpid()}-{next(_temp_counter)}{out.suffix}")
    options = {"movflags": "+faststart"} if fmt == "mp4" else {}
    frames = 0
    try:
        with av.open(str(temp), mode="w", format=fmt, options=options) as joined:
            stream, offset = None, Fraction(0)  # offset: where the next part starts, in s
            last_dts: int | None = None
            for part in parts:
                with av.open(os.fspath(part)) as source:
                    source_stream = source.streams.video[0]
                    if stream is None:
                        stream = joined.add_stream_from_template(source_stream)
                    time_base = source_stream.time_base
                    shift = int(offset / time_base)
                    end = shift
                    # A part of one or two frames may come without packet durations: a
                    # frame then lasts 1/fps, so that the next part never starts on it.
                    rate = source_stream.average_rate or source_stream.guessed_rate or 30
                    frame_ticks = max(1, int(1 / (Fraction(rate) * time_base)))
                    first = True
                    for packet in source.demux(source_stream):
                        if packet.dts is None:  # the demuxer's empty end-of-stream packet
                            continue
                        if first and last_dts is not None and packet.dts + shift <= last_dts:
                            # A part with B-frames decodes ahead (negative dts); after a
                            # part of one or two frames, which has none, its first packets
                            # would go back in time: start it a little later instead.
                            shift += last_dts + 1 - (packet.dts + shift)
                        first = False
                        packet.pts += shift
                        packet.dts += shift
                        last_dts = packet.dts
                        end = max(end, packet.pts + (packet.duration or frame_ticks))
                        packet.stream = stream
                        joined.mux(packet)
                        frames += 1
                    offset = end * time_base
        os.replace(temp, out)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return frames


def _check_crf(crf: int, maximum: int, fmt: str) -> int:
    if isinstance(crf, bool) or not isinstance(crf, (int, np.integer)) or not 0 <= crf <= maximum:
        raise UsageError(f"crf for {fmt} must be an integer from 0 to {maximum}, got {crf!r}.")
    return int(crf)


def _existing(path: str | os.PathLike[str]) -> tuple[Path, str]:
    p = Path(os.fspath(path))
    if not os.path.exists(p):
        raise UsageError(f"{p} does not exist; check the path.")
    return p, format_from_path(p)


def _png_frames(folder: Path) -> list[Path]:
    found = [(int(m.group(1)), e) for e in folder.iterdir() if (m := _FRAME_RE.fullmatch(e.name))]
    return [p for _, p in sorted(found)]  # by number: frame_1000000 sorts after 999999


def read_frames(path: str | os.PathLike[str]) -> Iterator[np.ndarray]:
    """Yields the frames of a video file or PNG folder, one (H, W, 3) uint8 array each.

    mp4, webm and gif are decoded with PyAV, PNG folders read with Pillow. Frames are
    decoded lazily, so memory stays flat. mp4/webm frames of odd-sized sources come
    back with the padding row/column (see :func:`open_writer`).

    >>> sum(frame.mean() > 0 for frame in read_frames("ep0.mp4"))  # doctest: +SKIP

    Raises:
      UsageError: the path does not exist or has an unknown suffix.
    """
    p, fmt = _existing(path)
    if fmt == "png":
        for file in _png_frames(p):
            with Image.open(file) as image:
                yield np.asarray(image.convert("RGB"))
        return
    with av.open(str(p)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        for frame in container.decode(stream):
            yield frame.to_ndarray(format="rgb24")


def count_frames(path: str | os.PathLike[str]) -> int:
    """Returns how many frames a video file or PNG folder holds.

    Videos are fully decoded rather than trusting the container's frame count, which
    some muxers leave out or estimate.

    >>> count_frames("ep0.gif")  # doctest: +SKIP
    37
    """
    p, fmt = _existing(path)
    if fmt == "png":
        return len(_png_frames(p))
    with av.open(str(p)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        return sum(1 for _ in container.decode(stream))


def _open_gif(path: str | os.PathLike[str], fps: float, *, overwrite: bool = False) -> FrameWriter:
    return _GifWriter(path, fps, overwrite=overwrite)


def _open_png(path: str | os.PathLike[str], fps: float, *, overwrite: bool = False) -> FrameWriter:
    return _PngWriter(path, fps, overwrite=overwrite)
