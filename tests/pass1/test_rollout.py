"""Pass 1 through ``rolltape.evaluate``: real spawned workers, real MuJoCo, real SB3 files.

What is checked is what a user relies on: the tape holds exactly what a plain Gymnasium loop
would have produced for the same seed and actions; the run files are valid, complete and
say where every number came from; the processes are isolated (no torch in the orchestrator,
no GL variable in the policy process); success is reported with its uncertainty; and a run
can be resumed.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import textwrap
from importlib.metadata import version
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rolltape import RenderRequest, Tape, UsageError, evaluate, render
from rolltape.envs.digests import obs_digest

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "tests" / "assets"
ENV_ID = "HalfCheetah-v5"
STEPS = 40
SEED = 50
TOY = "tests.assets.toy_envs:SuccessToy-v0"


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    """Workers must import ``tests.assets`` whatever folder pytest runs from, and MuJoCo envs
    built in this process write MUJOCO_LOG.TXT into the current folder: use a temporary one."""
    monkeypatch.syspath_prepend(str(ROOT))
    old = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + (os.pathsep + old if old else ""))
    monkeypatch.chdir(tmp_path)


def _strict_json(path: Path):
    """Parse JSON refusing NaN/Infinity, which json.loads would otherwise accept."""
    def refuse(name):
        raise ValueError(f"{path} contains {name}, which is not JSON")
    return json.loads(Path(path).read_text(), parse_constant=refuse)


def _tape(run_path: Path, role: str, i: int) -> Tape:
    return Tape.load(run_path / "tapes" / f"{role}-{i:04d}.npz")


def _same_tapes(a: Tape, b: Tape) -> bool:
    arrays = ("actions", "rewards", "terminated", "truncated", "obs_digest", "qpos", "qvel")
    for name in arrays:
        x, y = getattr(a, name), getattr(b, name)
        if (x is None) != (y is None):
            return False
        if x is not None and (x.dtype != y.dtype or not np.array_equal(x, y)):
            return False
    return a.seed == b.seed and a.env == b.env and a.success_at_end == b.success_at_end


def _plain_loop(env_id: str, seed: int, actions: np.ndarray, **make_kwargs):
    """What a user's own Gymnasium loop gives for these actions from this seed."""
    env = gym.make(env_id, **make_kwargs)
    try:
        obs, _ = env.reset(seed=seed)
        digests, rewards, terms, truncs = [obs_digest(obs)], [], [], []
        for action in actions:
            obs, reward, term, trunc, _ = env.step(action)
            digests.append(obs_digest(obs))
            rewards.append(reward)
            terms.append(term)
            truncs.append(trunc)
    finally:
        env.close()
    return (np.asarray(digests, dtype=np.uint64), np.asarray(rewards, dtype=np.float64),
            np.asarray(terms), np.asarray(truncs))


@pytest.fixture(scope="module")
def ppo_run(ppo_checkpoint, tmp_path_factory):
    """PPO + VecNormalize on HalfCheetah with a random baseline: 3 episodes of 40 steps."""
    model_zip, stats = ppo_checkpoint
    out = tmp_path_factory.mktemp("rollout") / "ppo"
    command = ["rolltape", "eval", ENV_ID, "--policy", f"sb3:{model_zip}"]
    return evaluate(ENV_ID, f"sb3:{model_zip}", vecnormalize=stats, episodes=3, seed=SEED,
                    baseline="random", max_episode_steps=STEPS, out=out, command=command)


# --- numbers ---------------------------------------------------------------------------------

@pytest.mark.parametrize("role", ["policy", "baseline"])
def test_tape_equals_a_plain_gymnasium_loop(ppo_run, role):
    for i in range(3):
        tape = _tape(ppo_run.path, role, i)
        assert tape.seed == SEED + i  # episode i is reset with seed base + i
        assert tape.length == STEPS and tape.rewards.dtype == np.float64
        digests, rewards, terms, truncs = _plain_loop(ENV_ID, SEED + i, tape.actions,
                                                      max_episode_steps=STEPS)
        assert np.array_equal(tape.obs_digest, digests)
        assert np.array_equal(tape.rewards, rewards)  # == on float64, not approximately
        assert np.array_equal(tape.terminated, terms) and np.array_equal(tape.truncated, truncs)
        assert tape.truncated[-1] and not tape.terminated.any()


