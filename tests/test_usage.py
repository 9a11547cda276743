"""Usage errors of the real `rolltape` command, table-driven, each in its own subprocess.

Every bad flag value must end in exit status 2 and exactly one line on stderr that names
the flag, with no traceback, before any work is done. The table runs on a thread pool (each
case is a process of its own, about a second). ``ROLLTAPE_CLI`` runs the table against
another command, e.g. a plain install without `click`:
``ROLLTAPE_CLI=/tmp/plain/bin/rolltape pytest tests/test_usage.py -k table``.

Also here: what the usage rules promise besides errors (--version, -h, exit codes that
reach the shell, the user's own envs). How --video picks episodes: test_config.py;
--env-kwargs literals: test_flags.py.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOY = "tests.assets.toy_envs:SuccessToy-v0"
CLI = shlex.split(os.environ.get("ROLLTAPE_CLI", "")) or [sys.executable, "-m", "rolltape.cli"]


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it; tests.assets importable, no display for glfw."""
    full = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    # ROOT before the caller's path (which may name the rolltape under test), as test_cli does
    old = os.environ.get("PYTHONPATH")
    full.update(COLUMNS="80", PYTHONPATH=str(ROOT) + (os.pathsep + old if old else ""),
                **(env or {}))
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=cwd, env=full,
                          timeout=300)


