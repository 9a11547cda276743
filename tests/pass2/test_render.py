"""Pass 2 as rendering runs it: real render workers under Mesa (EGL, OSMesa), a backend that
fails falling back to the next, and long episodes drawn as segments joined frame for frame.
The replay itself (modes, verification, divergence) is tested in test_replay.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tests.conftest import altered

from rolltape import RenderRequest, Tape, UsageError, render
from rolltape.pass2.encode import count_frames, read_frames


@pytest.fixture(scope="module")
def tape_path(random_run):
    return random_run.path / random_run.results.to_json()["episodes_rows"][1]["tape"]


@pytest.fixture(scope="module")
def long_tape(tmp_path_factory):
    """A 120-step random episode: long enough to split into segments of MIN_SEGMENT frames."""
    from rolltape import evaluate

    run = evaluate("HalfCheetah-v5", "random", episodes=1, seed=3, max_episode_steps=120,
                   out=tmp_path_factory.mktemp("long") / "run", report=False)
    return run.path / run.results.to_json()["episodes_rows"][0]["tape"]


@pytest.mark.parametrize("backend", ["egl", "osmesa"])
def test_replay_earns_exactly_what_pass_one_earned(tape_path, tmp_path, backend):
    tape = Tape.load(tape_path)
    out = tmp_path / f"{backend}.mp4"
    [result] = render([RenderRequest(str(tape_path), (str(out),), width=96, height=64)],
                      backends=backend)
    assert result.backend == backend and result.verified is True and result.divergence is None
    assert result.replay_return == tape.total_return
    assert result.frames == tape.length + 1 == count_frames(out)
    assert not result.torch_loaded  # the render worker never imports a policy framework


def test_run_video_matches_its_tape(random_run):
    [video] = random_run.results.to_json()["videos"]
    tape = Tape.load(random_run.path / video["tape"])
    assert video["verified"] is True and video["frames"] == tape.length + 1
    assert count_frames(random_run.path / video["path"]) == tape.length + 1


def test_unusable_first_backend_falls_back(tape_path, tmp_path, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    [result] = render([RenderRequest(str(tape_path), (str(tmp_path / "a.gif"),),
                                     width=64, height=64)], backends="glfw,osmesa")
    assert result.backend == "osmesa" and result.verified
    assert [b for b, _ in result.failures] == ["glfw"]
    assert count_frames(tmp_path / "a.gif") == result.frames


@pytest.mark.parametrize("fault, reason", [("crash", "SIGSEGV"), ("hang", "hung")])
def test_crashing_or_hanging_backend_fails_only_its_tape(tape_path, tmp_path, monkeypatch,
                                                         fault, reason):
    # A real driver segfault or hang cannot be caused on demand: ROLLTAPE_FAULT injects one.
    monkeypatch.setenv("ROLLTAPE_FAULT", f"{fault}:egl")
    reqs = [RenderRequest(str(tape_path), (str(tmp_path / f"{k}.mp4"),), width=64, height=64)
            for k in range(2)]
    results = render(reqs, backends="egl,osmesa", timeout=8)
    assert [r.backend for r in results] == ["osmesa", "osmesa"]
    assert reason in results[0].failures[0][1]
    assert all(r.verified for r in results)


def test_every_backend_failing_names_each_reason(tape_path, tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLTAPE_FAULT", "crash:osmesa")
    monkeypatch.delenv("DISPLAY", raising=False)
    with pytest.raises(UsageError) as info:
        render([RenderRequest(str(tape_path), (str(tmp_path / "x.mp4"),))],
               backends="glfw,osmesa")
    message = str(info.value)
    assert "glfw:" in message and "osmesa:" in message and "rolltape doctor" in message
    assert not (tmp_path / "x.mp4").exists() and list(tmp_path.iterdir()) == []


def test_segments_joined_match_the_unsplit_render_frame_for_frame(long_tape, tmp_path):
    tape = Tape.load(long_tape)
    assert tape.physics is not None  # pass 1 records the full integration state
    whole, = render([RenderRequest(str(long_tape), (str(tmp_path / "whole/"),), width=80,
                                   height=60)], workers=1)
    # MIN_SEGMENT (50) frames per segment at least, however many workers there are
    split, = render([RenderRequest(str(long_tape), (str(tmp_path / "split/"),), width=80,
                                   height=60)], workers=8)
    assert split.segments == (tape.length + 1) // 50 == 2
    assert split.frames == whole.frames == tape.length + 1
    assert split.verified is True and split.replay_return == tape.total_return
    a, b = list(read_frames(tmp_path / "whole")), list(read_frames(tmp_path / "split"))
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
    left = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".metadata.json"))
    assert left == ["split", "whole"]  # no segment folder left behind


def test_segment_videos_are_joined_by_copying_packets(long_tape, tmp_path):
    """mp4/webm segments are joined without re-encoding (each part keeps its opening
    keyframe), so they are as close to the drawn frames as an unsplit video; gif is drawn
    from the segments' lossless frames, so it equals the unsplit one byte for byte."""
    import av

    tape = Tape.load(long_tape)
    outs = {k: (*(str(tmp_path / f"{k}.{f}") for f in ("mp4", "webm", "gif")),
                str(tmp_path / k) + "/") for k in ("whole", "split")}
    whole, = render([RenderRequest(str(long_tape), outs["whole"], width=80, height=60)])
    split, = render([RenderRequest(str(long_tape), outs["split"], width=80, height=60)],
                    workers=2)
    assert split.segments == 2 and split.frames == whole.frames == tape.length + 1
    drawn = list(read_frames(tmp_path / "whole"))
    assert all(np.array_equal(x, y) for x, y in zip(drawn, read_frames(tmp_path / "split")))
    for fmt in ("mp4", "webm"):
        error = {}
        for k in ("whole", "split"):
            frames = list(read_frames(tmp_path / f"{k}.{fmt}"))
            assert len(frames) == tape.length + 1, (fmt, k)
            error[k] = max(np.abs(x.astype(int) - y).mean() for x, y in zip(frames, drawn))
        assert error["split"] <= 1.2 * error["whole"], (fmt, error)
        with av.open(str(tmp_path / f"split.{fmt}")) as video:
            keys = [p.is_keyframe for p in video.demux(video=0) if p.dts is not None]
        assert keys[0] and sum(keys) == 2, fmt  # one opening keyframe per segment
    assert (tmp_path / "split.gif").read_bytes() == (tmp_path / "whole.gif").read_bytes()
    left = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".metadata.json"))
    assert left == sorted(Path(p.rstrip("/")).name for o in outs.values() for p in o)