def test_returns_are_fsum_of_tape_rewards(ppo_run):
    results = _strict_json(ppo_run.path / "results.json")
    jsonl = [json.loads(line) for line in
             (ppo_run.path / "episodes.jsonl").read_text().splitlines()]
    by_key = {(r["role"], r["index"]): r for r in jsonl}
    for key, rows in (("policy", results["episodes_rows"]), ("baseline", results["baseline_rows"])):
        for row in rows:
            tape = Tape.load(ppo_run.path / row["tape"])
            assert row["return"] == math.fsum(tape.rewards.tolist())
            assert by_key[(key, row["index"])]["return"] == row["return"]
        returns = [r["return"] for r in rows]
        assert results["summary"][key]["mean"] == pytest.approx(float(np.mean(returns)), abs=0)
        assert results["summary"][key]["n"] == 3


def test_an_episode_replays_alone(ppo_run, ppo_checkpoint, tmp_path):
    """Episode 2 of a 3-episode run == episode 0 of a run whose base seed is SEED + 2."""
    model_zip, stats = ppo_checkpoint
    alone = evaluate(ENV_ID, f"sb3:{model_zip}", vecnormalize=stats, episodes=1, seed=SEED + 2,
                     baseline="random", max_episode_steps=STEPS, out=tmp_path / "alone")
    for role in ("policy", "baseline"):
        assert _same_tapes(_tape(alone.path, role, 0), _tape(ppo_run.path, role, 2))


def test_deterministic_runs_give_identical_tapes(ppo_run, ppo_checkpoint, tmp_path):
    model_zip, stats = ppo_checkpoint
    again = evaluate(ENV_ID, f"sb3:{model_zip}", vecnormalize=stats, episodes=3, seed=SEED,
                     baseline="random", max_episode_steps=STEPS, out=tmp_path / "again")
    for role in ("policy", "baseline"):
        for i in range(3):
            assert _same_tapes(_tape(again.path, role, i), _tape(ppo_run.path, role, i))
    strip = lambda rows: [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]  # noqa: E731
    assert strip(again.results.to_json()["episodes_rows"]) == strip(ppo_run.results.to_json()["episodes_rows"])
    assert again.results.to_json()["summary"] == ppo_run.results.to_json()["summary"]


def test_tapes_do_not_depend_on_the_worker_count(ppo_run, ppo_checkpoint, tmp_path):
    model_zip, stats = ppo_checkpoint
    split = evaluate(ENV_ID, f"sb3:{model_zip}", vecnormalize=stats, episodes=3, seed=SEED,
                     baseline="random", max_episode_steps=STEPS, workers=2,
                     out=tmp_path / "split")
    for role in ("policy", "baseline"):
        for i in range(3):
            assert _same_tapes(_tape(split.path, role, i), _tape(ppo_run.path, role, i))
    assert split.results.to_json()["summary"] == ppo_run.results.to_json()["summary"]


@pytest.fixture(scope="module")
def stochastic_run(ppo_checkpoint, tmp_path_factory):
    model_zip, stats = ppo_checkpoint
    return evaluate(ENV_ID, f"sb3:{model_zip}", vecnormalize=stats, episodes=2, seed=SEED,
                    deterministic=False, max_episode_steps=STEPS,
                    out=tmp_path_factory.mktemp("stochastic") / "run")


def test_stochastic_policy_runs_and_samples(stochastic_run, ppo_run):
    assert stochastic_run.results.to_json()["policy"]["deterministic"] is False
    assert stochastic_run.metadata["policy"]["deterministic"] is False
    for i in range(2):
        sampled, greedy = _tape(stochastic_run.path, "policy", i), _tape(ppo_run.path, "policy", i)
        assert sampled.policy["deterministic"] is False
        assert sampled.length == STEPS and sampled.seed == SEED + i
        assert not np.array_equal(sampled.actions, greedy.actions)
        # Whatever was sampled, the tape still holds exactly what the env returned.
        _, rewards, _, _ = _plain_loop(ENV_ID, SEED + i, sampled.actions, max_episode_steps=STEPS)
        assert np.array_equal(sampled.rewards, rewards)


