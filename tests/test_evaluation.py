"""rolltape.evaluate, the orchestrator's one entry point: options are EvalConfig's fields,
every number comes from pass 1, the run folder is staged and committed whole."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rolltape.errors import UsageError
from rolltape.evaluation import evaluate
from rolltape.tape import Tape

ENV = "CartPole-v1"


def test_a_run_holds_one_tape_per_episode_and_its_config(tmp_path: Path) -> None:
    run = evaluate(ENV, "random", episodes=3, seed=7, max_episode_steps=20, report=False,
                   out=tmp_path / "run")
    assert run.path == tmp_path / "run" and not (tmp_path / ".run.partial").exists()
    assert sorted(p.name for p in (run.path / "tapes").iterdir()) == [
        "policy-0000.npz", "policy-0001.npz", "policy-0002.npz"]
    rows = [json.loads(line) for line in (run.path / "episodes.jsonl").read_text().splitlines()]
    assert [r["seed"] for r in rows] == [7, 8, 9]  # episode i is reset with seed + i
    config = json.loads((run.path / "metadata.json").read_text())["config"]
    assert (config["episodes"], config["seed"], config["max_episode_steps"]) == (3, 7, 20)
    tapes = [Tape.load(run.path / "tapes" / f"policy-{i:04d}.npz") for i in range(3)]
    assert [e.ret for e in run.results.episodes] == [t.total_return for t in tapes]


def test_an_unknown_option_is_a_type_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="episodez"):
        evaluate(ENV, "random", episodez=3, out=tmp_path / "x")  # type: ignore[call-arg]
    assert not (tmp_path / "x").exists()


def test_a_bad_option_is_refused_before_any_folder_is_made(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--episodes"):
        evaluate(ENV, "random", episodes=0, out=tmp_path / "deep" / "x")
    with pytest.raises(UsageError, match="--mode"):
        evaluate(ENV, "random", mode="sideways", out=tmp_path / "deep" / "x")
    assert not (tmp_path / "deep").exists()


def test_rays_older_keywords_become_executor_options(tmp_path: Path) -> None:
    # ray_address=None, ray_render_gpus=0: what the CLI passes when Ray is not asked for.
    run = evaluate(ENV, "random", episodes=1, max_episode_steps=5, report=False,
                   ray_address=None, ray_render_gpus=0.0, out=tmp_path / "run")
    config = json.loads((run.path / "metadata.json").read_text())["config"]
    assert config["executor"] == "local" and config["executor_options"] == {}


def test_more_workers_than_episodes_is_clamped_and_tapes_do_not_change(tmp_path: Path) -> None:
    one = evaluate(ENV, "random", episodes=2, max_episode_steps=30, report=False,
                   out=tmp_path / "one")
    many = evaluate(ENV, "random", episodes=2, max_episode_steps=30, report=False, workers=5,
                    out=tmp_path / "many")
    assert json.loads((many.path / "metadata.json").read_text())["config"]["workers"] == 2
    for name in ("policy-0000.npz", "policy-0001.npz"):
        a, b = Tape.load(one.path / "tapes" / name), Tape.load(many.path / "tapes" / name)
        assert a.seed == b.seed and np.array_equal(a.actions, b.actions)
        assert np.array_equal(a.rewards, b.rewards) and np.array_equal(a.obs_digest, b.obs_digest)