def test_segments_of_an_altered_tape_report_the_first_divergence(long_tape, tmp_path):
    bad = altered(long_tape, tmp_path, step=80)  # in the second segment
    [result] = render([RenderRequest(bad, (str(tmp_path / "s/"),), width=64, height=48)],
                      workers=4)
    assert result.segments == 2
    assert result.verified is False and result.divergence.step == 80


@pytest.mark.parametrize("mode", ["resim", "restore"])
def test_atari_segments_continue_from_recorded_emulator_states(tmp_path, mode):
    """A long Atari episode is split across workers too: each segment restores ALE's state
    (its RNG included, so Pong-v5's sticky actions repeat as in pass 1) and its frames are
    the unsplit replay's, verified."""
    from rolltape import evaluate

    run = evaluate("ALE/Pong-v5", "random", episodes=1, seed=5, max_episode_steps=160,
                   out=tmp_path / "run", report=False)
    path = run.tape_path(run.results.episodes[0])
    tape = Tape.load(path)
    assert tape.has_ale_state and tape.physics is None and tape.length == 160
    whole, = render([RenderRequest(str(path), (str(tmp_path / "whole/"),), mode=mode)])
    split, = render([RenderRequest(str(path), (str(tmp_path / "split/"),), mode=mode)],
                    workers=3)
    assert split.segments == 3 and split.frames == whole.frames == tape.length + 1
    assert split.verified is whole.verified is (True if mode == "resim" else None)
    a, b = list(read_frames(tmp_path / "whole")), list(read_frames(tmp_path / "split"))
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
