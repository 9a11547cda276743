"""Faults a real run meets: signals, crashed and hung workers, envs that raise or return
non-finite numbers, a full disk, a second process on the same --out, a swapped checkpoint.

Every case runs the real `rolltape` command (or `evaluate`) on real files and processes;
the faults come from ``FaultToy-v0`` (tests/assets/toy_envs.py), an env that misbehaves on
purpose, from real signals and from a real, small tmpfs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from conftest import count, fill, interruptible, marked, said_lines
from rolltape import Tape, evaluate
from rolltape.errors import RunFailed, UsageError

ROOT = Path(__file__).resolve().parent.parent
FAULTY = "tests.assets.toy_envs:FaultToy-v0"


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rolltape.cli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300, env={**os.environ, "COLUMNS": "200"})


def start(*args: str) -> subprocess.Popen[str]:
    """The command in a session of its own, so that a signal can go to its whole group."""
    return subprocess.Popen([sys.executable, "-m", "rolltape.cli", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=interruptible)


def wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError("timed out waiting")
        time.sleep(0.05)


def tapes_in(folder: Path) -> list[Path]:
    return sorted((folder / "tapes").glob("*.npz")) if folder.is_dir() else []


def rows_in(folder: Path) -> list[dict]:
    """The complete lines of a run's episodes.jsonl (a line being written is not counted)."""
    log = folder / "episodes.jsonl"
    text = log.read_text() if log.is_file() else ""
    return [json.loads(x) for x in text.splitlines(keepends=True) if x.endswith("\n")]


def staging(out: Path) -> Path:
    return out.with_name(f".{out.name}.partial")


def faulty(out: Path, fault: str, *extra: str, at_seed: int | None = 2, episodes: int = 6
           ) -> list[str]:
    kwargs = ["--env-kwargs", f"fault='{fault}'"]
    if at_seed is not None:
        kwargs += ["--env-kwargs", f"at_seed={at_seed}"]
    return ["eval", FAULTY, *kwargs, "--episodes", str(episodes), "--seed", "0", "--out",
            str(out), "--no-report", *extra]


def one_line(stderr: str) -> str:
    lines = said_lines(stderr)  # a stage that finished first says so in a log
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def group_is_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


# -- non-finite numbers ---------------------------------------------------------------

@pytest.mark.parametrize("fault, flags", [
    ("nan_reward", ["nonfinite_reward", "nonfinite_return"]),
    ("inf_reward", ["nonfinite_reward", "nonfinite_return"]),
    ("none_reward", ["nonfinite_reward", "nonfinite_return"]),
    ("overflow", ["nonfinite_return"]),  # finite rewards whose sum overflows a float
])
def test_nonfinite_returns_are_recorded_flagged_and_counted(tmp_path, fault, flags):
    run = evaluate(FAULTY, env_kwargs={"fault": fault, "at_seed": 2}, episodes=4, seed=0,
                   baseline="random", out=tmp_path / "run", report=False)
    results = json.loads((run.path / "results.json").read_text())  # valid JSON: no NaN
    rows = {r["index"]: r for r in results["episodes_rows"]}
    assert rows[2]["return"] is None and rows[2]["flags"] == flags
    assert all(rows[i]["return"] is not None and rows[i]["flags"] == [] for i in (0, 1, 3))
    summary = results["summary"]["policy"]
    assert (summary["n"], summary["episodes"], summary["nonfinite_returns"]) == (3, 4, 1)
    assert results["improvement_over_baseline"]["n_pairs"] == 3
    assert any("1 of 4 policy episode(s)" in w for w in results["warnings"])
    tape = Tape.load(run.path / "tapes" / "policy-0002.npz")  # the tape itself is kept
    assert tape.length == 5


def test_nonfinite_episode_replays_and_verifies(tmp_path):
    run = evaluate(FAULTY, env_kwargs={"fault": "nan_reward", "at_seed": None}, episodes=1,
                   out=tmp_path / "run", video=1, video_format="gif", report=False)
    video = run.results.to_json()["videos"][0]
    assert video["verified"] is True and video["replay_return"] is None


def test_nan_success_is_not_success(tmp_path):
    run = evaluate(FAULTY, env_kwargs={"fault": "nan_success", "at_seed": None}, episodes=3,
                   out=tmp_path / "run", report=False)
    assert [r["success_at_end"] for r in run.results.to_json()["episodes_rows"]] == [False, False, False]


