"""The Ray executor on a real local Ray instance: same tapes as local, fallbacks, errors."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from rolltape import RenderRequest, Tape, UsageError, evaluate, render  # noqa: E402
from rolltape.pass2.encode import count_frames  # noqa: E402

ENV_ID = "HalfCheetah-v5"
RUN = dict(episodes=3, seed=11, max_episode_steps=30, baseline="random", video=1)


@pytest.fixture(scope="module")
def ray_session():
    ray.init(num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def runs(ray_session, tmp_path_factory):
    """The same evaluation through both executors."""
    root = tmp_path_factory.mktemp("ray-runs")
    local = evaluate(ENV_ID, "random", out=root / "local", executor="local", workers=2, **RUN)
    on_ray = evaluate(ENV_ID, "random", out=root / "ray", executor="ray", workers=2, **RUN)
    return local, on_ray


def _python(code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout)


def test_ray_tapes_are_bitwise_those_of_the_local_executor(runs):
    local, on_ray = runs
    for role in ("episodes_rows", "baseline_rows"):
        rows_l, rows_r = local.results.to_json()[role], on_ray.results.to_json()[role]
        assert len(rows_l) == len(rows_r) == 3
        for a, b in zip(rows_l, rows_r):
            assert {**a, "wall_s": 0} == {**b, "wall_s": 0}  # return, length, seed, tape...
            ta, tb = Tape.load(local.path / a["tape"]), Tape.load(on_ray.path / b["tape"])
            for name in ("actions", "rewards", "terminated", "truncated", "obs_digest",
                         "qpos", "qvel"):
                x, y = getattr(ta, name), getattr(tb, name)
                assert x.dtype == y.dtype and np.array_equal(x, y), name
            assert {**ta.header(), "wall_s": 0} == {**tb.header(), "wall_s": 0}
    assert local.results.to_json()["summary"] == on_ray.results.to_json()["summary"]
    assert local.results.to_json()["improvement_over_baseline"] == on_ray.results.to_json()["improvement_over_baseline"]
    assert not list((on_ray.path / "tapes").glob(".*partial*"))


def test_ray_video_is_verified_and_complete(runs):
    _, on_ray = runs
    [video] = on_ray.results.to_json()["videos"]
    steps = on_ray.results.to_json()["episodes_rows"][0]["length"]
    assert video["verified"] is True and video["backend"] == "egl" and video["failures"] == []
    assert video["frames"] == steps + 1 == count_frames(on_ray.path / video["path"])
    assert video["torch_loaded"] is False


def test_render_task_sees_the_backend_it_was_given(ray_session):
    from rolltape.executors.ray import RayBackendPool
    from rolltape.rendering import _worker_environment

    def _task_env(backend):
        pool = RayBackendPool(None, [], [], 1.0, needs_backend=[],
                              environment=_worker_environment, ship=bytes, on_done=print)
        return pool._task_options(backend, 1)["runtime_env"]["env_vars"]

    @ray.remote
    def probe() -> tuple[str | None, str | None, bool]:
        import os

        return os.environ.get("MUJOCO_GL"), os.environ.get("PYOPENGL_PLATFORM"), \
            "mujoco" in sys.modules

    for backend in ("osmesa", "egl"):
        ref = probe.options(runtime_env={"env_vars": _task_env(backend)}).remote()
        gl, platform, imported = ray.get(ref)
        assert (gl, platform) == (backend, backend)
        assert not imported or gl == backend  # a reused worker imported it with this backend


@pytest.mark.parametrize("fault, reason, timeout", [("crash", "crash", 60), ("hang", "hung", 10)])
def test_crashing_or_hanging_backend_falls_back(runs, tmp_path, monkeypatch, fault, reason,
                                                timeout):
    _, on_ray = runs
    tape = on_ray.path / on_ray.results.to_json()["episodes_rows"][1]["tape"]
    monkeypatch.setenv("ROLLTAPE_FAULT", f"{fault}:egl")  # forwarded to the task's worker
    out = tmp_path / "a.gif"
    [result] = render([RenderRequest(str(tape), (str(out),), width=64, height=64)],
                      backends="egl,osmesa", timeout=timeout, executor="ray")
    assert result.backend == "osmesa" and result.verified is True
    assert [b for b, _ in result.failures] == ["egl"] and reason in result.failures[0][1]
    assert result.tape == str(tape) and result.outputs == (str(out),)
    assert count_frames(out) == result.frames == Tape.load(tape).length + 1


def test_every_backend_failing_names_each_reason(runs, tmp_path, monkeypatch):
    _, on_ray = runs
    tape = on_ray.path / on_ray.results.to_json()["episodes_rows"][0]["tape"]
    monkeypatch.setenv("ROLLTAPE_FAULT", "crash:osmesa")
    with pytest.raises(UsageError) as info:
        render([RenderRequest(str(tape), (str(tmp_path / "x.mp4"),))], backends="osmesa",
               executor="ray")
    assert "osmesa:" in str(info.value) and "rolltape doctor" in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_verify_only_needs_no_gl(runs):
    _, on_ray = runs
    tape = on_ray.path / on_ray.results.to_json()["episodes_rows"][2]["tape"]
    [result] = render([RenderRequest(str(tape))], backends="glfw", executor="ray")
    assert result.verified is True and result.frames == 0 and result.backend is None


def test_usage_error_inside_a_task_arrives_as_usage_error(ray_session, tmp_path):
    # The orchestrator does not open tape policies; the pass-1 task does, and refuses.
    missing = tmp_path / "no-such-tape.npz"
    messages = []
    for executor in ("local", "ray"):
        with pytest.raises(UsageError) as info:
            evaluate(ENV_ID, f"tape:{missing}", out=tmp_path / executor, executor=executor,
                     episodes=2, max_episode_steps=5)
        assert type(info.value) is UsageError and "Traceback" not in str(info.value)
        messages.append(str(info.value))
    assert messages[0] == messages[1] and str(missing) in messages[1]


def test_missing_tape_in_render_names_the_callers_path(ray_session, tmp_path):
    missing = tmp_path / "gone.npz"
    with pytest.raises(UsageError, match="gone.npz' does not exist"):
        render([RenderRequest(str(missing))], executor="ray")


def test_unreachable_address_fails_quickly():
    timeout = 5
    with socket.socket() as listener:  # listens, but is no Ray head: only the timeout helps
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        for address in ("127.0.0.1:1", f"127.0.0.1:{port}"):
            start = time.monotonic()
            proc = _python(f"""
                from rolltape.executors.ray import check_ray
                from rolltape.errors import UsageError
                try:
                    check_ray({address!r}, timeout={timeout})
                except UsageError as exc:
                    print("USAGE", exc)
                """)
            elapsed = time.monotonic() - start
            assert "USAGE" in proc.stdout and address in proc.stdout, proc.stderr[-2000:]
            assert elapsed < timeout + 10


def test_missing_ray_is_a_usage_error():
    proc = _python("""
        import sys
        sys.modules["ray"] = None  # as if it were not installed
        from rolltape.executors.ray import check_ray
        from rolltape.errors import UsageError
        try:
            check_ray()
        except UsageError as exc:
            print("USAGE", exc)
        """)
    assert "USAGE" in proc.stdout and "pip install 'rolltape[ray]'" in proc.stdout, proc.stderr


def test_local_executor_never_imports_ray(tmp_path):
    proc = _python(f"""
        import sys, json
        import rolltape
        import rolltape.executors.ray  # importing the module alone must not import ray
        run = rolltape.evaluate({ENV_ID!r}, "random", out={str(tmp_path / "run")!r},
                                episodes=2, max_episode_steps=5, video=1)
        print(json.dumps({{"ray": "ray" in sys.modules, "video": run.results.videos[0].verified}}))
        """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == {"ray": False, "video": True}


def test_pass1_work_is_cut_into_small_tasks_covering_every_episode():
    from rolltape.pass1.remote import cut_into_tasks as _pass1_tasks
    from rolltape.pass1.rollout import EpisodeJob, PolicyJob, split_jobs

    jobs = [PolicyJob(env={"id": ENV_ID}, policy=p,
                      episodes=[EpisodeJob(role, i, i, f"{role}-{i}.npz") for i in range(50)])
            for role, p in (("policy", "random"), ("baseline", "random"))]
    tasks = _pass1_tasks(split_jobs(jobs, 3))
    episodes = [(ep.role, ep.index) for task in tasks for job in task for ep in job.episodes]
    assert sorted(episodes) == sorted((j.episodes[0].role, i) for j in jobs for i in range(50))
    assert all(len(job.episodes) <= 4 for task in tasks for job in task)
    assert len(tasks) >= 25  # enough tasks for progress, few enough to amortise a policy load


def test_ray_workers_step_a_served_env(ray_session, tmp_path):
    """Ray's pass-1 workers open sessions on a loopback `rolltape serve`; the tapes equal a
    local run's bit for bit."""
    pytest.importorskip("zmq")
    from conftest import Server

    server = Server()  # the env with --max-episode-steps 30, as RUN asks
    try:
        run = dict(episodes=2, seed=11, max_episode_steps=30)
        served = evaluate(f"{server.address}/{ENV_ID}", "random", out=tmp_path / "served",
                          executor="ray", workers=2, report=False, **run)
    finally:
        server.stop()
    local = evaluate(ENV_ID, "random", out=tmp_path / "local", report=False, **run)
    assert served.metadata["env"]["served"]["address"] == server.address
    for row in local.results.to_json()["episodes_rows"]:
        a, b = np.load(local.path / row["tape"]), np.load(served.path / row["tape"])
        for name in ("actions", "rewards", "obs_digest", "physics"):
            assert a[name].tobytes() == b[name].tobytes(), name
