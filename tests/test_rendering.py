"""The orchestrator's side of pass 2 (rolltape.rendering): long episodes are cut into
segments that cover every frame once, segment outputs never collide with the requested
ones, bad requests are refused before any worker starts, and a render writes its records
beside its outputs with paths relative to them. (Drawing and verifying: tests/pass2/.)"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from rolltape.envs.build import make_env
from rolltape.envs.ids import env_spec
from rolltape.errors import UsageError
from rolltape.pass1.rollout import record_episode
from rolltape.pass2.replay import RenderRequest
from rolltape.policies import load_policy
from rolltape.rendering import MIN_SEGMENT, _segment_outputs, check_requests, plan_segments, render
from rolltape.tape import Tape


def tape_of(env_id: str, steps: int, path: Path) -> str:
    spec = env_spec(env_id, max_episode_steps=steps)
    env = make_env(spec)
    fields = record_episode(env, load_policy("random", env), seed=3)
    env.close()
    return str(Tape(env=spec, **fields).save(path))


@pytest.fixture(scope="module")
def cheetah(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A MuJoCo tape of 200 steps (201 frames), with its physics: it can be split."""
    return tape_of("HalfCheetah-v5", 200, tmp_path_factory.mktemp("tapes") / "c.npz")


def request(tape: str, *outputs: str, **options: object) -> RenderRequest:
    return RenderRequest(tape, outputs, **options)  # type: ignore[arg-type]


def test_a_long_episode_is_cut_into_segments_that_cover_each_frame_once(cheetah: str,
                                                                         tmp_path: Path) -> None:
    req = request(cheetah, str(tmp_path / "v.mp4"))
    jobs = plan_segments([req], workers=4)
    assert [i for i, _ in jobs] == [0] * 4  # 201 frames // 50 allows 4 segments
    ranges = [job.frames for _, job in jobs]
    assert ranges[0][0] == 0 and ranges[-1][1] == 201
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # contiguous, no overlap
    assert all(stop - first >= MIN_SEGMENT for first, stop in ranges)
    outputs = [job.outputs for _, job in jobs]
    assert len(set(outputs)) == 4 and all(job.overwrite for _, job in jobs)
    assert str(tmp_path / "v.mp4") not in {o for out in outputs for o in out}


def test_workers_are_shared_out_among_the_requests(cheetah: str, tmp_path: Path) -> None:
    reqs = [request(cheetah, str(tmp_path / "a.mp4")), request(cheetah, str(tmp_path / "b.mp4"))]
    assert [i for i, _ in plan_segments(reqs, workers=4)] == [0, 0, 1, 1]
    assert plan_segments(reqs, workers=2) == [(0, reqs[0]), (1, reqs[1])]


@pytest.mark.parametrize("options", [{"layout": "separate", "cameras": ("default", "free")},
                                     {"mode": "auto"}])
def test_what_cannot_be_joined_is_not_split(cheetah: str, tmp_path: Path,
                                            options: dict[str, object]) -> None:
    req = request(cheetah, str(tmp_path / "v.mp4"), **options)
    assert plan_segments([req], workers=8) == [(0, req)]


def test_a_verification_a_short_episode_or_one_without_states_is_not_split(
        cheetah: str, tmp_path: Path) -> None:
    verify_only = request(cheetah)
    short = request(tape_of("HalfCheetah-v5", 60, tmp_path / "s.npz"), str(tmp_path / "s.mp4"))
    stateless = request(tape_of("CartPole-v1", 200, tmp_path / "p.npz"), str(tmp_path / "p.mp4"))
    for req in (verify_only, short, stateless):
        assert plan_segments([req], workers=8) == [(0, req)]


def test_videos_get_a_segment_each_and_frame_formats_share_one_png_folder() -> None:
    parts = _segment_outputs(["out/v.mp4", "out/v.webm", "out/v.gif", "out/frames/"], 2)
    mp4, webm, lossless = parts
    assert Path(mp4).parent == Path("out") and mp4.endswith(".mp4") and ".v.segment2-" in mp4
    assert webm.endswith(".webm") and lossless.endswith("/") and ".segment2-" in lossless
    assert len(_segment_outputs(["out/v.gif", "out/frames/"], 0)) == 1  # both read one folder
    assert _segment_outputs(["a.mp4"], 0) != _segment_outputs(["a.mp4"], 1)


def test_check_requests_returns_the_backend_order(cheetah: str, tmp_path: Path) -> None:
    req = request(cheetah, str(tmp_path / "v.mp4"))
    assert check_requests([req], "osmesa,egl") == ["osmesa", "egl"]


def test_an_existing_output_is_refused_unless_overwritten(cheetah: str, tmp_path: Path) -> None:
    (tmp_path / "v.gif").write_bytes(b"old")
    with pytest.raises(UsageError, match="already exists; pass --overwrite"):
        check_requests([request(cheetah, str(tmp_path / "v.gif"))], "egl")
    check_requests([request(cheetah, str(tmp_path / "v.gif"), overwrite=True)], "egl")


def test_an_unknown_suffix_or_backend_or_worker_count_is_refused(cheetah: str,
                                                                 tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="avi"):
        check_requests([request(cheetah, str(tmp_path / "v.avi"))], "egl")
    with pytest.raises(UsageError, match="vulkan"):
        check_requests([request(cheetah)], "vulkan")
    with pytest.raises(UsageError, match="--render-workers must be at least 1"):
        check_requests([request(cheetah)], "egl", workers=0)


def test_a_tape_naming_code_that_is_no_env_package_needs_the_env_named(tmp_path: Path) -> None:
    tape = tape_of("CartPole-v1", 5, tmp_path / "t.npz")
    loaded = Tape.load(tape)
    named = replace(loaded, env={**loaded.env, "id": "evilmod:Cart-v0"})
    path = str(named.save(tmp_path / "evil.npz"))
    with pytest.raises(UsageError, match="names the env code 'evilmod'.*--env evilmod:Cart-v0"):
        check_requests([request(path)], "egl")
    check_requests([request(path, env_id="CartPole-v1")], "egl")  # named by the user: allowed


def test_a_render_writes_its_outputs_and_records_beside_them(tmp_path: Path) -> None:
    tape = tape_of("CartPole-v1", 10, tmp_path / "t.npz")
    out = tmp_path / "videos"
    out.mkdir()
    [result] = render([request(tape, str(out / "v.gif"), str(out / "v.jsonl"))])
    assert result is not None and result.verified and result.frames == 11
    assert result.outputs == (str(out / "v.gif"), str(out / "v.jsonl"))
    rows = (out / "v.jsonl").read_text().splitlines()
    assert rows and json.loads(rows[0])  # the data output, written here from the tape
    for name in ("v.gif", "v.jsonl"):
        record = json.loads((out / f"{name}.metadata.json").read_text())
        assert record["tape"]["path"] == "../t.npz"  # relative to the outputs' folder
        assert record["result"]["outputs"] == ["v.gif", "v.jsonl"]
        assert record["result"]["verified"] is True and len(record["tape"]["sha256"]) == 64


def test_a_verification_writes_nothing(tmp_path: Path) -> None:
    tape = tape_of("CartPole-v1", 10, tmp_path / "t.npz")
    [result] = render([request(tape)])
    assert result is not None and result.verified and result.outputs == ()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.npz"]
