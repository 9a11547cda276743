"""Tests for rolltape.encode: streaming, atomic frame writers."""

from __future__ import annotations

import ast
import gc
import os
import tracemalloc
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from PIL import Image

import rolltape.pass2.encode as encode
from rolltape.errors import UsageError
from rolltape.pass2.encode import (
    FORMATS,
    LEROBOT_AV1,
    BackgroundWriter,
    FrameWriter,
    count_frames,
    finishing,
    format_from_path,
    join_videos,
    open_av1_writer,
    open_writer,
    read_frames,
)

N_FRAMES = 37
SIZES = [(47, 65), (48, 64)]  # (height, width): odd sizes exercise yuv420p padding


def make_frame(i: int, height: int = 48, width: int = 64) -> np.ndarray:
    """A smooth background with a yellow square that moves one step per frame."""
    frame = np.empty((height, width, 3), np.uint8)
    frame[..., 0] = np.linspace(20, 120, width, dtype=np.uint8)[None, :]
    frame[..., 1] = 40
    frame[..., 2] = np.linspace(150, 60, height, dtype=np.uint8)[:, None]
    side = max(4, min(height, width) // 4)
    x = (i * 3) % (width - side)
    y = (i * 2) % (height - side)
    frame[y : y + side, x : x + side] = (250, 220, 30)
    return frame


def output_path(tmp_path: Path, fmt: str, name: str = "out") -> Path:
    return tmp_path / (name if fmt == "png" else f"{name}.{fmt}")


def write_video(path: Path, fmt: str, height: int, width: int, n: int = N_FRAMES, **kw) -> None:
    with open_writer(path, fps=20, **kw) as writer:
        for i in range(n):
            writer.write(make_frame(i, height, width))
    assert writer.frames_written == n
    assert writer.closed


def stored_size(fmt: str, height: int, width: int) -> tuple[int, int]:
    if fmt in ("mp4", "webm"):
        return height + height % 2, width + width % 2
    return height, width


# --- format_from_path ---------------------------------------------------------------


@pytest.mark.parametrize(
    "path, fmt",
    [
        ("a.mp4", "mp4"),
        ("dir/a.MP4", "mp4"),
        ("a.webm", "webm"),
        ("a.gif", "gif"),
        ("frames", "png"),
        ("frames/", "png"),
        (Path("runs/ep0"), "png"),
    ],
)
def test_format_from_path(path, fmt):
    assert format_from_path(path) == fmt


def test_format_from_path_existing_directory_with_dot_is_png(tmp_path):
    folder = tmp_path / "run.v2"
    folder.mkdir()
    assert format_from_path(folder) == "png"


@pytest.mark.parametrize("path", ["a.avi", "a.mkv", "a.txt"])
def test_format_from_path_unknown_suffix_lists_formats(path):
    with pytest.raises(UsageError, match=r"\.mp4, \.webm or \.gif"):
        format_from_path(path)


def test_format_from_path_single_png_explains_folder():
    with pytest.raises(UsageError, match="folder of frames"):
        format_from_path("a.png")


def test_formats_constant():
    assert FORMATS == ("mp4", "webm", "gif", "png")


# --- round trips --------------------------------------------------------------------


@pytest.mark.parametrize("height, width", SIZES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_frame_count_and_size(tmp_path, fmt, height, width):
    path = output_path(tmp_path, fmt)
    write_video(path, fmt, height, width)

    assert count_frames(path) == N_FRAMES
    frames = list(read_frames(path))
    assert len(frames) == N_FRAMES
    expected = (*stored_size(fmt, height, width), 3)
    for frame in frames:
        assert frame.shape == expected
        assert frame.dtype == np.uint8
    # Only the output is left: no temporaries.
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


@pytest.mark.parametrize("height, width", SIZES)
# gif: the gradient has more than 256 colours, so the palette costs a little accuracy.
@pytest.mark.parametrize(
    "fmt, max_error", [("mp4", 4.0), ("webm", 6.0), ("gif", 3.0), ("png", 0.0)]
)
def test_decoded_frames_match_source(tmp_path, fmt, max_error, height, width):
    path = output_path(tmp_path, fmt)
    write_video(path, fmt, height, width)
    for i, decoded in enumerate(read_frames(path)):
        source = make_frame(i, height, width)
        # Padding repeats the last row/column; compare the source region only.
        error = np.abs(decoded[:height, :width].astype(int) - source.astype(int)).mean()
        assert error <= max_error, f"frame {i}: mean abs error {error:.2f}"


def test_mp4_padding_repeats_edge(tmp_path):
    path = tmp_path / "odd.mp4"
    write_video(path, "mp4", 47, 65)
    decoded = next(read_frames(path)).astype(int)
    # The padded row/column copy their neighbours (up to coding noise).
    assert np.abs(decoded[-1] - decoded[-2]).mean() < 4
    assert np.abs(decoded[:, -1] - decoded[:, -2]).mean() < 4


def test_gif_opens_in_pillow_with_frames_loop_and_duration(tmp_path):
    path = tmp_path / "out.gif"
    write_video(path, "gif", 48, 64)
    with Image.open(path) as image:
        assert image.format == "GIF"
        assert image.n_frames == N_FRAMES
        assert image.info["loop"] == 0
        assert image.size == (64, 48)
        durations = []
        for k in range(image.n_frames):
            image.seek(k)
            durations.append(image.info["duration"])
    assert durations == [50] * N_FRAMES  # 20 fps = 5 cs per frame
    assert path.read_bytes().endswith(b";")


def test_gif_durations_round_without_drift(tmp_path):
    path = tmp_path / "out.gif"
    with open_writer(path, fps=30) as writer:
        for i in range(30):
            writer.write(make_frame(i))
    with Image.open(path) as image:
        durations = []
        for k in range(image.n_frames):
            image.seek(k)
            durations.append(image.info["duration"])
    assert set(durations) == {30, 40}
    assert sum(durations) == 1000  # one second of 30 fps, exactly


def test_gif_fast_fps_clamps_to_two_centiseconds(tmp_path):
    path = tmp_path / "out.gif"
    with open_writer(path, fps=125) as writer:
        for i in range(5):
            writer.write(make_frame(i))
    with Image.open(path) as image:
        image.seek(3)
        assert image.info["duration"] == 20


def test_gif_colours_absent_from_first_frame_get_a_near_match(tmp_path):
    path = tmp_path / "out.gif"
    black = np.zeros((32, 32, 3), np.uint8)
    green = np.zeros((32, 32, 3), np.uint8)
    green[8:24, 8:24] = (0, 255, 0)
    with open_writer(path, fps=10) as writer:
        writer.write(black)
        writer.write(green)
        writer.write(black)
    frames = list(read_frames(path))
    assert len(frames) == 3
    assert np.abs(frames[1].astype(int) - green).max() <= 40
    assert np.abs(frames[2].astype(int) - black).max() <= 5  # the changed region is reset


def test_gif_identical_frames(tmp_path):
    path = tmp_path / "still.gif"
    with open_writer(path, fps=10) as writer:
        for _ in range(4):
            writer.write(make_frame(0))
    assert count_frames(path) == 4
    with Image.open(path) as image:
        assert image.n_frames == 4


def test_png_frame_names(tmp_path):
    path = tmp_path / "frames"
    write_video(path, "png", 48, 64, n=12)
    assert sorted(p.name for p in path.iterdir()) == [f"frame_{i:06d}.png" for i in range(12)]


@pytest.mark.parametrize(
    "fps, rate",
    [(1 / 0.05, Fraction(20)), (1 / 0.008, Fraction(125)), (29.97, Fraction(2997, 100))],
)
def test_mp4_frame_rate_from_float_fps(tmp_path, fps, rate):
    path = tmp_path / "out.mp4"
    with open_writer(path, fps=fps) as writer:
        assert writer.fps == rate
        for i in range(10):
            writer.write(make_frame(i))
    with av.open(str(path)) as container:
        assert container.streams.video[0].average_rate == rate


def test_explicit_fmt_overrides_suffix(tmp_path):
    path = tmp_path / "clip.bin"
    with open_writer(path, fps=20, fmt="mp4") as writer:
        for i in range(5):
            writer.write(make_frame(i))
    with av.open(str(path)) as container:
        assert container.streams.video[0].codec_context.name == "h264"


def test_webm_is_vp9(tmp_path):
    path = tmp_path / "out.webm"
    write_video(path, "webm", 48, 64, n=5)
    with av.open(str(path)) as container:
        assert container.streams.video[0].codec_context.name == "vp9"


def test_creates_parent_folders(tmp_path):
    path = tmp_path / "a" / "b" / "out.gif"
    write_video(path, "gif", 48, 64, n=3)
    assert count_frames(path) == 3


def test_non_contiguous_frames_are_accepted(tmp_path):
    path = tmp_path / "out.mp4"
    with open_writer(path, fps=10) as writer:
        for i in range(5):
            writer.write(make_frame(i)[::-1])  # a flipped view, as renderers often return
    assert count_frames(path) == 5


# --- atomicity and overwrite ------------------------------------------------------------


class Boom(Exception):
    pass


@pytest.mark.parametrize("fmt", FORMATS)
def test_exception_in_with_leaves_nothing(tmp_path, fmt):
    path = output_path(tmp_path, fmt)
    with pytest.raises(Boom):
        with open_writer(path, fps=20) as writer:
            for i in range(5):
                writer.write(make_frame(i))
            # The temporary exists next to the output while writing.
            assert any(".partial-" in p.name for p in tmp_path.iterdir())
            raise Boom
    assert writer.closed
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_failed_write_keeps_existing_output(tmp_path, fmt):
    path = output_path(tmp_path, fmt)
    write_video(path, fmt, 48, 64, n=7)
    before = {p: p.read_bytes() for p in ([path] if path.is_file() else sorted(path.iterdir()))}

    with pytest.raises(Boom):
        with open_writer(path, fps=20, overwrite=True) as writer:
            for i in range(3):
                writer.write(make_frame(i))
            raise Boom

    after = {p: p.read_bytes() for p in ([path] if path.is_file() else sorted(path.iterdir()))}
    assert after == before
    assert count_frames(path) == 7
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_abort_discards_and_is_idempotent(tmp_path):
    path = tmp_path / "out.mp4"
    writer = open_writer(path, fps=20)
    writer.write(make_frame(0))
    writer.abort()
    writer.abort()
    writer.close()  # no-op after abort
    assert list(tmp_path.iterdir()) == []


def test_dropped_writer_is_never_published(tmp_path):
    path = tmp_path / "out.gif"
    writer = open_writer(path, fps=20)
    writer.write(make_frame(0))
    del writer
    gc.collect()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_refuses_to_overwrite(tmp_path, fmt):
    path = output_path(tmp_path, fmt)
    write_video(path, fmt, 48, 64, n=4)
    with pytest.raises(UsageError) as info:
        open_writer(path, fps=20)
    message = str(info.value)
    assert str(path) in message and "--overwrite" in message
    assert count_frames(path) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]

    write_video(path, fmt, 48, 64, n=6, overwrite=True)
    assert count_frames(path) == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_png_overwrite_replaces_all_old_frames(tmp_path):
    path = tmp_path / "frames"
    write_video(path, "png", 48, 64, n=9)
    write_video(path, "png", 48, 64, n=3, overwrite=True)
    assert sorted(p.name for p in path.iterdir()) == [f"frame_{i:06d}.png" for i in range(3)]


def test_png_into_existing_empty_folder(tmp_path):
    path = tmp_path / "frames"
    path.mkdir()
    write_video(path, "png", 48, 64, n=3)
    assert count_frames(path) == 3


def test_never_deletes_a_foreign_folder(tmp_path):
    folder = tmp_path / "mystuff"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    with pytest.raises(UsageError, match="pick a new path"):
        open_writer(folder, fps=20, overwrite=True)
    assert (folder / "notes.txt").read_text() == "keep me"


def test_video_path_that_is_a_folder(tmp_path):
    folder = tmp_path / "out.mp4"
    folder.mkdir()
    with pytest.raises(UsageError, match="is a folder"):
        open_writer(folder, fps=20, overwrite=True)


def test_output_appearing_during_write_is_not_clobbered(tmp_path):
    path = tmp_path / "out.gif"
    with pytest.raises(UsageError, match="--overwrite"):
        with open_writer(path, fps=20) as writer:
            writer.write(make_frame(0))
            path.write_bytes(b"someone else")
    assert path.read_bytes() == b"someone else"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.gif"]


# --- validation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "frame, match",
    [
        (np.zeros((8, 8, 3), np.float32), "uint8"),
        (np.zeros((8, 8), np.uint8), r"\(height, width, 3\)"),
        (np.zeros((8, 8, 4), np.uint8), r"frame\[\.\.\., :3\]"),
        (np.zeros((0, 8, 3), np.uint8), "empty"),
        ([[[0, 0, 0]]], "numpy array"),
    ],
)
def test_bad_first_frame(tmp_path, frame, match):
    path = tmp_path / "out.mp4"
    with pytest.raises(ValueError, match=match):
        with open_writer(path, fps=20) as writer:
            writer.write(frame)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_frame_size_change_is_rejected(tmp_path, fmt):
    path = output_path(tmp_path, fmt)
    with pytest.raises(ValueError, match=r"same size.*64x48.*65x47"):
        with open_writer(path, fps=20) as writer:
            writer.write(make_frame(0, 48, 64))
            writer.write(make_frame(1, 47, 65))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fps", [0, -5, float("nan"), float("inf"), "fast"])