def test_nan_actions_are_flagged(tmp_path):
    policy = tmp_path / "nanpolicy.py"
    policy.write_text("import numpy as np\ndef act(obs):\n    return np.full(1, np.nan, np.float32)\n")
    run = evaluate(FAULTY, f"{policy}:act", episodes=2, out=tmp_path / "run", report=False)
    assert all("nonfinite_action" in r["flags"] for r in run.results.to_json()["episodes_rows"])


# -- envs that raise, workers that crash or hang ----------------------------------------

@pytest.mark.parametrize("fault, error", [("raise_step", "ValueError: for seed 2"),
                                          ("raise_reset", "RuntimeError: reset failed")])
def test_an_env_that_raises_fails_its_episode_only(tmp_path, fault, error):
    out = tmp_path / "run"
    done = cli(*faulty(out, fault))
    assert done.returncode == 1
    assert error in done.stderr and "episode 2 (seed 2)" in done.stderr, done.stderr
    assert "--resume" in done.stderr and "Traceback" not in done.stderr
    results = json.loads((out / "results.json").read_text())
    assert [r["index"] for r in results["episodes_rows"]] == [0, 1, 3, 4, 5]
    assert results["failed_episodes"] == [{"role": "policy", "index": 2, "seed": 2,
                                           "error": results["failed_episodes"][0]["error"]}]
    assert results["summary"]["policy"]["n"] == 5
    again = cli(*faulty(out, fault), "--resume")  # plays the failed episode again (and only it)
    assert again.returncode == 1 and "1 episode(s) failed" in again.stderr


def test_a_crashed_worker_keeps_finished_episodes_and_says_how_to_go_on(tmp_path):
    out = tmp_path / "run"
    done = cli(*faulty(out, "crash"))
    line = one_line(done.stderr)
    assert done.returncode == 1
    assert "crashed with SIGKILL while playing policy episode 2 (seed 2)" in line
    assert "2 finished episode(s) are kept" in line and "--resume" in line
    assert "--overwrite" in line
    assert len(tapes_in(staging(out))) == 2 and not out.exists()
    status = json.loads((staging(out) / "status.json").read_text())
    assert status["state"] == "failed"
    # The next command tells a failed run from an interrupted one, and how to go on.
    again = cli(*faulty(out, "crash"))
    assert again.returncode == 2
    assert "A failed run of" in one_line(again.stderr) and "--resume" in again.stderr


def test_a_hung_env_is_stopped_by_the_episode_timeout(tmp_path):
    out = tmp_path / "run"
    started = time.monotonic()
    done = cli(*faulty(out, "hang", "--episode-timeout", "3"))
    line = one_line(done.stderr)
    assert done.returncode == 1 and time.monotonic() - started < 60
    assert "--episode-timeout" in line and "episode 2 (seed 2)" in line
    assert len(tapes_in(staging(out))) == 2


def test_episode_timeout_must_be_positive(tmp_path):
    done = cli(*faulty(tmp_path / "run", "none", "--episode-timeout", "0"))
    assert done.returncode == 2 and "--episode-timeout" in one_line(done.stderr)


# -- signals ----------------------------------------------------------------------------

SIGNALS = [  # (how, signal, exit status)
    ("group", signal.SIGINT, 130),
    ("orchestrator", signal.SIGINT, 130),
    ("orchestrator-twice", signal.SIGINT, 130),
    ("group", signal.SIGTERM, 143),
    ("orchestrator", signal.SIGTERM, 143),
]


@pytest.mark.parametrize("how, signum, status", SIGNALS, ids=[f"{h}-{s.name}" for h, s, _ in SIGNALS])
def test_signal_in_pass_one_keeps_what_finished_and_resume_completes_it(tmp_path, how, signum,
                                                                        status):
    out = tmp_path / "run"
    args = faulty(out, "slow", "--workers", "2", at_seed=None, episodes=40)
    proc = start(*args)
    # Rows, not tapes: a worker saves a tape before the orchestrator records its row, and a
    # tape without a row is simply played again on --resume.
    wait_for(lambda: len(rows_in(staging(out))) >= 3)
    if how == "group":
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)
        if how.endswith("twice"):
            time.sleep(0.05)
            proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == status, stderr
    line = one_line(stderr)
    assert "finished episode(s) are kept" in line and "--resume" in line
    wait_for(lambda: group_is_gone(proc.pid), timeout=10)  # no worker left running
    kept = tapes_in(staging(out))
    time.sleep(0.5)
    assert tapes_in(staging(out)) == kept  # nothing is written after the command returned
    assert 3 <= len(rows_in(staging(out))) < 40
    done = cli(*args, "--resume", "--quiet")
    assert done.returncode == 0, done.stderr
    results = json.loads((out / "results.json").read_text())
    assert [r["index"] for r in results["episodes_rows"]] == list(range(40))
    assert len((out / "episodes.jsonl").read_text().splitlines()) == 40
    assert not [p for p in out.rglob("*") if "partial" in p.name or ".old-" in p.name]