# A user's own env module: a class with a tuple and a bool kwarg (asserted to arrive as
# such), a zero-argument factory, and a registration under an id of its own.
MY_ENVS = textwrap.dedent('''
    import gymnasium as gym
    import numpy as np
    from gymnasium import spaces


    class Walk(gym.Env):
        metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

        def __init__(self, render_mode=None, scale=(1.0, 2.0), noisy=True):
            assert isinstance(scale, tuple), f"scale arrived as {scale!r}"
            assert isinstance(noisy, bool), f"noisy arrived as {noisy!r}"
            self.render_mode, self.scale = render_mode, scale
            self.observation_space = spaces.Box(-10, 10, (1,), np.float64)
            self.action_space = spaces.Box(-1, 1, (1,), np.float32)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t, self.x = 0, float(self.np_random.uniform(-1, 1))
            return np.array([self.x]), {}

        def step(self, action):
            self.t += 1
            self.x += float(action[0]) * self.scale[0]
            return np.array([self.x]), -abs(self.x), False, self.t >= 6, {}

        def render(self):
            frame = np.zeros((8, 8, 3), np.uint8)
            frame[:, : self.t + 1] = 255
            return frame


    def make_walk(render_mode=None):
        return Walk(render_mode=render_mode, scale=(0.5, 1.0))


    gym.register("MyWalk-v0", entry_point=Walk)
''')


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a toy run's tapes, SB3 checkpoints of both action-space kinds (saved
    untrained: only their spaces matter), and the user env module above."""
    d = tmp_path_factory.mktemp("usage")
    (d / "myenvs.py").write_text(MY_ENVS)
    code = textwrap.dedent("""
        import gymnasium as gym, stable_baselines3 as sb3
        # CartPole and InvertedPendulum both observe 4 numbers; one acts Discrete, one Box.
        sb3.PPO("MlpPolicy", gym.make("CartPole-v1"), device="cpu").save("ppo_discrete.zip")
        sb3.PPO("MlpPolicy", gym.make("InvertedPendulum-v5"), device="cpu").save("ppo_box.zip")
        sb3.SAC("MlpPolicy", gym.make("InvertedPendulum-v5"), device="cpu").save("sac.zip")
    """)
    subprocess.run([sys.executable, "-c", code], cwd=d, check=True)
    proc = cli("eval", TOY, "-n", "2", "-q", "--no-report", "--out", "toy", cwd=d)
    assert proc.returncode == 0, proc.stderr
    return d


T0, T1 = "toy/tapes/policy-0000.npz", "toy/tapes/policy-0001.npz"
EVAL = ["eval", TOY, "-n", "2", "-q", "--out", "new"]
CHEETAH = ["eval", "HalfCheetah-v5", "-n", "1", "--max-episode-steps", "5", "-q",
           "--out", "new", "--video", "1"]

# (arguments, what the one line must contain: the flag, or the value for a positional).
BAD: list[tuple[list[str], str]] = [
    # the parser's own errors (click's, formerly a traceback or a usage box)
    ([], "rolltape --help"),
    (["--bogus"], "--bogus"),
    (["frob"], "frob"),
    (["eval"], "env"),
    (["render"], "tapes"),
    ([*EVAL, "--bogus"], "--bogus"),
    ([*EVAL, "--episodes", "abc"], "--episodes"),
    (["eval", TOY, "--episodes"], "--episodes"),
    ([*EVAL, "--seed", "1.5"], "--seed"),
    ([*EVAL, "--rtol", "abc"], "--rtol"),
    ([*EVAL, "--width", "wide"], "--width"),
    (["render", T0, "--fps", "fast"], "--fps"),
    (["doctor", "--timeout", "soon"], "--timeout"),
    # ranges, checked before any work
    ([*EVAL, "--episodes", "0"], "--episodes"),
    ([*EVAL, "--max-episode-steps", "0"], "--max-episode-steps"),
    ([*EVAL, "--max-episode-steps", "-5"], "--max-episode-steps"),
    ([*EVAL, "--seed", "-1"], "--seed"),
    # caps: each used to fail late (a traceback, MemoryError many episodes in, staging left)
    ([*EVAL, "--episodes", str(2**70)], "--episodes"),
    ([*EVAL, "--seed", str(2**64)], "--seed"),  # the server refuses it; so does eval now
    ([*EVAL, "--max-episode-steps", str(10**12)], "--max-episode-steps"),
    ([*EVAL, "--algo", "NOPE"], "--algo"),  # with the random policy: it names nothing
    (["eval", TOY, "-p", "sb3:ppo_box.zip", "--algo", "NOPE", "--out", "new"], "--algo"),
    ([*EVAL, "--ray-render-gpus", "-1"], "--ray-render-gpus"),
    ([*EVAL, "--ray-render-gpus", "nan"], "--ray-render-gpus"),
    (["render", T0, "--fps", "1e9"], "--fps"),
    ([*EVAL[:-2], "--out", "x" * 300], "--out"),  # was "File name too long", exit 1
    ([*EVAL, "--rtol", "nan"], "--rtol"),
    ([*EVAL, "--rtol", "-1"], "--rtol"),
    ([*EVAL, "--atol", "inf"], "--atol"),
    ([*EVAL, "--render-timeout", "0"], "--render-timeout"),
    ([*EVAL, "--render-timeout", "nan"], "--render-timeout"),
    ([*EVAL, "--width", "0"], "--width"),
    ([*EVAL, "--height", "-3"], "--height"),
    ([*EVAL, "--format", ""], "--format"),
    ([*EVAL, "--format", ","], "--format"),
    ([*EVAL, "--format", "avi"], "--format"),
    ([*EVAL, "--workers", "0"], "--workers"),
    ([*EVAL, "--workers", "100000"], "--workers"),  # once started: load ~400 on 2 cores
    ([*EVAL, "--render-workers", "100000", "--video", "1"], "--render-workers"),
    ([*EVAL, "--render-workers", "-1"], "--render-workers"),
    ([*EVAL, "--executor", "slurm"], "--executor"),
    ([*EVAL, "--baseline", "expert"], "--baseline"),
    ([*EVAL, "--on-divergence", "shrug"], "--on-divergence"),
    ([*EVAL, "--mode", "fast"], "--mode"),
    ([*EVAL, "--quality", "ultra"], "--quality"),
    ([*EVAL, "--layout", "diagonal"], "--layout"),
    ([*EVAL, "--camera", "free", "--camera", "track:torso"], "--layout"),
    ([*EVAL, "--backends", "vulkan"], "--backends"),
    ([*EVAL, "--video", "bogus"], "--video"),
    ([*EVAL, "--video", "best:0"], "--video"),
    ([*EVAL, "--video", "-1"], "--video"),
    ([*EVAL, "--video", "0,7"], "--video"),
    # 10**12 episodes: the --video index check must not build a list of them
    (["eval", TOY, "-n", str(10**12), "--video", f"0,{10**12}", "--out", "new"], "--video"),
    ([*EVAL[:-2], "--out", ""], "--out"),
    ([*EVAL[:-2], "--out", "."], "--out"),
    ([*EVAL[:-2], "--out", "/"], "--out"),
    ([*EVAL[:-2], "--out", ".."], "--out"),
    ([*EVAL[:-2], "--out", "/proc/new"], "--out"),
    ([*EVAL[:-2], "--out", "myenvs.py/new"], "--out"),
    ([*EVAL, "--env-kwargs", "name=abc"], "--env-kwargs"),
    ([*EVAL, "--env-kwargs", "fault"], "--env-kwargs"),
    ([*EVAL, "--env-kwargs", "x=nan"], "--env-kwargs"),
    ([*EVAL, "--env-kwargs", "x={1, 2}"], "--env-kwargs"),
    # what the env or policy cannot do, found before pass 1 or before its first episode
    ([*CHEETAH, "--camera", "nosuch"], "--camera"),
    ([*CHEETAH, "--camera", "track:nobody"], "--camera"),
    ([*EVAL, "--video", "1", "--camera", "free"], "--camera"),
    ([*EVAL, "--video", "1", "--width", "64"], "--width"),
    (["eval", "InvertedPendulum-v5", "-p", "sb3:ppo_discrete.zip", "-n", "1", "--out", "new"],
     "--policy"),
    (["eval", "CartPole-v1", "-p", "sb3:ppo_box.zip", "-n", "1", "--out", "new"], "--policy"),
    (["eval", "CartPole-v1", "-p", "sb3:sac", "-n", "1", "--out", "new"], "--policy"),
    (["eval", "CartPole-v1", "-p", "sb3:missing", "-n", "1", "--out", "new"], "--policy"),
    (["eval", "nowhere.py:Walk", "--out", "new"], "nowhere.py"),
    (["eval", "myenvs.py:Run", "--out", "new"], "Run"),
    (["eval", "nomodule:Walk-v0", "--out", "new"], "nomodule"),
    # render and verify
    (["render", T0, "--out", "x.avi"], "--out"),
    (["render", T0, T1, "--out", "two.mp4"], "--out"),
    (["render", T0, "--out", ""], "--out"),
    (["render", T0, "--fps", "0"], "--fps"),
    (["render", T0, "--fps", "nan"], "--fps"),
    (["render", T0, "--width", "0"], "--width"),
    (["render", T0, "--format", ""], "--format"),
    (["render", T0, "--rtol", "nan"], "--rtol"),
    (["render", T0, "--mode", "fast"], "--mode"),
    # (the toy's module is no package of Gymnasium envs: a tape of it needs --env)
    (["render", T0, "--env", TOY, "--width", "64", "--out", "w.gif"], "--width"),
    (["render", T0, "--env", TOY, "--camera", "free", "--out", "c.gif"], "--camera"),
    (["render", T0, "--out", "t.gif"], f"--env {TOY}"),
    (["render", T0, "--workers", "0"], "--workers"),
    (["verify", T0, "--atol", "-1"], "--atol"),
    (["verify", T0, "--workers", "0"], "--workers"),
    (["render", T0, "--workers", "257"], "--workers"),
    (["verify", T0, "--workers", "100000"], "--workers"),
]


def test_table_every_bad_flag_is_one_line_exit_2(work: Path) -> None:
    # Each case its own --out, so that no two lock the same staging folder.
    cases = [[f"new{i}" if a == "new" else a for a in args] for i, (args, _) in enumerate(BAD)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        procs = list(pool.map(lambda args: cli(*args, cwd=work), cases))
    wrong = []
    for (args, needle), proc in zip(BAD, procs):
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        ok = (proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr
              and lines[0].startswith("rolltape: ") and needle in lines[0])
        if not ok:
            wrong.append(f"{shlex.join(args)} -> {proc.returncode}: {proc.stderr.strip()!r}")
    assert not wrong, "\n".join(wrong)
    # Nothing was made for a refused command (the toy run was there before).
    assert sorted(p.name for p in work.iterdir()) == [
        "myenvs.py", "ppo_box.zip", "ppo_discrete.zip", "sac.zip", "toy"]


def test_a_run_its_first_worker_refuses_starts_no_render_worker(work: Path) -> None:
    """Warm render workers start once the first episode is done: a checkpoint the env
    cannot use (found by the pass-1 worker) refuses the run before any of them starts."""
    import threading
    import time

    from conftest import count, marked

    mark = f"warm-{os.getpid()}-{time.monotonic_ns()}"
    seen: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.append(count(marked(mark), "render_worker"))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        proc = cli("eval", "InvertedPendulum-v5", "-p", "sb3:ppo_discrete.zip", "-n", "4",
                   "--video", "all", "--render-workers", "2", "-q", "--out", "refused",
                   cwd=work, env={"ROLLTAPE_TEST_RUN": mark})
    finally:
        done.set()
        watcher.join()
    assert proc.returncode == 2 and "--policy" in proc.stderr, proc.stderr
    assert len(seen) > 10 and max(seen) == 0
    assert not (work / "refused").exists() and not (work / ".refused.partial").exists()


def test_version_and_short_help(work: Path) -> None:
    from rolltape import __version__

    version = cli("--version", cwd=work)
    assert (version.returncode, version.stdout.strip()) == (0, f"rolltape {__version__}")
    helped = cli("eval", "-h", cwd=work)
    assert helped.returncode == 0 and "--episodes" in helped.stdout and not helped.stderr


def test_exit_codes_reach_the_shell(work: Path) -> None:
    """typer.Exit(1) from `doctor` (no working backend) used to come out as 0."""
    proc = cli("doctor", "--backends", "glfw", cwd=work)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "no working backend" in proc.stdout


def test_a_file_env_with_tuple_kwargs_evaluates_renders_and_replays(work: Path) -> None:
    """FILE.py:CLASS: pass 1, a verified video, then a render of its tape (which must
    name the env again: a tape may not import code), with the tuple kwarg intact."""
    proc = cli("eval", "myenvs.py:Walk", "-n", "2", "--video", "1", "-q", "--no-report",
               "--env-kwargs", "scale=(0.5, 2.0)", "--env-kwargs", "noisy=False",
               "--out", "runs/file", cwd=work)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((work / "runs/file/results.json").read_text())
    assert results["videos"][0]["verified"] is True
    assert results["env"]["source"] == str(work / "myenvs.py")
    tape = "runs/file/tapes/policy-0001.npz"
    refused = cli("render", tape, "--out", "runs/a.gif", cwd=work)
    assert refused.returncode == 2 and "--env myenvs.py:Walk" in refused.stderr
    assert not (work / "runs/a.gif").exists()
    rendered = cli("render", tape, "--out", "runs/a.gif", "--env", "myenvs.py:Walk", cwd=work)
    assert rendered.returncode == 0, rendered.stderr
    assert "verified" in rendered.stdout and (work / "runs/a.gif").stat().st_size > 0


def test_a_factory_and_a_registering_module_from_the_current_folder(work: Path) -> None:
    """FILE.py:FACTORY, and MODULE:EnvId with the module beside the user: the installed
    `rolltape` script has no current folder on its path, so it is run here too."""
    script = Path(sys.executable).with_name("rolltape")
    runs = [cli("eval", "myenvs.py:make_walk", "-n", "1", "--video", "1", "-q",
                "--no-report", "--out", "runs/factory", cwd=work)]
    if script.exists() and "ROLLTAPE_CLI" not in os.environ:
        runs.append(subprocess.run(
            [str(script), "eval", "myenvs:MyWalk-v0", "-n", "1", "--video", "1", "-q",
             "--no-report", "--out", "runs/module"], capture_output=True, text=True, cwd=work,
            timeout=300))
    for proc in runs:
        assert proc.returncode == 0, proc.stderr
    for run in ("factory", "module")[:len(runs)]:
        results = json.loads((work / "runs" / run / "results.json").read_text())
        assert results["videos"][0]["verified"] is True, results["videos"]


def test_an_sb3_checkpoint_path_without_zip_loads(work: Path) -> None:
    proc = cli("eval", "CartPole-v1", "-p", "sb3:ppo_discrete", "-n", "1",
               "--max-episode-steps", "5", "-q", "--no-report", "--out", "runs/nozip",
               cwd=work)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((work / "runs/nozip/results.json").read_text())
    assert results["policy"]["source"].endswith("ppo_discrete.zip")
