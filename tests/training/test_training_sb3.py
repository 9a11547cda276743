"""TapeCallback and make_recorded_vec_env (rolltape.training.sb3): a real SB3 PPO run on
DummyVecEnv and SubprocVecEnv records tapes that replay to Monitor's returns, evaluates as
rolltape runs, keeps SB3's EvalCallback contract, and never stops training for a failure
of its own.

Real parts throughout: MuJoCo envs, render processes, SB3 training, a real full tmpfs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import rolltape
from conftest import fill
from rolltape import RenderRequest, Tape, render
from rolltape.errors import UsageError
from rolltape.training.background import RecordingWarning

ENV = "InvertedPendulum-v5"  # MuJoCo, tiny, random actions end episodes within ~5-20 steps
SMALL = {"width": 64, "height": 48}


@pytest.mark.parametrize("first", ["from", "attribute"])
def test_the_callback_imports_as_sb3_s_own_do(first: str) -> None:
    """``from rolltape.sb3 import TapeCallback`` and ``rolltape.sb3.TapeCallback``, in
    either order, are the one class."""
    import_from = "from rolltape.sb3 import TapeCallback, make_recorded_vec_env"
    steps = [import_from, "import rolltape; A = rolltape.sb3.TapeCallback"]
    code = "; ".join(steps if first == "from" else steps[::-1]) + (
        "; import rolltape.training.sb3 as t; "
        "print(A is TapeCallback is t.TapeCallback, callable(make_recorded_vec_env))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["True", "True"]


# -- SB3 ----------------------------------------------------------------------------------------

def _train(out: Path, vec: str) -> tuple[object, Path]:
    """192 steps of PPO on 2 Hopper sub-envs. DummyVecEnv: the callback adds the recorder
    (videos in the background) and evaluates once; SubprocVecEnv: the recipe's recorders
    in the sub-env processes, tapes only (their replays are verified by the test)."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.vec_env import SubprocVecEnv, VecNormalize

    torch.set_num_threads(1)
    if vec == "dummy":
        venv = make_vec_env("Hopper-v5", n_envs=2, seed=3,
                            env_kwargs={"max_episode_steps": 30})
        callback = rolltape.sb3.TapeCallback(
            record_every=4, eval_every=150, eval_episodes=2, eval_seed=100, out=out,
            record_options={**SMALL, "close_timeout": 120}, video_timeout=120)
    else:
        venv = rolltape.sb3.make_recorded_vec_env(
            "Hopper-v5", 2, seed=3, env_kwargs={"max_episode_steps": 30},
            vec_env_cls=SubprocVecEnv, out=out, record_every=2, render=False)
        callback = rolltape.sb3.TapeCallback(record_every=2, out=out)
    venv = VecNormalize(venv)
    model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0,
                device="cpu", policy_kwargs={"net_arch": [8]})
    model.set_logger(configure(str(out / "log"), ["csv", "tensorboard"]))
    model.learn(192, callback=callback)
    venv.close()  # waits for the sub-envs' videos
    return callback, out


@pytest.fixture(scope="module")
def dummy_run(tmp_path_factory: pytest.TempPathFactory):
    return _train(tmp_path_factory.mktemp("dummy"), "dummy")


@pytest.fixture(scope="module")
def subproc_run(tmp_path_factory: pytest.TempPathFactory):
    return _train(tmp_path_factory.mktemp("subproc"), "subproc")


@pytest.mark.parametrize("run", ["dummy_run", "subproc_run"])
def test_each_recorded_training_episode_replays_to_monitors_return(
        run: str, request: pytest.FixtureRequest) -> None:
    callback, out = request.getfixturevalue(run)
    assert len(callback.recorded) >= 2
    tapes = [Tape.load(row["tape"]) for row in callback.recorded]
    results = render([RenderRequest(row["tape"]) for row in callback.recorded])
    for row, tape, result in zip(callback.recorded, tapes, results):
        assert tape.length == row["monitor_length"]
        assert tape.total_return == pytest.approx(row["monitor_return"], abs=1e-5)  # Monitor rounds
        assert result.verified, result.divergence
        assert result.replay_return == tape.total_return  # exactly the tape's rewards
    assert any(t.seed is None and t.reset_rng is not None for t in tapes)  # autoreset
    if run == "dummy_run":  # its videos were drawn in the background, verified, off the loop
        for row, tape in zip(callback.recorded, tapes):
            assert row["video"] == str(Path(row["tape"]).with_suffix(".mp4"))
            record = json.loads(Path(f"{row['video']}.metadata.json").read_text())["result"]
            assert record["verified"] and record["frames"] == tape.length + 1
            assert record["replay_return"] == tape.total_return and record["niceness"] >= 10


