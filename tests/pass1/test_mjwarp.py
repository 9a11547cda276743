"""Pass 1 on MuJoCo Warp (issue 41) on the CPU (Warp's "cpu" device; no GPU anywhere).

- 64 worlds under a fixed linear policy: per-world returns and lengths equal those of a plain
  MJWarp stepping loop whose rewards come from Gymnasium's own reward code; each world is an
  ordinary tape that pass 2 verifies exactly on MJWarp (HalfCheetah's replay on CPU MuJoCo
  with Gymnasium stays close to it);
- ``rolltape eval --simulator mjwarp`` (a real subprocess): a tape per episode, numbers as the
  tapes say, every tape verified exactly by ``rolltape verify`` (re-simulated on MJWarp:
  observations and states), a tape whose state was edited is caught at that step, and
  ``verify --flips`` reports the same tapes against CPU MuJoCo;
- what ``--simulator mjwarp`` cannot do is refused in one sentence before any work.

Warp's kernels are compiled once per test session into a fresh folder (tests/conftest.py's
``warp_kernels``, passed to subprocesses as WARP_CACHE_PATH).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from conftest import run_cli
from rolltape.envs.mjwarp import MJWarpEnv
from rolltape.pass1.mjwarp import play, world_tapes
from rolltape.pass2.replay import Replayer, verify_mjwarp
from rolltape.pass2.request import RenderRequest
from rolltape.tape import Tape

pytestmark = pytest.mark.usefixtures("warp_kernels")

ENVS = ("HalfCheetah-v5", "Ant-v5")


def linear_policy(obs_dim: int, action_dim: int) -> Callable[[np.ndarray], np.ndarray]:
    """A fixed linear policy, applied row by row (a batched matrix product could round
    differently from one row's, and both loops below must see the same actions)."""
    weights = np.random.default_rng(7).normal(0.0, 0.1, (action_dim, obs_dim))
    return lambda obs: np.stack([np.clip(weights @ row, -1, 1) for row in obs]).astype(np.float32)


def plain_loop(env_id: str, act: Callable[[np.ndarray], np.ndarray], seed: int, worlds: int,
               steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-world (returns, lengths) from mujoco_warp's own API, with each world's reward,
    observation and termination computed by Gymnasium's env code on an MjData holding that
    world's MJWarp state."""
    import mujoco_warp as mjwarp
    import warp as wp

    env = gym.make(env_id)
    base = env.unwrapped
    starts = []
    for i in range(worlds):
        env.reset(seed=seed + i)
        starts.append((base.data.qpos.copy(), base.data.qvel.copy()))
    with wp.ScopedDevice("cpu"):
        model = mjwarp.put_model(base.model)
        data = mjwarp.make_data(base.model, nworld=worlds)
        data.qpos.assign(np.stack([q for q, _ in starts]).astype(np.float32))
        data.qvel.assign(np.stack([v for _, v in starts]).astype(np.float32))
        mjwarp.forward(model, data)

    def world_obs(w: int, arrays: dict[str, np.ndarray]) -> np.ndarray:
        for name, values in arrays.items():
            getattr(base.data, name)[:] = values[w]
        return base._get_obs()

    fields = ("qpos", "qvel", "xpos", "cfrc_ext")
    now = {name: getattr(data, name).numpy().astype(np.float64) for name in fields}
    now["cfrc_ext"][:] = 0.0  # as after Gymnasium's reset (mj_resetData zeroes it)
    obs = np.stack([world_obs(w, now) for w in range(worlds)])
    returns, lengths = np.zeros(worlds), np.full(worlds, steps)
    done = np.zeros(worlds, dtype=bool)
    for t in range(steps):
        actions = act(obs)
        with wp.ScopedDevice("cpu"):
            data.ctrl.assign(actions)
            for _ in range(base.frame_skip):
                mjwarp.step(model, data)
            mjwarp.rne_postconstraint(model, data)
        then, now = now, {name: getattr(data, name).numpy().astype(np.float64) for name in fields}
        rows = []
        for w in range(worlds):
            rows.append(world_obs(w, now))
            if env_id == "HalfCheetah-v5":
                velocity = (now["qpos"][w, 0] - then["qpos"][w, 0]) / base.dt
            else:
                velocity = ((now["xpos"][w, base._main_body, :2]
                             - then["xpos"][w, base._main_body, :2]) / base.dt)[0]
            reward, _ = base._get_rew(velocity, actions[w])
            ended = env_id == "Ant-v5" and not base.is_healthy and base._terminate_when_unhealthy
            if not done[w]:
                returns[w] += reward
                if ended:
                    done[w], lengths[w] = True, t + 1
        obs = np.stack(rows)
    env.close()
    return returns, lengths


@pytest.mark.parametrize("env_id", ENVS)
def test_64_worlds_return_what_a_plain_mjwarp_loop_returns_as_tapes(
        env_id: str, tmp_path: Path) -> None:
    env = MJWarpEnv(env_id, 64, device="cpu")
    obs_dim = env.reset(seeds=range(64)).shape[1]
    act = linear_policy(obs_dim, env.action_dim)
    steps = play(env, act, seeds=range(500, 564), max_steps=20)
    tapes = world_tapes(env, steps, max_steps=20)
    env.close()
    returns, lengths = plain_loop(env_id, act, seed=500, worlds=64, steps=20)
    assert np.array_equal(steps.lengths, lengths)
    assert np.array_equal(steps.returns(), returns)
    if env_id == "Ant-v5":  # the policy makes some Ants jump out of the healthy range
        assert 0 < (lengths < 20).sum() < 64
    # each world an ordinary tape: its seed, its steps up to its end, its states and flags
    for world in (0, 63, int(np.argmin(lengths))):
        tape = Tape.load(tapes[world].save(tmp_path / f"world-{world}.npz"))
        length = int(lengths[world])
        assert tape.seed == 500 + world and tape.length == length
        assert tape.meta["backend"] == "mjwarp" and tape.env["max_episode_steps"] == 20
        assert np.array_equal(tape.actions, steps.actions[:length, world])
        assert np.array_equal(tape.rewards, steps.rewards[:length, world])
        assert np.array_equal(tape.qpos, steps.qpos[:length + 1, world])
        assert tape.terminated[-1] == (length < 20) and tape.truncated[-1] == (length == 20)
        assert not tape.terminated[:-1].any() and not tape.truncated[:-1].any()
    # every tape verifies on MJWarp, rewards, flags, observation digests and states exactly:
    # all 64 as the worlds of one batch (verify's way), four of them alone (a render
    # worker's way, one world; ~20 ms a step on Warp's CPU device), with the same rewards
    requests = [RenderRequest(str(t.save(tmp_path / f"verify-{w}.npz"))) for w, t in
                enumerate(tapes)]
    together = verify_mjwarp(requests)
    assert [r.verified for r in together] == [True] * 64
    assert {r.checked for r in together} == {"observations and states on MJWarp (cpu)"}
    replayer = Replayer(None, lambda n: None)
    for world in sorted({0, 31, 63, int(np.argmin(lengths))}):
        alone = replayer.run(requests[world])
        assert alone.verified and alone.checked == together[world].checked
        assert alone.rewards == together[world].rewards
    replayer.close()
    if env_id == "HalfCheetah-v5":
        # replayed on CPU MuJoCo through Gymnasium: the first step from each world's reset
        # state within float32 (as test_mjwarp_steps_close...), and no outcome flips
        reference = gym.make(env_id, max_episode_steps=20)
        for tape in tapes:
            reference.reset(seed=tape.seed)
            rewards = [reference.step(a)[1] for a in tape.actions]
            assert abs(rewards[0] - tape.rewards[0]) < 2e-5
            assert np.isfinite(rewards).all() and len(rewards) == tape.length
        reference.close()




@pytest.fixture(scope="module")
def mjwarp_run(tmp_path_factory: pytest.TempPathFactory,
               ppo_checkpoint: tuple[Path, Path]) -> Path:
    """``rolltape eval HalfCheetah-v5 --simulator mjwarp`` of the session's real SB3 PPO (its
    VecNormalize too) against the random baseline: 6 episodes of 30 steps each."""
    model, stats = ppo_checkpoint
    out = tmp_path_factory.mktemp("mjwarp-run") / "run"
    done = run_cli("eval", "HalfCheetah-v5", "--simulator", "mjwarp", "--policy", f"sb3:{model}",
                   "--vecnormalize", str(stats), "--baseline", "random", "--episodes", "6",
                   "--max-episode-steps", "30", "--no-report", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "MuJoCo Warp" in done.stderr and "Traceback" not in done.stderr
    return out


def test_eval_on_mjwarp_writes_a_tape_per_episode_and_numbers_from_them(
        mjwarp_run: Path, tmp_path: Path) -> None:
    rows = [json.loads(line) for line in (mjwarp_run / "episodes.jsonl").read_text().splitlines()]
    assert sorted((r["role"], r["seed"]) for r in rows) == sorted(
        (role, seed) for role in ("policy", "baseline") for seed in range(6))
    for row in rows:
        tape = Tape.load(mjwarp_run / row["tape"])
        assert tape.meta["backend"] == "mjwarp" and tape.meta["device"] == "cpu"
        assert tape.meta["role"] == row["role"] and tape.seed == row["seed"]
        assert row["return"] == pytest.approx(tape.total_return, rel=0, abs=0)
        assert tape.length == 30 and tape.truncated[-1] and tape.qpos.shape == (31, 9)
        assert "mujoco_warp" in tape.env["versions"]
    from rolltape.outputs.report import build_report

    page = build_report(mjwarp_run, out=tmp_path / "report.html").read_text()
    assert "simulated on MuJoCo Warp (float32 worlds" in page  # the headline says so
    card = json.loads((mjwarp_run / "protocol.json").read_text())  # what rolltape diff reads
    assert card["simulator"] == "mjwarp" and card["execution"]["batch_size"] == 6
    assert card["envs"]["env"]["horizon"] == 30  # the run's time limit, not the env's 1000
    policies = json.loads((mjwarp_run / "policies.json").read_text())
    assert policies["policy"]["inference"] == "batched (6 MJWarp worlds)"
    assert policies["policy"]["device"] == "cpu"  # torch's "auto": no GPU on this machine
    # the policy and the random baseline really acted differently on the same seeds
    first = {r["role"]: Tape.load(mjwarp_run / r["tape"]) for r in rows if r["seed"] == 0}
    assert not np.array_equal(first["policy"].actions, first["baseline"].actions)


def test_verify_re_simulates_mjwarp_tapes_on_mjwarp_exactly(mjwarp_run: Path,
                                                            tmp_path: Path) -> None:
    """The run's 12 tapes and one whose state was edited at frame 10, verified together as
    the worlds of one batch: the 12 exactly, the edited one caught at the step that made
    that frame, as a state (its reward and observation there are still pass 1's)."""
    import dataclasses

    tapes = sorted((mjwarp_run / "tapes").glob("*.npz"))
    tape = Tape.load(tapes[0])
    qpos = tape.qpos.copy()
    qpos[10, 3] += 1e-6
    edited = tmp_path / "edited.npz"
    dataclasses.replace(tape, qpos=qpos).save(edited)
    done = run_cli("verify", *map(str, tapes), str(edited))
    assert done.returncode == 1, done.stderr
    assert done.stdout.count("verified: observations and states on MJWarp (cpu)") == 12
    assert f"DIVERGED {edited}: first at step 9: qpos was 'pass-1 state'" in done.stdout


def test_an_mjwarp_tape_naming_code_runs_none_of_it(mjwarp_run: Path, tmp_path: Path) -> None:
    """A tape is data: one that says MJWarp made it and names a module beside it (which
    writes a marker when imported) is refused in one sentence by verify's batch path, as
    by every replay, and nothing is imported."""
    import dataclasses

    (tmp_path / "markermod.py").write_text(
        f"open({str(tmp_path / 'marker')!r}, 'w').write('ran')\n")
    tape = Tape.load(sorted((mjwarp_run / "tapes").glob("*.npz"))[0])
    evil = dataclasses.replace(tape, env={**tape.env, "id": "markermod:X-v0",
                                          "max_episode_steps": None})
    evil.save(tmp_path / "evil.npz")
    for args in (("evil.npz",), ("evil.npz", "--flips"),
                 ("evil.npz", "--renderer", "mjwarp", "--out", "frames/")):
        done = run_cli("render" if "--renderer" in args else "verify", *args, cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert "names the env code 'markermod', which is not an installed package" in done.stderr
    assert not (tmp_path / "marker").exists()


@pytest.mark.parametrize("rtol", [0.0, 1e-6])
def test_a_batch_judges_each_tape_as_a_render_worker_judges_it_alone(
        mjwarp_run: Path, tmp_path: Path, rtol: float) -> None:
    """verify's batch (every world compared at once) and one world alone give the same
    verdicts, rewards and sentences: three tapes as recorded, one with a reward off by 1e-9
    (caught exactly, let through by a tolerance) and one with a state off at frame 3 (only
    observations and states tell, so only without a tolerance)."""
    import dataclasses

    tapes = sorted((mjwarp_run / "tapes").glob("*.npz"))[:3]
    tape = Tape.load(tapes[0])
    rewards, qpos = tape.rewards.copy(), tape.qpos.copy()
    rewards[5] += 1e-9
    qpos[3, 0] += 1e-7
    edited = [dataclasses.replace(tape, rewards=rewards).save(tmp_path / "reward.npz"),
              dataclasses.replace(tape, qpos=qpos).save(tmp_path / "state.npz")]
    requests = [RenderRequest(str(p), rtol=rtol) for p in [*tapes, *edited]]
    together = verify_mjwarp(requests)
    replayer = Replayer(None, lambda n: None)
    alone = [replayer.run(r) for r in requests]
    replayer.close()
    seen = [(r.verified, r.rewards, r.checked, r.divergence and r.divergence.describe())
            for r in together]
    assert seen == [(r.verified, r.rewards, r.checked, r.divergence and r.divergence.describe())
                    for r in alone]
    assert [r.verified for r in together] == [True] * 3 + [rtol > 0] * 2


def test_verify_flips_reports_the_run_against_cpu_mujoco(mjwarp_run: Path,
                                                         tmp_path: Path) -> None:
    done = run_cli("verify", str(mjwarp_run / "tapes"), "--flips",
                   "--out", str(tmp_path / "flips.json"))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "flips.json").read_text())
    assert report["episodes"] == 12 and report["replayed_on"] == "mujoco"
    rows = {Path(row["tape"]).name: row for row in report["rows"]}
    assert report["flipped"] == sum(bool(row["flipped"]) for row in rows.values())
    # measured: the PPO's gentle actions keep CPU MuJoCo within 3.4e-5 of MJWarp, no flip;
    # the random baseline's drift past 2.0 in 30 steps and 2 of 6 returns move by >1%
    policy = [row for name, row in rows.items() if name.startswith("policy")]
    assert all(0 < row["max_divergence"] < 1e-4 and not row["flipped"] for row in policy)
    assert {tuple(row["flipped"]) for row in rows.values()} <= {(), ("return",)}
    assert all(row["end"] == row["cpu_end"] == "truncated" for row in rows.values())


def test_the_orchestrator_of_an_mjwarp_eval_loads_no_simulator_or_gl(tmp_path: Path) -> None:
    """MuJoCo Warp (and the MuJoCo and GL it loads) is imported by the pass-1 worker only:
    the process that checks the config, deals the work and writes the run loads none."""
    import subprocess
    import sys

    code = (f"import json, sys, rolltape\n"
            f"rolltape.evaluate('HalfCheetah-v5', episodes=2, max_episode_steps=5, "
            f"simulator='mjwarp', report=False, out={str(tmp_path / 'run')!r})\n"
            "heavy = ('torch', 'OpenGL', 'mujoco', 'glfw', 'warp', 'mujoco_warp')\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in heavy)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
    assert len(list((tmp_path / "run" / "tapes").glob("*.npz"))) == 2


def test_env_kwargs_reach_the_worlds_and_their_verification(tmp_path: Path) -> None:
    """Ant with a tuple kwarg (kept apart from a list in the tape) and another reset noise:
    the worlds are that env (its healthy range ends episodes early), and verify rebuilds it."""
    out = tmp_path / "run"
    done = run_cli("eval", "Ant-v5", "--simulator", "mjwarp", "--episodes", "3",
                   "--max-episode-steps", "20", "--env-kwargs", "reset_noise_scale=0.5",
                   "--env-kwargs", "healthy_z_range=(0.3,0.9)", "--no-report", "--out", str(out))
    assert done.returncode == 0, done.stderr
    tapes = sorted((out / "tapes").glob("*.npz"))
    reference = gym.make("Ant-v5", reset_noise_scale=0.5, healthy_z_range=(0.3, 0.9))
    for path in tapes:
        tape = Tape.load(path)
        reference.reset(seed=tape.seed)
        assert np.array_equal(tape.qpos[0], reference.unwrapped.data.qpos.astype(np.float32))
        assert tape.length < 20 and tape.terminated[-1]  # z above 0.9 is unhealthy here
    reference.close()
    done = run_cli("verify", *map(str, tapes))
    assert done.returncode == 0 and done.stdout.count("on MJWarp (cpu)") == 3, done.stderr


@pytest.mark.parametrize(("args", "says"), [
    (("Hopper-v5",), "--simulator mjwarp steps HalfCheetah-v5, Ant-v5, not 'Hopper-v5'"),
    (("Ant-v5", "--batched-inference"), "drop --batched-inference"),
    (("Ant-v5", "--latency", "2"), "drop --latency"),
    (("Ant-v5", "--simulator", "egl"), "--simulator 'egl' is not one rolltape steps"),
])
def test_what_mjwarp_cannot_do_is_refused_in_one_sentence(args: tuple[str, ...], says: str,
                                                          tmp_path: Path) -> None:
    simulator = () if "--simulator" in args else ("--simulator", "mjwarp")
    done = run_cli("eval", *args, *simulator, "--episodes", "2", "--out", str(tmp_path / "run"))
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "run").exists()