def test_ctrl_c_in_pass_two_keeps_the_numbers(tmp_path):
    out = tmp_path / "run"
    args = faulty(out, "slow", "--video", "all", "--format", "gif", "--render-workers", "1",
                  at_seed=None, episodes=30)
    proc = start(*args)
    # pass 1 is done (results.json is written once, when the run ends)
    wait_for(lambda: len(rows_in(staging(out))) == 30)
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "30 finished episode(s)" in one_line(stderr)
    wait_for(lambda: group_is_gone(proc.pid), timeout=10)
    done = cli(*args, "--resume", "--quiet")
    assert done.returncode == 0, done.stderr
    videos = json.loads((out / "results.json").read_text())["videos"]
    assert len(videos) == 30 and all(v["verified"] for v in videos)
    assert not [p for p in out.rglob("*") if "partial" in p.name or "segment" in p.name]


@pytest.mark.parametrize("signum, status, heading", [
    (signal.SIGINT, 130, "Interrupted: "), (signal.SIGTERM, 143, "Interrupted (SIGTERM): ")],
    ids=["SIGINT", "SIGTERM"])
def test_a_signal_in_render_keeps_finished_files_only(tmp_path, signum, status, heading):
    run = evaluate(FAULTY, env_kwargs={"fault": "slow", "at_seed": None}, episodes=20,
                   out=tmp_path / "run", report=False)
    tapes = sorted(str(p) for p in (run.path / "tapes").glob("*.npz"))
    videos = tmp_path / "videos"
    proc = start("render", *tapes, "--env", FAULTY, "--out", f"{videos}/", "--format", "gif",
                 "--quiet")
    def finished() -> list[Path]:  # a video being written is a .partial-*.gif
        return [p for p in videos.glob("*.gif") if "partial" not in p.name]

    wait_for(lambda: len(finished()) >= 2)
    os.killpg(proc.pid, signum)
    _, stderr = proc.communicate(timeout=60)
    line = one_line(stderr)
    assert proc.returncode == status and "of 20 tape(s) were finished" in line
    assert line.startswith(f"rolltape: {heading}")
    wait_for(lambda: group_is_gone(proc.pid), timeout=10)
    assert 2 <= len(finished()) < 20
    assert not [p for p in videos.rglob("*") if "partial" in p.name]


# -- one run per --out ------------------------------------------------------------------

def test_a_second_command_on_a_live_run_is_refused(tmp_path):
    out = tmp_path / "run"
    args = faulty(out, "slow", at_seed=None, episodes=30)
    proc = start(*args, "--quiet")
    wait_for(lambda: len(tapes_in(staging(out))) >= 1)
    for extra in ([], ["--resume"], ["--overwrite"]):
        other = cli(*args, *extra)
        assert other.returncode == 2, (extra, other.stderr)
        assert "Another rolltape process is writing to" in one_line(other.stderr)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    rows = (out / "episodes.jsonl").read_text().splitlines()
    assert len(rows) == 30 and len(tapes_in(out)) == 30


def test_overwrite_and_resume_together_are_refused(tmp_path):
    done = cli(*faulty(tmp_path / "run", "none"), "--overwrite", "--resume")
    assert done.returncode == 2 and "--overwrite and --resume" in one_line(done.stderr)
    assert not (tmp_path / "run").exists() and not staging(tmp_path / "run").exists()


# -- resume never mixes or loses data ----------------------------------------------------

def test_resume_refuses_a_changed_policy_file(tmp_path):
    policy = tmp_path / "mine.py"
    policy.write_text("import numpy as np\ndef act(obs):\n    return np.zeros(1, np.float32)\n")
    out = tmp_path / "run"
    evaluate(FAULTY, f"{policy}:act", episodes=2, out=out, report=False)
    policy.write_text("import numpy as np\ndef act(obs):\n    return np.ones(1, np.float32)\n")
    with pytest.raises(UsageError, match="policy_sha256 was"):
        evaluate(FAULTY, f"{policy}:act", episodes=4, out=out, resume=True, report=False)
    assert len(json.loads((out / "results.json").read_text())["episodes_rows"]) == 2