def test_the_callback_evaluates_as_rolltape_runs(dummy_run) -> None:
    callback, out = dummy_run
    with np.load(out / "evaluations.npz") as npz:
        assert npz["timesteps"].tolist() == [e["step"] for e in callback.evaluations]
        assert npz["results"].shape == npz["ep_lengths"].shape == (len(callback.evaluations), 2)
    first = callback.evaluations[0]
    assert (Path(first["run"]) / "tapes" / "policy-0001.npz").is_file()
    assert Tape.load(Path(first["run"]) / "tapes" / "policy-0000.npz").seed == 100
    assert npz_mean(out) == pytest.approx(first["mean_reward"])
    progress = (out / "log" / "progress.csv").read_text().splitlines()[0].split(",")
    assert {"eval/mean_reward", "eval/mean_ep_length"} <= set(progress)
    assert (out / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    report = (out / "report.html").read_text()
    assert "timeline.png" in report and Path(callback.recorded[0]["video"]).name in report


def test_the_training_page_shows_every_episode_and_plays_the_recorded_ones(dummy_run) -> None:
    """Every training episode's return (Monitor) and the evaluations are drawn, each
    recorded episode's marker links to its verified video, played inline, and each
    evaluation links its run."""
    import re

    callback, out = dummy_run
    page = (out / "report.html").read_text()
    assert page.count("<script") == 0 and "style.css" not in page  # self-contained
    drawn = dict(re.findall(r'data-key="(\w+)" data-xs=\'([^\']*)\'', page))
    assert json.loads(drawn["episodes"]) == [float(s) for s, _, _ in callback.episodes]
    assert len(callback.episodes) == len(json.loads((out / "training.json").read_text())
                                         ["episodes"]) > len(callback.recorded)
    assert json.loads(drawn["evaluations"]) == [float(e["step"]) for e in callback.evaluations]
    for k, row in enumerate(callback.recorded):
        assert f'<a href="#video-{k}">' in page and f'id="video-{k}"' in page
        assert f'src="{Path(row["video"]).relative_to(out)}"' in page
    assert page.count("verified: the replay earned exactly what training earned") == \
        len(callback.recorded)
    for e in callback.evaluations:
        assert f'href="evals/{Path(e["run"]).name}/results.json"' in page


def test_a_rendered_training_video_reaches_tensorboard(dummy_run) -> None:
    """The video finishes in the background, often after SB3's last logger dump: the
    callback dumps it at the end of training, as an animated image of the recorded size."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    callback, out = dummy_run
    events = EventAccumulator(str(out / "log"), size_guidance={"images": 0})
    events.Reload()
    assert "train/video" in events.Tags()["images"]
    [*_, last] = events.Images("train/video")
    assert (last.width, last.height) == (SMALL["width"], SMALL["height"])
    assert last.encoded_image_string[:6] in (b"GIF87a", b"GIF89a")  # torch writes a GIF


def npz_mean(out: Path) -> float:
    with np.load(out / "evaluations.npz") as npz:
        return float(npz["results"][0].mean())


# -- the callback never stops training ------------------------------------------------------

def _ppo(venv: object, steps: int, callback: object) -> object:
    """A tiny real PPO run of ``steps`` steps (64 a rollout) with ``callback``."""
    import torch
    from stable_baselines3 import PPO

    torch.set_num_threads(1)
    model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0,
                device="cpu", policy_kwargs={"net_arch": [8]})
    model.learn(steps, callback=callback)
    return model


def _said(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, RecordingWarning)]


def test_an_eval_env_registered_only_in_the_script_is_said_at_the_start(tmp_path: Path) -> None:
    """A worker process does not run the training script: the env it registered cannot be
    made there. Said once, before the first rollout, with the fix; training goes on."""
    from stable_baselines3.common.env_util import make_vec_env

    gym.register("OnlyInThisScript-v0", max_episode_steps=20,
                 entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv")
    callback = rolltape.sb3.TapeCallback(record_every=None, eval_every=64, eval_episodes=2,
                                         out=tmp_path / "run")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = _ppo(make_vec_env("OnlyInThisScript-v0", n_envs=1, seed=0), 192, callback)
    [said] = _said(caught)
    assert "'OnlyInThisScript-v0' cannot be made in the evaluation's worker" in said
    assert "eval_env='module:OnlyInThisScript-v0'" in said and "training goes on" in said
    assert model.num_timesteps >= 192 and callback.evaluations == []
    assert callback.failures == {"evaluation": 1}  # checked once, no eval attempted after


def test_a_failing_eval_is_said_once_and_skipped(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The eval env's module disappears after the first evaluation: the later ones cannot
    make the env in their worker, training completes, evaluations.npz keeps the first."""
    from stable_baselines3.common.callbacks import BaseCallback, CallbackList
    from stable_baselines3.common.env_util import make_vec_env

    monkeypatch.chdir(tmp_path)
    module = tmp_path / "evalmod_once.py"
    module.write_text("import gymnasium as gym\ngym.register('EvalOnce-v0', max_episode_steps=20,"
                      " entry_point='gymnasium.envs.classic_control.cartpole:CartPoleEnv')\n")
    tape = rolltape.sb3.TapeCallback(record_every=None, eval_every=64, eval_episodes=2,
                                     out=tmp_path / "run", eval_env="evalmod_once:EvalOnce-v0")

    class RemoveModule(BaseCallback):
        def _on_step(self) -> bool:
            if tape.evaluations:
                module.unlink(missing_ok=True)
            return True

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = _ppo(make_vec_env("CartPole-v1", n_envs=1, seed=0), 256,
                     CallbackList([tape, RemoveModule()]))
    [said] = _said(caught)
    assert "could not evaluate at step 128" in said and "evalmod_once" in said
    assert model.num_timesteps >= 256 and tape.failures == {"evaluation": 3}
    with np.load(tmp_path / "run" / "evaluations.npz") as npz:
        assert npz["timesteps"].tolist() == [64] and npz["results"].shape == (1, 2)


def test_a_full_disk_skips_checkpoints_and_evals_not_training(small_disk: Path) -> None:
    """A real full tmpfs under ``out``: each checkpoint fails (nothing half-written stays),
    its eval is skipped, said once; training completes."""
    from stable_baselines3.common.env_util import make_vec_env

    out = small_disk / "run"
    out.mkdir()
    ballast = fill(small_disk, 0)
    callback = rolltape.sb3.TapeCallback(record_every=None, eval_every=64, eval_episodes=2,
                                         out=out)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = _ppo(make_vec_env("CartPole-v1", n_envs=1, seed=0), 192, callback)
    [said] = _said(caught)
    assert "could not save the checkpoint of step 64" in said and "No space left" in said
    assert model.num_timesteps >= 192 and callback.evaluations == []
    assert callback.failures["save"] >= 3 and "evaluation" not in callback.failures
    assert [p.name for p in out.rglob("*") if p.is_file()] == []  # no half-written zip
    ballast.unlink()
    callback.write_summary()  # with room again, the record is written
    assert json.loads((out / "training.json").read_text())["evaluations"] == []


# -- what users of EvalCallback expect ------------------------------------------------------

def test_stop_on_reward_threshold_stops_ppo_and_best_model_is_the_best_eval(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SB3's own StopTrainingOnRewardThreshold as callback_on_new_best, unchanged: a real
    PPO run on InvertedPendulum stops at the first evaluation that meets it."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import (
        StopTrainingOnNoModelImprovement,
        StopTrainingOnRewardThreshold,
    )
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import configure

    stop = StopTrainingOnRewardThreshold(reward_threshold=1.0, verbose=1)
    after = StopTrainingOnNoModelImprovement(max_no_improvement_evals=100)
    callback = rolltape.sb3.TapeCallback(
        record_every=None, eval_every=64, eval_episodes=2, out=tmp_path / "run",
        best_model_save_path=tmp_path / "best", callback_on_new_best=stop,
        callback_after_eval=after, verbose=1)
    import torch

    torch.set_num_threads(1)
    model = PPO("MlpPolicy", make_vec_env(ENV, n_envs=1, seed=0), n_steps=64, batch_size=64,
                n_epochs=1, seed=0, device="cpu", policy_kwargs={"net_arch": [8]})
    model.set_logger(configure(str(tmp_path / "log"), ["csv"]))
    model.learn(640, callback=callback)
    [first] = callback.evaluations  # every episode earns >= 1: met at the first evaluation
    assert model.num_timesteps == 64 and first["mean_reward"] >= 1.0 and first["best"]
    assert stop.parent is callback and callback.best_mean_reward == first["mean_reward"]
    assert callback.last_mean_reward == first["mean_reward"] and after.n_calls == 1
    said = capsys.readouterr().out
    assert "Eval num_timesteps=64" in said and "Stopping training because the mean reward" in said
    best = tmp_path / "best" / "best_model.zip"
    assert best.read_bytes() == Path(first["checkpoint"]).read_bytes()
    loaded = PPO.load(best, device="cpu")
    assert loaded.policy.state_dict().keys() == model.policy.state_dict().keys()
    progress = (tmp_path / "log" / "progress.csv").read_text().splitlines()[0].split(",")
    assert {"eval/mean_reward", "eval/mean_ep_length"} <= set(progress)


def test_best_model_follows_the_best_evaluation(tmp_path: Path) -> None:
    """Without a stop, best_model.zip is the checkpoint of the evaluation with the highest
    mean return so far, and best_mean_reward is that mean (SB3's numbers)."""
    from stable_baselines3.common.env_util import make_vec_env

    callback = rolltape.sb3.TapeCallback(record_every=None, eval_every=64, eval_episodes=2,
                                         out=tmp_path / "run",
                                         best_model_save_path=tmp_path / "best")
    _ppo(make_vec_env(ENV, n_envs=1, seed=0), 192, callback)
    means = [e["mean_reward"] for e in callback.evaluations]
    assert len(means) == 3 and callback.best_mean_reward == max(means)
    best = max(callback.evaluations, key=lambda e: (e["mean_reward"], -e["step"]))
    assert (tmp_path / "best" / "best_model.zip").read_bytes() == Path(
        best["checkpoint"]).read_bytes()
    assert [e.get("best", False) for e in callback.evaluations][0]
    with pytest.raises(UsageError, match="best_by"):
        rolltape.sb3.TapeCallback(best_by="return")


def test_a_tape_gone_before_its_video_is_logged_does_not_stop_training(tmp_path: Path) -> None:
    """The user clears the videos folder while training runs: the callback cannot read a
    recorded tape back at the rollout's end; said once, training completes."""
    from stable_baselines3.common.callbacks import BaseCallback, CallbackList
    from stable_baselines3.common.env_util import make_vec_env

    out = tmp_path / "run"
    tape = rolltape.sb3.TapeCallback(record_every=1, out=out,
                                     record_options={"render": False})

    class ClearVideos(BaseCallback):
        def _on_step(self) -> bool:
            for path in (out / "videos").glob("*.npz"):
                path.unlink()
            return True

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = _ppo(make_vec_env("CartPole-v1", n_envs=1, seed=0), 192,
                     CallbackList([tape, ClearVideos()]))
    [said] = _said(caught)
    assert "could not put the newest training video into the logger" in said
    assert "does not exist" in said and model.num_timesteps >= 192
    assert len(tape.recorded) > 3 and tape.failures["video"] >= 2