def test_a_suite_on_ray_gives_the_local_executors_tapes(ray_session, tmp_path):
    """A suite's jobs (one per task) go to Ray as they go to local workers: same rows, tapes
    under tapes/<suite>/<task>/, the same per-task numbers."""
    common = dict(suite="classic", tasks="cartpole,mountaincar", episodes=2, seed=3,
                  max_episode_steps=25, workers=2, report=False)
    local = evaluate(out=tmp_path / "local", **common)
    on_ray = evaluate(out=tmp_path / "ray", executor="ray", **common)
    strip = lambda rows: [{**r, "wall_s": 0} for r in rows]  # noqa: E731
    assert strip(on_ray.results.to_json()["episodes_rows"]) == strip(local.results.to_json()["episodes_rows"])
    assert local.results.to_json()["episodes_rows"][-1]["tape"] == "tapes/classic/mountaincar/policy-0001.npz"
    for r in local.results.to_json()["episodes_rows"]:
        a, b = Tape.load(local.path / r["tape"]), Tape.load(on_ray.path / r["tape"])
        assert np.array_equal(a.actions, b.actions) and np.array_equal(a.rewards, b.rewards)
    assert on_ray.results.to_json()["suite"]["per_task"] == local.results.to_json()["suite"]["per_task"]


def test_ray_workers_step_a_served_suite(ray_session, tmp_path):
    """`serve --suite` on loopback, Ray's pass-1 workers stepping each task there: the tapes
    equal a local suite run's."""
    pytest.importorskip("zmq")
    from conftest import Server

    common = dict(suite="classic", tasks="cartpole,mountaincar", episodes=2, seed=3,
                  max_episode_steps=25, workers=2, report=False)
    server = Server(what=("--suite", "classic", "--tasks", "cartpole,mountaincar",
                          "--max-episode-steps", "25"))
    try:
        served = evaluate(out=tmp_path / "served", executor="ray", served=server.address,
                          **common)
    finally:
        server.stop()
    local = evaluate(out=tmp_path / "local", **common)
    assert len(local.results.to_json()["episodes_rows"]) == 4
    for row in local.results.to_json()["episodes_rows"]:
        a, b = np.load(local.path / row["tape"]), np.load(served.path / row["tape"])
        for name in ("actions", "rewards", "obs_digest", "terminated", "truncated"):
            assert a[name].tobytes() == b[name].tobytes(), name