def test_resume_refuses_a_swapped_checkpoint(ppo_checkpoint, tmp_path):
    model, stats = ppo_checkpoint
    mine = tmp_path / "model.zip"
    mine.write_bytes(model.read_bytes())
    out = tmp_path / "run"
    common = dict(vecnormalize=stats, max_episode_steps=10, report=False, out=out)
    evaluate("HalfCheetah-v5", f"sb3:{mine}", episodes=1, **common)
    mine.write_bytes(model.read_bytes() + b"\0")  # another file under the same name
    with pytest.raises(UsageError, match="policy_sha256 was"):
        evaluate("HalfCheetah-v5", f"sb3:{mine}", episodes=2, resume=True, **common)


def test_resume_plays_again_a_tape_that_was_cut_short(tmp_path):
    out = tmp_path / "run"
    first = evaluate(FAULTY, env_kwargs={"fault": "none"}, episodes=3, out=out, report=False)
    good = (out / "tapes" / "policy-0001.npz").read_bytes()
    original = Tape.load(out / "tapes" / "policy-0001.npz")
    # An interrupted run: staging with a truncated tape and a killed writer's temp file.
    os.rename(out, staging(out))
    (staging(out) / "tapes" / "policy-0001.npz").write_bytes(good[:100])
    (staging(out) / "tapes" / ".policy-0002.npz.partial-999").write_bytes(b"x")
    (staging(out) / "videos" / "policy-0000.partial-999-1.mp4").write_bytes(b"x")
    again = evaluate(FAULTY, env_kwargs={"fault": "none"}, episodes=3, out=out, resume=True,
                     report=False)
    replayed = Tape.load(out / "tapes" / "policy-0001.npz")  # played again: same episode
    assert (replayed.actions == original.actions).all()
    assert (replayed.obs_digest == original.obs_digest).all()
    assert [r["return"] for r in again.results.to_json()["episodes_rows"]] == \
        [r["return"] for r in first.results.to_json()["episodes_rows"]]
    assert not [p for p in out.rglob("*") if "partial" in p.name]


def test_a_full_disk_during_pass_one_is_one_line_and_keeps_what_finished(small_disk):
    out = small_disk / "run"
    ballast = fill(small_disk, 200_000)
    done = cli("eval", "HalfCheetah-v5", "--episodes", "20", "--max-episode-steps", "200",
               "--out", str(out), "--quiet", "--no-report")
    line = one_line(done.stderr)
    assert done.returncode == 1 and "No space left on device" in line and "--resume" in line
    kept = [json.loads(x) for x in (staging(out) / "episodes.jsonl").read_text().splitlines()]
    for row in kept:  # every episode counted as done has a whole tape
        assert Tape.load(staging(out) / row["tape"]).length == row["length"]
    ballast.unlink()
    again = cli("eval", "HalfCheetah-v5", "--episodes", "20", "--max-episode-steps", "200",
                "--out", str(out), "--quiet", "--no-report", "--resume")
    assert again.returncode == 0, again.stderr
    assert len(json.loads((out / "results.json").read_text())["episodes_rows"]) == 20


def test_a_resume_whose_copy_fails_leaves_the_finished_run_untouched(small_disk):
    out = small_disk / "run"
    args = ["eval", "HalfCheetah-v5", "--max-episode-steps", "200", "--out", str(out), "--quiet",
            "--no-report"]
    assert cli(*args, "--episodes", "4").returncode == 0
    before = {p.name: p.read_bytes() for p in tapes_in(out)}
    ballast = fill(small_disk, 50_000)
    done = cli(*args, "--episodes", "8", "--resume")
    assert done.returncode == 2 and "untouched" in one_line(done.stderr)
    assert not staging(out).exists()
    ballast.unlink()
    again = cli(*args, "--episodes", "8", "--resume")
    assert again.returncode == 0, again.stderr
    after = {p.name: p.read_bytes() for p in tapes_in(out)}
    assert len(after) == 8 and all(after[name] == data for name, data in before.items())


