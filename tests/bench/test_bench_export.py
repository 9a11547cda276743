"""The cheap parts of the export benchmarks (rolltape.bench.export): the run they export is
made once per bench run, and the children each side of a row runs (here in this process,
on two 5-step HalfCheetah episodes) do the same work: the bare loop regenerates exactly
the observations pass 1 digested, and the export's Minari dataset holds those very arrays.
No benchmark runs."""

from __future__ import annotations

from pathlib import Path

import minari
import numpy as np
import pytest

from rolltape import Run, Tape
from rolltape.bench.common import ENV_ID, FULL, QUICK, Context
from rolltape.bench.export import (
    _run,
    _sizes,
    bare_replay_child,
    export_obs_child,
    export_rss_child,
)
from rolltape.pass2.replay import first_wrong_digest

EPISODES, STEPS = 2, 5


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> Context:
    return Context(QUICK, tmp_path_factory.mktemp("bench"), lambda line: None)


@pytest.fixture(scope="module")
def run(ctx: Context) -> Path:
    return _run(ctx, EPISODES, STEPS)


@pytest.fixture(scope="module")
def bare(run: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    out = tmp_path_factory.mktemp("bare") / "bare.npz"
    assert bare_replay_child(str(run), str(out)) == {"episodes": EPISODES}
    with np.load(out) as saved:
        return {name: saved[name] for name in saved.files}


def test_quick_sizes_are_no_larger_than_full_ones(tmp_path: Path):
    quick, full = _sizes(Context(QUICK, tmp_path, print)), _sizes(Context(FULL, tmp_path, print))
    assert set(quick) == set(full)
    assert all(0 < quick[k] <= full[k] for k in quick)
    assert quick["rss_small"] < quick["rss_large"] and full["rss_small"] < full["rss_large"]


def test_the_run_is_made_once_per_size(ctx: Context, run: Path):
    assert _run(ctx, EPISODES, STEPS) == run
    loaded = Run.load(run)
    assert loaded.results.env_id == ENV_ID
    assert [e.length for e in loaded.results.episodes] == [STEPS] * EPISODES
    other = _run(ctx, 1, STEPS)
    assert other != run and _run(ctx, 1, STEPS) == other
    assert sorted(p.name for p in ctx.work.iterdir()) == [p.name for p in sorted((run, other))]


def test_the_bare_loop_regenerates_the_observations_pass_1_digested(run: Path, bare):
    loaded = Run.load(run)
    for episode in loaded.results.episodes:
        tape = Tape.load(loaded.tape_path(episode))
        k = episode.key.index
        assert bare[f"obs{k}"].shape == (STEPS + 1, 17)
        assert first_wrong_digest(tape, list(bare[f"obs{k}"]), 0.0, 0.0) is None
        assert np.array_equal(bare[f"actions{k}"], tape.actions)
        assert np.array_equal(bare[f"rewards{k}"], tape.rewards)


def test_the_export_child_writes_the_arrays_the_bare_loop_collects(run: Path, bare, tmp_path,
                                                                   monkeypatch):
    done = export_obs_child(str(run), str(tmp_path / "ds"), "bench-v0")
    assert done == {"episodes": EPISODES, "steps": EPISODES * STEPS, "left_out": []}
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "ds"))
    dataset = minari.load_dataset("bench-v0")
    for k, episode in enumerate(dataset.iterate_episodes()):
        assert np.array_equal(episode.observations, bare[f"obs{k}"])
        assert np.array_equal(episode.actions, bare[f"actions{k}"])
        assert np.array_equal(episode.rewards, bare[f"rewards{k}"])


def test_the_rss_child_exports_and_reports_peaks_in_megabytes(run: Path, tmp_path: Path):
    peaks = export_rss_child(str(run), str(tmp_path / "ds"))
    assert (tmp_path / "ds" / "rss-v0" / "data" / "metadata.json").is_file()
    assert sorted(peaks) == ["children_mb", "self_mb"]
    # This process holds numpy, MuJoCo and pyarrow: tens of MB at least, and not gigabytes.
    assert 30 < peaks["self_mb"] < 4000 and 0 < peaks["children_mb"] < 4000


def test_the_rss_child_with_a_camera_writes_a_lerobot_dataset_with_videos(run: Path,
                                                                           tmp_path: Path):
    peaks = export_rss_child(str(run), str(tmp_path / "out"), camera=True)
    ds = tmp_path / "out" / "ds"
    assert (ds / "meta" / "info.json").is_file()
    videos = sorted(ds.glob("videos/observation.images.default/chunk-000/*.mp4"))
    assert len(videos) == EPISODES
    assert 30 < peaks["self_mb"] < 4000 and 0 < peaks["children_mb"] < 4000