def test_branches_on_ray_are_the_local_executors_branches(ray_session, tmp_path):
    """``rolltape branch --executor ray``: the branches are dealt to Ray tasks as pass-1
    episodes are (each reads the source tape where it runs and returns its branch tape as
    bytes), and they are the local workers' branches: same seeds, noise, tapes, curve."""
    from pathlib import Path

    from rolltape.branching import branch

    policy = f"{Path(__file__).parent.parent / 'assets' / 'policies.py'}:function"
    run = evaluate(ENV_ID, policy, episodes=1, seed=3, max_episode_steps=20, video=0,
                   baseline=None, out=tmp_path / "run")
    common = dict(pick="all", branches=2, every=7, noise=0.1, policy=policy, workers=2)
    local = branch(str(run.path), out=str(tmp_path / "local"), executor="local", **common)
    on_ray = branch(str(run.path), out=str(tmp_path / "ray"), executor="ray", **common)
    [a], [b] = local.episodes, on_ray.episodes
    assert a == b  # grid, points, estimates and bands
    assert [p["n"] for p in b["points"]] == [2, 2, 2]
    tapes = sorted(p.relative_to(local.out) for p in local.out.rglob("*.npz"))
    assert len(tapes) == 6
    assert tapes == sorted(p.relative_to(on_ray.out) for p in on_ray.out.rglob("*.npz"))
    for rel in tapes:
        x, y = Tape.load(local.out / rel), Tape.load(on_ray.out / rel)
        for name in ("actions", "rewards", "terminated", "truncated", "obs_digest", "physics"):
            assert np.array_equal(getattr(x, name), getattr(y, name)), (rel, name)
    k0, k1 = (Tape.load(local.out / rel).actions for rel in tapes[:2])  # from t = 0
    assert not np.array_equal(k0, k1)  # the noise is seeded per branch