def test_stochastic_episode_replays_alone(stochastic_run, ppo_checkpoint, tmp_path):
    model_zip, stats = ppo_checkpoint
    alone = evaluate(ENV_ID, f"sb3:{model_zip}", vecnormalize=stats, episodes=1, seed=SEED + 1,
                     deterministic=False, max_episode_steps=STEPS, out=tmp_path / "alone")
    assert _same_tapes(_tape(alone.path, "policy", 0), _tape(stochastic_run.path, "policy", 1))


# --- run files -------------------------------------------------------------------------------

def test_results_json(ppo_run):
    results = _strict_json(ppo_run.path / "results.json")
    assert results["schema_version"] == 2
    assert results["env_id"] == ENV_ID and results["episodes"] == 3 and results["seed"] == SEED
    assert results == ppo_run.results.to_json()
    for key, role in (("episodes_rows", "policy"), ("baseline_rows", "baseline")):
        rows = results[key]
        assert [r["index"] for r in rows] == [0, 1, 2]
        assert [r["seed"] for r in rows] == [SEED, SEED + 1, SEED + 2]
        for r in rows:
            assert r["role"] == role
            assert isinstance(r["return"], float) and math.isfinite(r["return"])
            assert r["length"] == STEPS
            assert r["success_at_end"] is None and r["success_once"] is None  # HalfCheetah never says
            assert r["wall_s"] > 0
            assert r["tape"] == f"tapes/{role}-{r['index']:04d}.npz"
            assert (ppo_run.path / r["tape"]).is_file()
    assert results["summary"]["policy"]["success_rate"] is None
    imp = results["improvement_over_baseline"]
    diffs = [p["return"] - b["return"]
             for p, b in zip(results["episodes_rows"], results["baseline_rows"])]
    assert imp["n_pairs"] == 3
    assert imp["mean_diff"] == pytest.approx(float(np.mean(diffs)), rel=1e-12)
    lo, hi = imp["diff_ci"]
    assert lo <= imp["mean_diff"] <= hi


def test_episodes_jsonl_has_one_line_per_episode(ppo_run):
    lines = (ppo_run.path / "episodes.jsonl").read_text().splitlines()
    rows = [json.loads(line, parse_constant=lambda c: pytest.fail(c)) for line in lines]
    assert sorted((r["role"], r["index"]) for r in rows) == sorted(
        (role, i) for role in ("policy", "baseline") for i in range(3))


def test_metadata_json(ppo_run, ppo_checkpoint):
    model_zip, stats = ppo_checkpoint
    meta = _strict_json(ppo_run.path / "metadata.json")
    assert meta["command"] == ["rolltape", "eval", ENV_ID, "--policy", f"sb3:{model_zip}"]
    versions = meta["versions"]
    assert versions["python"] == platform.python_version()
    for name in ("numpy", "gymnasium", "mujoco", "stable-baselines3", "torch"):
        assert versions[name] == version(name), name
    assert meta["platform"]["system"] == platform.system()
    assert meta["platform"]["machine"] == platform.machine()
    assert meta["checkpoint_sha256"] == hashlib.sha256(model_zip.read_bytes()).hexdigest()
    assert meta["vecnormalize_sha256"] == hashlib.sha256(stats.read_bytes()).hexdigest()
    assert meta["policy"]["sha256"] == meta["checkpoint_sha256"]
    assert meta["policy"]["algo"] == "PPO"
    assert meta["seeds"] == {"base": SEED, "episodes": [SEED, SEED + 1, SEED + 2]}
    assert meta["timings"]["pass1_s"] > 0
    assert isinstance(meta["warnings"], list)
    assert meta["resumed"] is False
    # Every tape names its producer too.
    assert _tape(ppo_run.path, "policy", 0).policy["sha256"] == meta["checkpoint_sha256"]


# --- isolation -------------------------------------------------------------------------------

