"""`rolltape export --to lerobot --camera track --renderer mjwarp` (issue 41's last command):
the camera videos of a LeRobotDataset drawn by MuJoCo Warp's batch renderer from the tapes'
recorded states, on Warp's CPU device here.

- 3 random HalfCheetah episodes of 20 steps at 64x64: lerobot itself loads the dataset
  (one frame per step), its non-camera data is byte for byte what an export without the
  renderer writes (the same verified replays), the frames the encoder got are exactly
  those ``render --renderer mjwarp`` draws (``pass2.batch``) for the same tapes (their
  per-episode image statistics, taken before encoding, are equal number for number; the
  decoded AV1 frames are within the codec's noise of them), and the metadata
  (info.json's feature, rolltape.json) says a ray tracer drew them, not env.render();
- an interrupted export resumes without drawing again, to the same files;
- what it cannot do is refused in one sentence, exit 2, with nothing written.

Warp's kernels: the session's cache (tests/conftest.py's ``warp_kernels``), which the
export's drawing process finds through WARP_CACHE_PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

from conftest import ENV_ID, ROOT, rewrite_tape, run_cli
from rolltape import Run, UsageError, evaluate, export
from rolltape.pass2.batch import MISSING_EXTRA, RAY_TRACED, BatchRequest, render_batch
from rolltape.pass2.export import ImageStats, sample_indices

LEROBOT_PYTHON = Path(os.environ.get("LEROBOT_VENV", ROOT / ".venv-lerobot")) / "bin" / "python"
READER = ROOT / "tests" / "assets" / "lerobot_reader.py"
STEPS = 20
SIZE = 64
KEY = "observation.images.track"

pytestmark = pytest.mark.usefixtures("warp_kernels")


@pytest.fixture(scope="module")
def cheetah_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    out = tmp_path_factory.mktemp("mjwarp-export") / "cheetah"
    evaluate(ENV_ID, "random", episodes=3, seed=11, max_episode_steps=STEPS, out=out,
             report=False)
    return Run.load(out)


@pytest.fixture(scope="module")
def exported(cheetah_run: Run, tmp_path_factory: pytest.TempPathFactory):
    """The run exported with MuJoCo Warp's frames, and what lerobot reads of it."""
    out = tmp_path_factory.mktemp("mjwarp-export") / "ds"
    outcome = export(cheetah_run, to="lerobot", out=out, cameras=("track",), width=SIZE,
                     height=SIZE, renderer="mjwarp", workers=2)
    assert LEROBOT_PYTHON.is_file(), "run `bash scripts/setup.sh --test` (it makes .venv-lerobot)"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_HOME": str(out.parent / "hf-home")}
    frames = [0, STEPS + 5]
    done = subprocess.run([str(LEROBOT_PYTHON), str(READER), str(out), "rolltape/ds",
                           str(out.parent / "read.npz"), *map(str, frames)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(out.parent / "read.npz") as data:
        read = {name: data[name] for name in data.files}
    return outcome, out, read, frames


@pytest.fixture(scope="module")
def drawn(cheetah_run: Run, tmp_path_factory: pytest.TempPathFactory) -> list[list[np.ndarray]]:
    """Each episode's frames as ``render --renderer mjwarp`` draws them (PNGs: exact)."""
    out = tmp_path_factory.mktemp("mjwarp-render")
    tapes = tuple(str(cheetah_run.tape_path(e)) for e in cheetah_run.results.episodes)
    render_batch(BatchRequest(tapes=tapes, outputs=tuple((f"{out}/{i}/",) for i in
                                                         range(len(tapes))),
                              width=SIZE, height=SIZE, camera="track"))
    return [[np.asarray(Image.open(p)) for p in sorted((out / str(i)).glob("*.png"))]
            for i in range(len(tapes))]


def test_lerobot_loads_it_and_its_metadata_says_a_ray_tracer_drew_it(exported):
    outcome, out, read, frames = exported
    assert outcome.episodes == 3 and not outcome.left_out
    assert "ray tracer" in (outcome.drawn_by or "")
    assert int(read["len"]) == 3 * STEPS and int(read["episodes"]) == 3
    features = json.loads(str(read["features"]))
    assert features[KEY]["shape"] == [SIZE, SIZE, 3]
    info = features[KEY]["info"]
    assert info["rolltape.renderer"] == "mujoco_warp"
    assert info["rolltape.images"] == f"camera 'track' {RAY_TRACED}"
    assert "not env.render()'s" in info["rolltape.images"]
    renderer = json.loads((out / "meta" / "rolltape.json").read_text())["renderer"]
    assert renderer["name"] == "mujoco_warp" and renderer["cameras"] == ["track"]
    assert renderer["device"] == "cpu" and (renderer["width"], renderer["height"]) == (SIZE, SIZE)
    for index in frames:
        assert read[f"image_{index}_{KEY}"].shape == (SIZE, SIZE, 3)


def test_the_data_is_what_the_verified_replays_give(cheetah_run, exported, tmp_path):
    """Everything but the videos' pictures is what an export without the renderer (and
    without a camera) writes: the frames change, the verified data does not."""
    _, out, _, _ = exported
    plain = tmp_path / "plain"
    export(cheetah_run, to="lerobot", out=plain, workers=2)
    data = "data/chunk-000/file-000.parquet"
    assert pq.read_table(out / data).equals(pq.read_table(plain / data))


def test_the_frames_are_the_batch_renderers(exported, drawn):
    """One video frame per step, decoded within AV1's noise of what pass2.batch draws for
    the same tapes; the frames the encoder got are those very frames (their per-episode
    statistics, computed before encoding, are equal number for number)."""
    _, out, _, _ = exported
    rows = pq.read_table(out / "meta" / "episodes" / "chunk-000" / "file-000.parquet").to_pylist()
    for k, frames in enumerate(drawn):
        assert len(frames) == STEPS + 1  # render draws the last state too; a dataset not
        video = out / "videos" / KEY / "chunk-000" / f"file-{k:03d}.mp4"
        with av.open(str(video)) as container:
            decoded = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
        assert len(decoded) == STEPS
        for step, image in enumerate(decoded):
            error = np.abs(image.astype(np.int16) - frames[step].astype(np.int16)).mean()
            assert error < 8, (k, step, error)  # AV1 at crf 30
        stats = ImageStats()
        for i in sample_indices(STEPS):
            stats.add(frames[i])
        for name, value in stats.result().items():
            np.testing.assert_array_equal(np.asarray(rows[k][f"stats/{KEY}/{name}"]), value,
                                          err_msg=name)


@pytest.mark.parametrize(("flags", "words"), [
    (("--camera", "track", "--renderer", "vulkan"), "Unknown renderer 'vulkan' (--renderer)"),
    (("--renderer", "mjwarp"), "no --camera was given"),
    (("--camera", "track", "--camera", "back", "--renderer", "mjwarp"), "give --camera once"),
    (("--to", "minari", "--id", "me/c-v0", "--camera", "track", "--renderer", "mjwarp"),
     "only --to lerobot stores"),
    (("--camera", "default", "--renderer", "mjwarp"),
     "MuJoCo Warp draws only the model's own cameras; give one of HalfCheetah-v5's: track."),
    (("--camera", "side", "--renderer", "mjwarp"), "has no camera 'side'"),
])
def test_refusals_in_one_sentence_with_nothing_written(cheetah_run, tmp_path, flags, words):
    out = tmp_path / "ds"
    to = () if "--to" in flags else ("--to", "lerobot")
    result = run_cli("export", str(cheetah_run.path), *to, "--out", str(out), *flags)
    assert result.returncode == 2, result.stderr
    assert words in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert list(tmp_path.iterdir()) == []  # no dataset, no staging folder


def test_a_tape_without_state_is_refused_before_any_replay(cheetah_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(cheetah_run.path, run)
    tape = run / "tapes" / "policy-0001.npz"

    def strip(arrays: dict, header: dict) -> None:
        for name in ("qpos", "qvel", "physics"):
            arrays.pop(name, None)

    rewrite_tape(tape, tape, strip)
    with pytest.raises(UsageError, match=r"policy-0001.npz' holds no MuJoCo state"):
        export(run, to="lerobot", out=tmp_path / "ds", cameras=("track",), renderer="mjwarp")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_missing_extra_is_refused_before_any_work(cheetah_run, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mujoco_warp", None)  # as if not installed
    with pytest.raises(UsageError) as info:
        export(cheetah_run, to="lerobot", out=tmp_path / "ds", cameras=("track",),
               renderer="mjwarp")
    assert str(info.value) == MISSING_EXTRA
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_export_resumes_without_drawing_again(cheetah_run, exported, tmp_path,
                                                             monkeypatch):
    """Stopped after its first replay, the export keeps its staging folder with every
    episode's video drawn; the same call resumes, draws nothing again (no drawing process
    is started) and writes the dataset an uninterrupted export writes."""
    _, whole, _, _ = exported
    out = tmp_path / "ds"
    options = dict(to="lerobot", out=out, cameras=("track",), width=SIZE, height=SIZE,
                   renderer="mjwarp", workers=1)

    def stop(_: object) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        export(cheetah_run, on_episode=stop, **options)
    staging = tmp_path / ".ds.export-partial"
    assert len(list((staging / "episodes").glob("*.frames.npz"))) == 3 and not out.exists()

    def no_drawing(*_: object, **__: object) -> None:
        raise AssertionError("the episodes were drawn again")

    monkeypatch.setattr("rolltape.interpreter.run_once", no_drawing)
    outcome = export(cheetah_run, **options)
    assert outcome.resumed >= 1 and outcome.episodes == 3 and not staging.exists()
    for k in range(3):
        video = Path("videos") / KEY / "chunk-000" / f"file-{k:03d}.mp4"
        assert (out / video).read_bytes() == (whole / video).read_bytes()
    data = "data/chunk-000/file-000.parquet"
    assert pq.read_table(out / data).equals(pq.read_table(whole / data))