def test_bad_fps(tmp_path, fps):
    with pytest.raises(UsageError, match="fps"):
        open_writer(tmp_path / "out.mp4", fps=fps)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"fmt": "avi"}, "mp4, webm, gif, png"),
        ({"crf": 60}, "0 to 51"),
        ({"crf": 2.5}, "integer"),
        ({"preset": "warp"}, "veryfast"),
        ({"fmt": "gif", "crf": 20}, "crf only applies"),
        ({"fmt": "webm", "preset": "fast"}, "preset only applies"),
    ],
)
def test_bad_options(tmp_path, kwargs, match):
    with pytest.raises(UsageError, match=match):
        open_writer(tmp_path / "out.mp4", fps=20, **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_crf_changes_size(tmp_path):
    sizes = []
    for crf in (10, 40):
        path = tmp_path / f"crf{crf}.mp4"
        with open_writer(path, fps=20, crf=crf, preset="ultrafast") as writer:
            for i in range(10):
                writer.write(make_frame(i, 96, 128))
        sizes.append(path.stat().st_size)
    assert sizes[0] > sizes[1]


# --- lifecycle ----------------------------------------------------------------------


@pytest.mark.parametrize(("height", "width", "one_thread"), [(210, 160, True),
                                                               (480, 640, True),
                                                               (600, 800, False)])
def test_mp4_up_to_640x480_is_encoded_on_one_x264_thread(tmp_path, height, width, one_thread):
    # x264 writes its settings into the stream (an SEI message); frame threads on frames this
    # small cost more than they gain (see encode.ONE_THREAD_PIXELS).
    out = tmp_path / "v.mp4"
    write_video(out, "mp4", height, width, n=3)
    settings = out.read_bytes().split(b"options: ")[1].split(b"\x00")[0].decode().split()
    x264_alone = (os.cpu_count() or 1) == 1  # x264's own choice on one core is one thread
    assert ("threads=1" in settings) is (one_thread or x264_alone), settings


def test_av1_up_to_640x480_is_encoded_on_one_thread_into_the_same_bytes(tmp_path):
    """One SVT-AV1 thread (lp=1) as for x264, beside the drawing; the thread count does
    not change SVT-AV1's stream, so the video is LeRobot's either way."""
    frames = [make_frame(i, 480, 640) for i in range(6)]

    def encode_to(name: str, options: dict[str, str] | None = None) -> Any:
        writer = open_av1_writer(tmp_path / name, fps=20, options=options)
        for frame in frames:
            writer.write(frame)
        writer.close()
        return writer

    assert "lp=1" in encode_to("one.mp4")._options["svtav1-params"]
    assert encode_to("two.mp4", {**LEROBOT_AV1, "svtav1-params": "fast-decode=0:lp=2"}
                     )._options["svtav1-params"].endswith("lp=2")
    assert (tmp_path / "one.mp4").read_bytes() == (tmp_path / "two.mp4").read_bytes()


@pytest.mark.parametrize("fmt", FORMATS)
def test_close_twice_is_safe(tmp_path, fmt):
    path = output_path(tmp_path, fmt)
    writer = open_writer(path, fps=20)
    assert isinstance(writer, FrameWriter)
    assert not writer.closed
    for i in range(3):
        writer.write(make_frame(i))
    writer.close()
    writer.close()
    writer.abort()  # no-op: the output is already published
    with writer:  # re-entering a closed writer and leaving it is harmless too
        pass
    assert count_frames(path) == 3


def test_write_after_close_raises(tmp_path):
    writer = open_writer(tmp_path / "out.gif", fps=20)
    writer.write(make_frame(0))
    writer.close()
    with pytest.raises(RuntimeError, match="closed"):
        writer.write(make_frame(1))


def test_zero_frames_creates_nothing(tmp_path):
    path = tmp_path / "out.mp4"
    with pytest.raises(UsageError, match="No frames"):
        with open_writer(path, fps=20):
            pass
    assert list(tmp_path.iterdir()) == []


def test_read_missing_path(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        count_frames(tmp_path / "nope.mp4")
    with pytest.raises(UsageError, match="does not exist"):
        next(read_frames(tmp_path / "nope.gif"))


def test_repr(tmp_path):
    writer = open_writer(tmp_path / "out.gif", fps=20)
    assert "gif" in repr(writer) and "open" in repr(writer)
    writer.abort()
    assert "closed" in repr(writer)


# --- memory -------------------------------------------------------------------------


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("fmt", FORMATS)
def test_memory_stays_flat(tmp_path, fmt):
    """300 frames of 480x480 would be ~200 MB if held; the writer must hold ~none."""
    n, size = 300, 480
    frame_bytes = size * size * 3
    path = output_path(tmp_path, fmt)
    has_proc = os.path.exists("/proc/self/statm")
    tracemalloc.start()
    try:
        with open_writer(path, fps=30) as writer:
            for i in range(n):
                writer.write(make_frame(i, size, size))
                if i == 49 and has_proc:
                    rss_warm = _rss_bytes()  # after encoder start-up and lookahead fill
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Traced (numpy and Python) memory never held more than a few frames at once.
    assert peak < 8 * frame_bytes, f"peak {peak / 1e6:.1f} MB"
    # Native encoder memory (x264, libvpx, Pillow) does not grow with the frame count.
    if has_proc:
        growth = _rss_bytes() - rss_warm
        assert growth < 40 * frame_bytes, f"RSS grew {growth / 1e6:.1f} MB over 250 frames"
    assert count_frames(path) == n


# --- imports ------------------------------------------------------------------------


def test_does_not_import_torch_or_mujoco():
    tree = ast.parse(Path(encode.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & {"torch", "mujoco", "gymnasium", "stable_baselines3"}


# --- BackgroundWriter ---------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["mp4", "gif", "png"])
def test_background_writer_writes_what_the_writer_writes(tmp_path, fmt):
    direct, threaded = output_path(tmp_path, fmt, "direct"), output_path(tmp_path, fmt, "bg")
    write_video(direct, fmt, 48, 64)
    with BackgroundWriter(open_writer(threaded, fps=20), depth=2) as writer:
        for i in range(N_FRAMES):
            writer.write(make_frame(i))
    assert writer.frames_written == N_FRAMES
    a, b = list(read_frames(direct)), list(read_frames(threaded))
    assert len(a) == len(b) == N_FRAMES
    if fmt == "mp4":  # x264 need not give the same bytes twice (measured: not even on one
        # thread), so: every frame is there, in its place, the nearest to its own source frame
        source = [make_frame(i) for i in range(N_FRAMES)]

        def error(x: np.ndarray, y: np.ndarray) -> float:
            return float(np.abs(x.astype(int) - y).mean())

        for i, frame in enumerate(b):
            neighbours = [error(frame, source[j]) for j in (i - 1, i + 1) if 0 <= j < N_FRAMES]
            assert error(frame, source[i]) < min(neighbours), i
    else:
        assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_background_writer_error_reaches_the_caller_and_publishes_nothing(tmp_path):
    out = tmp_path / "bad.mp4"
    writer = BackgroundWriter(open_writer(out, fps=20))
    writer.write(make_frame(0))
    writer.write(make_frame(1, 32, 32))  # another size: refused on the encoding thread
    with pytest.raises(ValueError):
        for i in range(2, 10):
            writer.write(make_frame(i))
        writer.close()
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_background_writer_abort_leaves_the_old_file(tmp_path):
    out = tmp_path / "keep.gif"
    out.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="stop"):
        with BackgroundWriter(open_writer(out, fps=20, overwrite=True)) as writer:
            writer.write(make_frame(0))
            raise RuntimeError("stop")
    assert out.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["keep.gif"]


def test_finishing_publishes_every_output_or_none(tmp_path):
    def writers() -> list[Any]:
        return [BackgroundWriter(open_writer(tmp_path / "a.gif", fps=20, overwrite=True)),
                open_writer(tmp_path / "b.png.d/", fps=20, fmt="png", overwrite=True)]

    opened = writers()
    with pytest.raises(RuntimeError, match="stop"):
        with finishing(opened):
            for w in opened:
                w.write(make_frame(0))
            raise RuntimeError("stop")
    assert list(tmp_path.iterdir()) == []
    opened = writers()
    with pytest.raises(UsageError, match="No frames"):  # a failed close aborts the next ones
        with finishing(opened):
            opened[1].write(make_frame(0))
    assert list(tmp_path.iterdir()) == []
    opened = writers()
    with finishing(opened):
        for w in opened:
            w.write(make_frame(0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.gif", "b.png.d"]


# --- join_videos --------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["mp4", "webm"])
def test_join_videos_copies_every_part_in_order(tmp_path, fmt):
    parts = []
    for k, (first, stop) in enumerate([(0, 12), (12, 30), (30, N_FRAMES)]):
        path = tmp_path / f"part{k}.{fmt}"
        with open_writer(path, fps=20) as writer:
            for i in range(first, stop):
                writer.write(make_frame(i))
        parts.append(path)
    joined = tmp_path / f"joined.{fmt}"
    assert join_videos(parts, joined) == N_FRAMES
    frames = list(read_frames(joined))
    assert len(frames) == N_FRAMES
    # In order: each decoded frame is closest to its own source frame.
    for i, frame in enumerate(frames):
        errors = [np.abs(frame.astype(int) - make_frame(j)).mean() for j in range(N_FRAMES)]
        assert int(np.argmin(errors)) == i
    with av.open(str(joined)) as video:
        stream = video.streams.video[0]
        assert stream.average_rate == 20
        times = [float(f.pts * f.time_base) for f in video.decode(stream)]
    assert times == pytest.approx([i / 20 for i in range(N_FRAMES)], abs=1e-3)


def test_join_videos_refuses_bad_input(tmp_path):
    part = tmp_path / "a.mp4"
    write_video(part, "mp4", 48, 64)
    gif = tmp_path / "a.gif"
    write_video(gif, "gif", 48, 64)
    with pytest.raises(UsageError, match="Only mp4 and webm"):
        join_videos([gif], tmp_path / "j.gif")
    with pytest.raises(UsageError, match="must have the output's format"):
        join_videos([part, gif], tmp_path / "j.mp4")
    with pytest.raises(UsageError, match="already exists"):
        join_videos([part], part)
    assert not (tmp_path / "j.mp4").exists()
