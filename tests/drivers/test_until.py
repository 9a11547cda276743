"""`rolltape eval --until`: real evaluations (CartPole-v1, the toy success env) that stop when
the answer is known. An easy pair (a balancing rule against random) is decided at the first
look and saves most of the budget; a hard pair (always-left against always-right, equal on
average) runs to --max-episodes; a success rate stops once its anytime-valid interval is
narrow enough; a run stopped by Ctrl-C continues with --resume and reaches the same
decision at the same episode as a run never stopped. Bad flags are one line, exit 2."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import interruptible, run_cli
from rolltape.record import Run

ROOT = Path(__file__).resolve().parents[2]  # the repository
BALANCE = "tests.assets.policies:cartpole_balance"
TOY = "tests.assets.toy_envs:SuccessToy-v0"


def until_json(folder: Path) -> dict:
    return json.loads((folder / "until.json").read_text())


def test_an_easy_pair_is_decided_early_and_saves_most_of_the_budget(tmp_path):
    out = tmp_path / "ab"
    done = run_cli("eval", "CartPole-v1", "-p", BALANCE, "-p", "random", "--until", "decided",
                   "--max-episodes", "100", "--return-bounds", "0,500", "--seed", "3",
                   "--out", str(out), "-q", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    result = until_json(out)
    assert result["stopped"] and result["episodes"] < 100
    assert result["saved"]["CartPole-v1"] == 2 * (100 - result["episodes"])
    last = result["looks"][-1]["tasks"]["CartPole-v1"]
    assert last["verdict"] == "cartpole_balance better" and last["anytime"][0] > 0
    # The anytime-valid interval is wider than the fixed-n one of the same episodes.
    assert last["anytime"][1] - last["anytime"][0] > last["fixed_n"][1] - last["fixed_n"][0]
    assert "95% anytime-valid" in done.stdout and "saved" in done.stdout
    for label in ("cartpole_balance", "policy-random"):  # seed + i, as any run
        run = Run.load(out / label)
        assert [e.key.seed for e in run.results.episodes] == [3 + i for i in
                                                              range(result["episodes"])]
    comparison = json.loads((out / "comparison.json").read_text())
    assert comparison["episodes"] == result["episodes"]
    assert (out / "until.svg").read_text().startswith("<svg")
    page = (out / "comparison.html").read_text()
    assert "Stopping (--until decided)" in page and page.count("<svg") >= 2


def test_a_hard_pair_runs_to_max_episodes(tmp_path):
    out = tmp_path / "lr"
    done = run_cli("eval", "CartPole-v1", "-p", "tests.assets.policies:cartpole_left", "-p",
                   "tests.assets.policies:cartpole_right", "--until", "decided",
                   "--max-episodes", "30", "--return-bounds", "0,500", "--out", str(out),
                   "-q", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    result = until_json(out)
    assert not result["stopped"] and result["episodes"] == 30
    assert [lk["episodes"] for lk in result["looks"]] == [10, 20, 30]
    assert "ran to --max-episodes 30" in result["reason"]
    assert result["looks"][-1]["tasks"]["CartPole-v1"]["verdict"] == "not decided"
    # The direction is named everywhere (which minus which), and the page's verdict is the
    # anytime-valid one: the fixed-n table follows, labelled, with no green or red verdict.
    assert result["difference"] == "cartpole_left − cartpole_right"
    assert result["verdict"] == {"CartPole-v1": "not decided"}
    assert "not decided: difference cartpole_left − cartpole_right = " in done.stdout
    assert "not valid after looking" in done.stdout
    page = (out / "comparison.html").read_text()
    first = page.index("Verdict (--until decided: 95% anytime-valid)")
    assert first < page.index("Fixed-n intervals (not valid after looking)")
    assert "difference cartpole_left − cartpole_right" in page
    assert 'class="better"' not in page and 'class="worse"' not in page


def _toy_until(out: Path, env: str, *extra: str) -> list[str]:
    return ["eval", env, "--until", "width<45", "--max-episodes", "200", "--out", str(out),
            "--no-report", *extra]


def test_resume_of_a_stopped_until_run_reaches_the_same_decision(tmp_path):
    clean = tmp_path / "clean"
    done = run_cli(*_toy_until(clean, TOY, "-q"), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    reference = until_json(clean)
    assert reference["stopped"] and 10 < reference["episodes"] < 200
    assert reference["looks"][-1]["tasks"][TOY]["measure"] == "success"
    # The same env, slowed down (0.05 s a step), stopped by Ctrl-C in its second batch.
    slow = tmp_path / "slow"
    env = "tests.assets.toy_envs:FaultToy-v0"
    args = _toy_until(slow, env, "--env-kwargs", "fault='slow'")
    proc = subprocess.Popen([sys.executable, "-m", "rolltape.cli", *args, "-q"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=interruptible)
    staging = slow.with_name(".slow.partial") / "episodes.jsonl"
    end = time.monotonic() + 120
    while not (staging.is_file() and len(staging.read_text().splitlines()) >= 13):
        assert time.monotonic() < end and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert not (slow / "until.json").exists()
    resumed = run_cli(*args, "--resume", "-q", cwd=ROOT)
    assert resumed.returncode == 0, resumed.stderr
    again = until_json(slow)
    assert again["episodes"] == reference["episodes"]
    assert again["reason"] == reference["reason"]
    assert [lk["tasks"][env] for lk in again["looks"]] == \
        [lk["tasks"][TOY] for lk in reference["looks"]]
    run = Run.load(slow)
    assert [e.key.index for e in run.results.episodes] == list(range(again["episodes"]))


@pytest.mark.parametrize("extra, needle", [
    (["--max-episodes", "50"], "add --until"),
    (["--until", "soon", "--max-episodes", "50"], "not a stopping rule"),
    (["--until", "width<0", "--max-episodes", "50"], "above 0"),
    (["--until", "decided"], "needs --max-episodes"),
    (["--until", "width<5", "--max-episodes", "50", "--margin", "1"], "--margin applies"),
    (["--until", "width<5", "--max-episodes", "50", "--batch", "60"], "below one --batch"),
    (["--until", "width<5", "--max-episodes", "20", "--return-bounds", "5"], "not LO,HI"),
])
def test_bad_until_flags_are_one_line_and_exit_2(tmp_path, extra, needle):
    out = tmp_path / "bad"
    done = run_cli("eval", "CartPole-v1", *extra, "--out", str(out), "-q", cwd=ROOT)
    assert done.returncode == 2, done.stderr
    assert needle in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()


def test_returns_without_bounds_are_refused_with_the_fix(tmp_path):
    out = tmp_path / "nob"
    done = run_cli("eval", "CartPole-v1", "--until", "width<50", "--max-episodes", "20",
                   "--out", str(out), "-q", cwd=ROOT)
    assert done.returncode == 2
    assert "--return-bounds" in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()  # the batch it played to find out is not left behind


SUITE = """
pattern:
  tasks:
    end: {env: "tests.assets.suite_envs:SuccessPattern", kwargs: {report: end, at: 2}}
    never: {env: "tests.assets.suite_envs:SuccessPattern", kwargs: {report: never}}