def test_api_raises_run_failed_with_what_was_kept(tmp_path):
    with pytest.raises(RunFailed, match="2 finished episode"):
        evaluate(FAULTY, env_kwargs={"fault": "crash", "at_seed": 2}, episodes=4,
                 out=tmp_path / "run", report=False)


def test_a_full_disk_while_rendering_is_one_line_and_leaves_no_partial_file(small_disk, tmp_path):
    # 60 frames make a ~64 KB video: three times the space left.
    run = evaluate("HalfCheetah-v5", episodes=1, max_episode_steps=60, out=tmp_path / "run",
                   report=False)
    fill(small_disk, 20_000)
    done = cli("render", str(run.path / "tapes" / "policy-0000.npz"), "--out",
               str(small_disk / "ep.mp4"), "--quiet")
    assert done.returncode != 0 and "No space left on device" in one_line(done.stderr)
    assert sorted(p.name for p in small_disk.iterdir()) == ["ballast"]


def test_a_small_disk_holds_a_run_with_its_viewer(small_disk):
    """The 3-D replay's ~13 MB of WebAssembly is shared by the installation, not copied into
    each run: a run with its report and viewer fits on a 3 MiB disk, whole. (A report that
    does not fit is tests/test_run_warnings.py's.)"""
    out = small_disk / "run"
    done = cli("eval", "HalfCheetah-v5", "--episodes", "2", "--max-episode-steps", "50",
               "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    results = json.loads((out / "results.json").read_text())
    assert len(results["episodes_rows"]) == 2
    viewer = sum(p.stat().st_size for p in (out / "viewer").rglob("*") if p.is_file())
    assert 0 < viewer < 1_000_000, viewer  # the run's own files only
    assert not [p for p in out.rglob("*") if "partial" in p.name or ".old-" in p.name]


# -- no worker outlives its run ---------------------------------------------------------

CHEETAH_VIDEO = ["HalfCheetah-v5", "--max-episode-steps", "3000", "--format", "gif",
                 "--width", "320", "--height", "240", "--render-workers", "3"]
ORPHANS = {  # SIGKILL the orchestrator while: (eval's arguments, pass 1 done, its workers)
    # a pass-1 worker stuck in env.step (a hung env), warm render workers waiting for jobs
    "pass1": ([*faulty(Path("run"), "hang", "--video", "all", "--render-workers", "3",
                       at_seed=1, episodes=3)[1:]], False,
              {"policy_worker": 1, "render_worker": 3}),
    # render workers each drawing a long segment (minutes of work)
    "pass2": ([*CHEETAH_VIDEO, "--episodes", "1", "--video", "all"], True,
              {"render_worker": 3}),
    # render workers that a thread started (pass 2 beside pass 1), drawing episode 0
    "render-early": ([*CHEETAH_VIDEO, "--episodes", "40", "--video", "1", "--render-early"],
                     False, {"policy_worker": 1, "render_worker": 3}),
}


@pytest.mark.parametrize("when", ORPHANS)
def test_no_worker_outlives_a_sigkilled_orchestrator(tmp_path, when):
    """A harness timeout SIGKILLs the command: every process it started, busy or idle,
    exits within 5 s (a busy one would otherwise finish its episode or video first)."""
    args, pass1_done, workers = ORPHANS[when]
    args = [str(tmp_path / "run") if a == "run" else a for a in args]
    mark = f"{when}-{os.getpid()}-{time.monotonic_ns()}"
    folder = staging(tmp_path / "run")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rolltape.cli", "eval", *args, "--quiet", "--no-report",
         "--out", str(tmp_path / "run")], cwd=ROOT, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, env={**os.environ, "ROLLTAPE_TEST_RUN": mark},
        start_new_session=True)

    def ready() -> bool:
        running = marked(mark)
        # "pass2" plays one episode: pass 1 is done once its row is recorded (results.json
        # is written only when the run ends)
        done = folder.is_dir() and bool(rows_in(folder))
        return proc.poll() is not None or ((done or not pass1_done) and all(
            count(running, name) >= n for name, n in workers.items()))

    try:
        wait_for(ready, timeout=90)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.5)  # the render workers are drawing, pass 1's is in its episode
        started = marked(mark)
        proc.kill()
        proc.wait(5)
        end = time.monotonic() + 5
        while marked(mark) and time.monotonic() < end:
            time.sleep(0.1)
        assert not marked(mark), f"alive 5 s after SIGKILL: {marked(mark)} of {started}"
    finally:
        for pid in marked(mark):  # never leave them to the rest of the suite
            os.kill(pid, signal.SIGKILL)