def test_orchestrator_never_imports_torch_or_gl(ppo_checkpoint, tmp_path):
    model_zip, stats = ppo_checkpoint
    code = textwrap.dedent(f"""
        import json, sys
        import rolltape
        run = rolltape.evaluate({ENV_ID!r}, {f"sb3:{model_zip}"!r}, vecnormalize={str(stats)!r},
                                episodes=2, seed=1, baseline="random", max_episode_steps=30,
                                video=1, out={str(tmp_path / "run")!r})
        heavy = ("torch", "OpenGL", "mujoco", "stable_baselines3", "glfw")
        print(json.dumps({{"loaded": sorted(m for m in sys.modules if m.split(".")[0] in heavy),
                          "videos": run.results.to_json()["videos"]}}))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    # The policy (torch) ran in pass 1, the video (mujoco, GL) in pass 2: none of it here.
    assert report["loaded"] == []
    assert report["videos"][0]["verified"] is True
    assert report["videos"][0]["torch_loaded"] is False


def test_policy_process_has_no_gl_variables(monkeypatch, tmp_path):
    from tests.assets.policies import gl_guard

    monkeypatch.setenv("MUJOCO_GL", "egl")
    monkeypatch.setenv("PYOPENGL_PLATFORM", "egl")
    with pytest.raises(RuntimeError, match="GL variables"):  # the guard does guard
        gl_guard(np.zeros(17))
    run = evaluate(ENV_ID, f"{ASSETS / 'policies.py'}:gl_guard", episodes=1, seed=3,
                   max_episode_steps=30, out=tmp_path / "run")
    tape = _tape(run.path, "policy", 0)
    assert tape.length == 30 and not tape.actions.any()
    assert tape.policy["kind"] == "callable"


# --- other envs ------------------------------------------------------------------------------

def test_discrete_env_end_to_end(tmp_path):
    import stable_baselines3 as sb3

    dqn = tmp_path / "dqn.zip"
    sb3.DQN("MlpPolicy", gym.make("CartPole-v1"), seed=0, device="cpu",
            policy_kwargs=dict(net_arch=[16])).save(dqn)
    for source in ("random", f"sb3:{dqn}"):
        run = evaluate("CartPole-v1", source, episodes=2, seed=3, max_episode_steps=50,
                       out=tmp_path / source.replace(":", "_").replace("/", "_")[-20:])
        for i in range(2):
            tape = _tape(run.path, "policy", i)
            assert tape.actions.dtype.kind == "i" and tape.actions.shape == (tape.length,)
            assert set(np.unique(tape.actions)) <= {0, 1}
            assert not tape.has_state  # no MuJoCo state for a classic-control env
            digests, rewards, terms, truncs = _plain_loop("CartPole-v1", 3 + i, tape.actions,
                                                          max_episode_steps=50)
            assert np.array_equal(tape.rewards, rewards)
            assert np.array_equal(tape.obs_digest, digests)
            assert tape.terminated[-1] or tape.truncated[-1]
        # And the tapes re-simulate exactly in a verify worker.
        results = render([RenderRequest(str(run.path / r["tape"]))
                          for r in run.results.to_json()["episodes_rows"]])
        assert all(r.verified for r in results)


def test_success_and_metrics_reach_the_results(tmp_path):
    run = evaluate(TOY, "random", episodes=5, seed=10, baseline="random", out=tmp_path / "toy")
    results = _strict_json(run.path / "results.json")
    assert results["env_id"] == TOY
    for key in ("episodes_rows", "baseline_rows"):
        rows = results[key]
        assert [r["success_at_end"] for r in rows] == [True, False, True, False, True]  # even seeds
        for r in rows:
            assert r["length"] == 5 and r["terminated"] is True
            m = r["metrics"]
            assert m["seed"] == r["seed"] and isinstance(m["final_x"], float)
            assert m["undefined"] is None  # NaN became null
    n, k, z = 5, 3, 1.959963984540054
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    for role in ("policy", "baseline"):
        s = results["summary"][role]
        assert s["success_count"] == 3 and s["success_rate"] == pytest.approx(0.6)
        assert s["success_ci"] == pytest.approx([centre - half, centre + half], rel=1e-12)
        assert s["mean_length"] == 5
    tape = _tape(run.path, "policy", 1)
    assert tape.success_at_end is False and tape.metrics["undefined"] is None


# --- resume ----------------------------------------------------------------------------------

RESUME_SEED = 20


def _random_run(out: Path, episodes: int, **kw):
    return evaluate(ENV_ID, "random", episodes=episodes, seed=kw.pop("seed", RESUME_SEED),
                    max_episode_steps=30, out=out, **kw)


def _stamp(path: Path) -> tuple[int, bytes]:
    return path.stat().st_mtime_ns, path.read_bytes()


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
    """An uninterrupted 5-episode run: what every resumed run must end up equal to."""
    return _random_run(tmp_path_factory.mktemp("reference") / "run", 5)


def _rows(run_path: Path) -> list[dict]:
    rows = _strict_json(run_path / "results.json")["episodes_rows"]
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]


def test_resume_a_finished_run_with_more_episodes(reference_run, tmp_path):
    out = tmp_path / "run"
    _random_run(out, 3)
    kept = {i: _stamp(out / "tapes" / f"policy-{i:04d}.npz") for i in range(3)}
    resumed = _random_run(out, 5, resume=True)
    assert resumed.path == out and not (tmp_path / ".run.partial").exists()
    for i, stamp in kept.items():  # finished episodes are not played again
        assert _stamp(out / "tapes" / f"policy-{i:04d}.npz") == stamp
    assert resumed.metadata["resumed"] is True
    assert resumed.results.to_json()["episodes"] == 5
    assert _rows(out) == _rows(reference_run.path)
    for i in range(5):
        assert _same_tapes(_tape(out, "policy", i), _tape(reference_run.path, "policy", i))
    assert len((out / "episodes.jsonl").read_text().splitlines()) == 5


def _interrupt(reference: Path, tmp_path: Path, finished: int, torn: bool) -> Path:
    """A copy of ``reference`` as an interrupted run leaves it: in the staging folder, with
    only ``finished`` tapes and rows (and, if ``torn``, half a row the dying process wrote)."""
    staging = tmp_path / ".run.partial"
    shutil.copytree(reference, staging)
    for name in ("results.json", "metadata.json"):
        (staging / name).unlink()
    for tape in (staging / "tapes").glob("policy-*.npz"):
        if int(tape.stem.split("-")[1]) >= finished:
            tape.unlink()
    lines = (staging / "episodes.jsonl").read_text().splitlines(keepends=True)[:finished]
    tail = lines[-1][: len(lines[-1]) // 2] if torn else ""
    (staging / "episodes.jsonl").write_text("".join(lines) + tail)
    return staging


def test_resume_an_interrupted_run(reference_run, tmp_path):
    staging = _interrupt(reference_run.path, tmp_path, finished=2, torn=True)
    kept = {i: _stamp(staging / "tapes" / f"policy-{i:04d}.npz") for i in range(2)}
    resumed = _random_run(tmp_path / "run", 5, resume=True)
    assert resumed.path == tmp_path / "run" and not staging.exists()
    for i, stamp in kept.items():
        assert _stamp(resumed.path / "tapes" / f"policy-{i:04d}.npz") == stamp
    assert resumed.metadata["resumed"] is True
    assert _rows(resumed.path) == _rows(reference_run.path)
    assert resumed.results.to_json()["summary"] == reference_run.results.to_json()["summary"]


def test_resumed_run_has_a_clean_episodes_jsonl(reference_run, tmp_path):
    _interrupt(reference_run.path, tmp_path, finished=2, torn=True)
    resumed = _random_run(tmp_path / "run", 5, resume=True)
    rows = [json.loads(line) for line in (resumed.path / "episodes.jsonl").read_text().splitlines()]
    assert sorted(r["index"] for r in rows) == [0, 1, 2, 3, 4]


def test_interrupted_run_is_kept_unless_resumed_or_overwritten(reference_run, tmp_path):
    staging = _interrupt(reference_run.path, tmp_path, finished=3, torn=False)
    before = sorted(p.name for p in staging.rglob("*"))
    with pytest.raises(UsageError, match="--resume"):
        _random_run(tmp_path / "run", 5)
    assert sorted(p.name for p in staging.rglob("*")) == before  # untouched
    assert not (tmp_path / "run").exists()
    fresh = _random_run(tmp_path / "run", 5, overwrite=True)
    assert fresh.metadata["resumed"] is False and not staging.exists()
    assert _rows(fresh.path) == _rows(reference_run.path)


def test_resume_with_another_seed_is_refused_or_consistent(reference_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(reference_run.path, out)
    try:
        run = _random_run(out, 5, seed=99, resume=True)
    except UsageError:
        return  # refusing is fine
    assert [r["seed"] for r in run.results.to_json()["episodes_rows"]] == list(range(99, 104))


def test_failed_resume_of_a_finished_run_leaves_nothing_behind(tmp_path, monkeypatch):
    policy = tmp_path / "p.py"
    policy.write_text("import os\nimport numpy as np\n\ndef act(obs):\n"
                      "    return np.zeros(6, np.float32)\n\n"
                      "if os.environ.get('BREAK_POLICY'):\n    act = 42\n")
    out = tmp_path / "run"
    evaluate(ENV_ID, f"{policy}:act", episodes=1, seed=1, max_episode_steps=20, out=out)
    before = sorted(p.name for p in out.rglob("*"))
    # The policy broke since, though its file is the same (a changed file is refused earlier).
    monkeypatch.setenv("BREAK_POLICY", "1")
    with pytest.raises(UsageError, match="not a policy"):
        evaluate(ENV_ID, f"{policy}:act", episodes=2, seed=1, max_episode_steps=20, out=out,
                 resume=True)
    assert sorted(p.name for p in out.rglob("*")) == before  # the finished run is intact
    assert not (tmp_path / ".run.partial").exists()


def test_render_early_starts_pass_two_beside_pass_one_at_low_priority(tmp_path):
    """With render_early, video=1 needs only episode 0's tape: its render starts while pass
    1 still plays the other episodes, in workers at nice +10; 'best' must wait for every
    return and renders at normal priority. Without render_early, video=1 starts beside
    pass 1 too when pass 1 leaves a core idle, at the normal priority on that core."""
    kw = dict(episodes=6, seed=3, max_episode_steps=150, report=False, width=64, height=48,
              render_early=True)
    early = evaluate(ENV_ID, "random", video=1, out=tmp_path / "early", **kw)
    timings = early.metadata["timings"]
    assert timings["pass2_started_after_s"] < timings["pass1_s"]
    [video] = early.results.to_json()["videos"]
    # niced while pass 1 runs, back to 0 once it ends: which one the job saw depends on when
    # its worker took it (tests/executors/test_calm.py pins both cases down)
    assert video["verified"] is True and video["niceness"] in (0, 10)
    late = evaluate(ENV_ID, "random", video="best", out=tmp_path / "late", **kw)
    assert "pass2_started_after_s" not in late.metadata["timings"]
    assert any(w.startswith("--render-early needs") for w in late.results.to_json()["warnings"])
    assert late.results.to_json()["videos"][0]["niceness"] == os.nice(0)
    plain = evaluate(ENV_ID, "random", video=1, out=tmp_path / "plain",
                     **{**kw, "render_early": False})
    [video] = plain.results.to_json()["videos"]
    assert video["verified"] is True and video["niceness"] == os.nice(0)
    timings = plain.metadata["timings"]
    if (os.cpu_count() or 1) > 1:  # a core pass 1 leaves idle: the video is drawn there
        assert timings["pass2_started_after_s"] < timings["pass1_s"]
        # split for every core from the start (151 frames: 3 segments of 50 at most), the
        # ones pass 1 used joining once it ended
        assert video["segments"] == min(os.cpu_count() or 1, 3)
    else:
        assert "pass2_started_after_s" not in timings


def test_what_a_dead_worker_was_playing_counts_what_it_finished() -> None:
    from rolltape.pass1.rollout import Episodes, PolicyJob, playing

    job = PolicyJob(env={"id": "CartPole-v1"}, policy="random",
                    episodes=Episodes("policy", range(3), 100, "tapes"))
    assert playing([job], 0) == "policy episode 0 (seed 100)"
    assert playing([job], 2) == "policy episode 2 (seed 102)"
    assert playing([job], 3) == "the episode after the 3 it finished"  # not "its first"
    assert playing([], 0) == "its first episode"