"""


def test_a_suite_stops_when_every_task_is_narrow_each_in_its_own_measure(tmp_path):
    manifest = tmp_path / "two.yaml"
    manifest.write_text(SUITE)
    out = tmp_path / "suite"
    done = run_cli("eval", "--suite", str(manifest), "--until", "width<45", "--return-bounds",
                   "-6,0", "--max-episodes", "200", "--out", str(out), "-q", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    result = until_json(out)
    tasks = result["looks"][-1]["tasks"]
    assert tasks["pattern/end"]["measure"] == "success"  # seeds divisible by 3 succeed
    assert tasks["pattern/never"]["measure"] == "return"  # no success key: its returns
    assert result["stopped"] and all(t["width"] < 45 for t in tasks.values())
    # The success task is the slow one: the look before, it was still too wide.
    assert result["looks"][-2]["tasks"]["pattern/end"]["width"] >= 45
    n = result["episodes"]
    assert result["episodes_spent"] == {"pattern/end": n, "pattern/never": n}
    rate = sum(1 for i in range(n) if i % 3 == 0) / n * 100
    assert tasks["pattern/end"]["estimate"] == pytest.approx(rate)
    lo, hi = tasks["pattern/end"]["anytime"]
    assert lo < rate < hi
    assert "Stopping (--until width&lt;45)" in (out / "report.html").read_text()


def test_a_failed_episode_stops_the_looks_and_keeps_the_run_for_resume(tmp_path):
    out = tmp_path / "fail"
    done = run_cli("eval", "tests.assets.toy_envs:FaultToy-v0", "--env-kwargs",
                   "fault='raise_step'", "--env-kwargs", "at_seed=12", "--until", "width<10",
                   "--max-episodes", "40", "--out", str(out), "--no-report", "-q", cwd=ROOT)
    assert done.returncode == 1, done.stderr
    assert "episode 12 (seed 12)" in done.stderr and "--resume" in done.stderr
    assert "Traceback" not in done.stderr and not (out / "until.json").exists()
    kept = Run.load(out).results  # the batches played are kept, not removed
    assert len(kept.episodes) == 19 and len(kept.failed) == 1


def test_a_margin_decides_a_pair_equivalent_once_the_interval_fits_inside_it(tmp_path):
    out = tmp_path / "eq"
    done = run_cli("eval", "CartPole-v1", "-p", "tests.assets.policies:cartpole_left", "-p",
                   "tests.assets.policies:cartpole_right", "--until", "decided", "--margin",
                   "100", "--max-episodes", "100", "--return-bounds", "0,500", "--out",
                   str(out), "-q", "--no-report", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    result = until_json(out)
    last = result["looks"][-1]["tasks"]["CartPole-v1"]
    assert result["stopped"] and result["episodes"] < 100
    assert last["verdict"] == "equivalent within 100"
    assert -100 <= last["anytime"][0] and last["anytime"][1] <= 100
    before = result["looks"][-2]["tasks"]["CartPole-v1"]["anytime"]
    assert before[0] < -100 or before[1] > 100  # one look earlier it did not fit yet