def test_a_worker_started_by_a_thread_outlives_the_thread_not_the_process():
    """PR_SET_PDEATHSIG fires when the *thread* that started a child ends: a worker that a
    short-lived thread asked for (pass 2 beside pass 1) must live on until it is stopped."""
    import threading

    from rolltape.executors.launch import spawn_worker, stop_worker
    from rolltape.pass2.replay import render_worker

    started = []

    def start_and_end() -> None:
        started.append(spawn_worker(render_worker, None, 0, 0, cwd_on_path=False))
        time.sleep(1.5)  # the child has armed its guard by now (it fires for a later end)

    thread = threading.Thread(target=start_and_end)
    thread.start()
    thread.join()
    time.sleep(1.0)  # longer than the orphan guard's look at its parent
    worker = started[0]
    try:
        assert worker.alive()
    finally:
        stop_worker(worker)
    assert worker.proc.returncode == 0


# -- every verb stops on SIGTERM as eval does ---------------------------------------------

def catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has installed a handler for ``signum`` (/proc: SigCgt)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next(int(line.split()[1], 16) for line in status.splitlines()
                if line.startswith("SigCgt:"))
    return bool(mask >> (signum - 1) & 1)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two runs on the same seeds, large enough that compare takes a moment to write."""
    root = tmp_path_factory.mktemp("compare")
    for name in ("a", "b"):
        done = cli("eval", FAULTY, "-n", "2000", "--seed", "0", "--quiet", "--no-report",
                   "--out", str(root / name))
        assert done.returncode == 0, done.stderr
    return root / "a", root / "b"


@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)],
                         ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("when", ["started", "writing"])
def test_a_signal_stops_compare_with_one_line_and_no_half_comparison(two_runs, tmp_path,
                                                                     when, signum, status):
    """compare had no SIGTERM handler (killed with no word). Sent once the command has
    started, or while it writes its folder (the process is held with SIGSTOP meanwhile,
    so that the signal lands there), it says so in one line, exits 143 (130) and leaves no
    comparison.json without its html."""
    out = tmp_path / "cmp"
    proc = start("compare", *map(str, two_runs), "--out", str(out))
    try:
        if when == "started":
            wait_for(lambda: catches(proc.pid, signal.SIGTERM), timeout=30)
            time.sleep(0.3)  # into its work, past the interpreter's start
        else:
            end = time.monotonic() + 60
            while not out.exists() and proc.poll() is None and time.monotonic() < end:
                time.sleep(0.001)  # it writes for ~50 ms: wait_for's 50 ms steps are too coarse
            proc.send_signal(signal.SIGSTOP)
            assert not (out / "comparison.html").exists()  # caught before it finished
        proc.send_signal(signum)
        proc.send_signal(signal.SIGCONT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    # Once in a loaded CI run, a compare that printed its line and returned 130 on Ctrl-C
    # ended as killed by SIGINT (-2), which a shell reports as 130 too; accepted, noted.
    assert proc.returncode == status or (signum == signal.SIGINT and proc.returncode == -2), \
        stderr
    heading = "Interrupted (SIGTERM)" if signum == signal.SIGTERM else "Interrupted"
    assert one_line(stderr).startswith(f"rolltape: {heading}: `rolltape compare` stopped")
    assert not out.exists()


def test_warm_render_workers_are_bounded_by_the_work(tmp_path):
    """--render-workers 12 for two 40-step videos: each is one segment, so two workers
    start ahead (twelve started whatever the work: 100000 took the load to ~400)."""
    mark = f"bounded-{os.getpid()}-{time.monotonic_ns()}"
    args = faulty(tmp_path / "run", "hang", "--video", "all", "--render-workers", "12",
                  "--max-episode-steps", "40", at_seed=1, episodes=2)
    proc = subprocess.Popen([sys.executable, "-m", "rolltape.cli", *args, "--quiet"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "ROLLTAPE_TEST_RUN": mark},
                            start_new_session=True)
    try:  # episode 0 is done (so they start), episode 1 hangs: pass 1 goes on meanwhile
        wait_for(lambda: count(marked(mark), "render_worker") >= 2, timeout=60)
        time.sleep(2.0)  # any more would have been started at the same moment
        running = marked(mark)
        assert count(running, "render_worker") == 2, [a[-3:] for a in running.values()]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
