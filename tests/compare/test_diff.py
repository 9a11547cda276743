"""`rolltape diff` on real runs that differ in exactly one knob: it names the knob (the
protocol card and the classification), the first diverging episode, step and field, and
what the knob did to the numbers; the same config on 1 or 2 workers is "no difference";
damaged and foreign folders are one sentence and exit 2.

Hopper-v5 episodes of at most 30 steps (a deterministic policy of the observation) and a
dot on an 8x8 picture (a dict observation with is_success, a policy that reads the
picture), and rolltape's demo PPO on Pusher per row and batched: 14 short evaluations (one on `rolltape serve`), two
at a time, ~55 s in all.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import rolltape
from conftest import Server
from rolltape.cli import main
from rolltape.compare.diff import diff_runs, report_lines

HERE = Path(__file__).resolve().parent
HOPPER = ["Hopper-v5", "--policy", f"{HERE / 'diff_knobs.py'}:act", "-n", "3",
          "--max-episode-steps", "30"]
DOT = ["diff_knobs:Dot-v0", "--policy", f"{HERE / 'diff_knobs.py'}:look", "-n", "10"]
DEMO = Path(rolltape.__file__).parent / "demo"  # a real SB3 MLP (PPO) shipped with rolltape
PUSHER = ["Pusher-v5", "--policy", f"sb3:{DEMO / 'policy.zip'}", "--vecnormalize",
          str(DEMO / "vecnormalize.pkl"), "-n", "4", "--max-episode-steps", "30",
          "--workers", "2"]
RUNS: dict[str, list[str]] = {
    "hopper": HOPPER,
    "workers2": HOPPER + ["--workers", "2"],
    "horizon": HOPPER[:-1] + ["12"],
    "sign": HOPPER + ["--wrapper", "diff_knobs:ActionGain,gain=-1.0,dim=1"],
    "scale": HOPPER + ["--wrapper", "diff_knobs:ActionGain,gain=2.0"],
    "frame_skip": HOPPER + ["--env-kwargs", "frame_skip=8"],
    "kwarg": HOPPER + ["--env-kwargs", "ctrl_cost_weight=0.01"],
    "latency": HOPPER + ["--latency", "1"],  # a simulated inference latency of one step
    "dot": DOT,
    "flip": DOT + ["--wrapper", "diff_knobs:FlipPixels"],
    "once": DOT + ["--success", "once"],
    "served": ["{served}/Hopper-v5", *HOPPER[1:]],  # the env stepped by `rolltape serve`
    "per_row": PUSHER,
    "batched": PUSHER + ["--batched-inference"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every run of RUNS, made by the real command, two at a time."""
    root = tmp_path_factory.mktemp("diff")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    names = list(RUNS)
    server = Server(what=("Hopper-v5", "--max-episode-steps", "30"))
    try:
        for k in range(0, len(names), 2):
            procs = [(n, subprocess.Popen(
                [sys.executable, "-m", "rolltape.cli", "eval",
                 *[a.replace("{served}", server.address) for a in RUNS[n]], "--no-report",
                 "--out", str(root / n)], env=env, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True)) for n in names[k:k + 2]]
            for n, p in procs:
                out, _ = p.communicate(timeout=300)
                assert p.returncode == 0, f"{n}: {out[-2000:]}"
    finally:
        server.stop()
    return {n: root / n for n in names}


def _diff(runs: dict[str, Path], a: str, b: str) -> dict[str, Any]:
    return diff_runs(runs[a], runs[b])


def _fields(report: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    return {d["field"]: (d["a"], d["b"]) for d in report["card"]["differences"]}


def test_the_same_config_locally_and_served_is_no_difference(runs):
    report = _diff(runs, "hopper", "served")
    assert report["verdict"] == "no difference"
    assert _fields(report) == {"execution.env_process": ("local", "served (rolltape serve)")}
    # the served env's simulator is on its server: its card does not say its control rate
    assert any(n.startswith("envs.env.control") for n in report["card"]["not_compared"])
    assert report["paired"] == 3 and not any(e["divergence"] for e in report["episodes"])


def test_the_same_config_on_one_or_two_workers_is_no_difference(runs):
    report = _diff(runs, "hopper", "workers2")
    assert report["verdict"] == "no difference"
    assert report["card"]["differences"] == [] and report["card"]["not_compared"] == []
    assert report["paired"] == 3 and report["first"] is None
    assert report["numbers"]["outcome_differs"] == 0
    assert report["numbers"]["returns"]["mean_diff"] == 0


# knob -> (card field that names it, kind, first step, first field)
KNOBS = {
    "horizon": ("envs.env.max_episode_steps", "horizon", 11, "truncated"),
    "sign": ("policy.wrappers", "action_sign", 0, "action"),
    "scale": ("policy.wrappers", "action_scale", 0, "action"),
    "frame_skip": ("envs.env.control.frame_skip", "control_rate", 0, "obs"),
    "kwarg": ("envs.env.kwargs.ctrl_cost_weight", "reward", 0, "reward"),
    "latency": ("policy.latency", "time_shift", 0, "action"),
}


@pytest.mark.parametrize("knob", list(KNOBS))
def test_one_knob_on_hopper_is_named_with_its_first_diverging_step(runs, knob):
    field, kind, step, where = KNOBS[knob]
    report = _diff(runs, "hopper", knob)
    assert field in _fields(report), report["card"]
    first = report["first"]
    assert first["index"] == 0
    d = first["divergence"]
    assert (d["kind"], d["step"], d["field"]) == (kind, step, where), d
    assert report["kinds"] == {kind: 3}  # every episode parts the same way
    assert report["verdict"] == "differs"
    assert report["numbers"]["return_changed"] == 3
    lo, hi = report["numbers"]["returns"]["diff_ci"]
    assert lo <= report["numbers"]["returns"]["mean_diff"] <= hi


def test_the_card_and_the_classifier_say_what_the_knob_was(runs):
    sign = _diff(runs, "hopper", "sign")
    assert sign["first"]["divergence"]["dims"] == [1]
    assert _fields(sign)["policy.wrappers"] == ([], ["diff_knobs:ActionGain,gain=-1.0,dim=1"])
    scale = _diff(runs, "hopper", "scale")["first"]["divergence"]
    assert scale["ratio"] == pytest.approx(2.0) and scale["dims"] == [0, 1, 2]
    skip = _fields(_diff(runs, "hopper", "frame_skip"))
    assert skip["envs.env.control.dt"] == (0.008, 0.016)
    assert skip["envs.env.kwargs.frame_skip"] == (None, 8)
    horizon = _diff(runs, "hopper", "horizon")
    assert _fields(horizon)["envs.env.max_episode_steps"] == (30, 12)
    text = "\n".join(report_lines(horizon))
    assert "a different horizon" in text and "step 11, truncated" in text


def test_an_image_flipped_for_the_policy_is_named_at_the_reset(runs):
    report = _diff(runs, "dot", "flip")
    assert _fields(report) == {"policy.wrappers": ([], ["diff_knobs:FlipPixels"])}
    d = report["first"]["divergence"]
    assert (d["kind"], d["step"], d["field"], d["form"]) == (
        "policy_input_transform", None, "policy input obs['pixels']", "flip_vertical")
    assert "flipped vertically" in d["sentence"]
    numbers = report["numbers"]
    assert numbers["outcome_differs"] > 0 and numbers["success"]["diff"] < 0


def test_the_success_rule_counts_the_same_episodes_differently(runs):
    report = _diff(runs, "dot", "once")
    assert _fields(report) == {"envs.env.success_rule": ("at_end", "once")}
    assert set(report["kinds"]) == {"success_rule"}
    assert report["numbers"]["return_changed"] == 0
    assert report["numbers"]["outcome_differs"] == report["kinds"]["success_rule"] > 0
    assert report["numbers"]["success"]["diff"] > 0


def test_the_cli_prints_the_card_then_the_first_divergence_then_the_numbers(runs, capsys):
    page = runs["sign"].parent / "diff.html"
    assert main(["diff", str(runs["hopper"]), str(runs["sign"]), "--explain",
                 "--episode", "1", "--json", str(runs["sign"].parent / "d.json"),
                 "--html", str(page)]) == 0
    lines = capsys.readouterr().out.splitlines()
    text = "\n".join(lines)
    assert "policy.wrappers" in text
    assert "first divergence: episode 1 (seed 1), step 0, action" in text
    assert "action_sign: B's action is A's with the sign flipped on dimension 1" in text
    assert lines[-1] == "verdict: differs"
    saved = json.loads((runs["sign"].parent / "d.json").read_text())
    assert saved["paired"] == 1
    html = page.read_text()  # the cards side by side, the difference marked; the episode
    assert '<span class="worse">policy.wrappers</span>' in html
    assert "episode 1 (seed 1)" in html and "action_sign" in html and "<script" not in html
    # the first diverging episode's two videos, replayed from the tapes and verified, both
    # started at the step where they part (0 here: the action at the reset)
    for side in "AB":
        video = page.with_name(f"diff-{side}.mp4")
        assert video.stat().st_size > 0 and f'src="{video.name}#t=0.0"' in html
        sidecar = json.loads(video.with_name(video.name + ".metadata.json").read_text())
        assert sidecar["result"]["verified"] is True, sidecar["result"]
    assert html.count('<span class="better">verified</span>') == 2
    assert "diverges at step 0 (t = 0.0 s)" in html


def test_an_older_run_without_a_card_is_diffed_as_far_as_its_metadata_goes(runs, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(runs["hopper"], old)
    (old / "protocol.json").unlink()
    report = diff_runs(old, runs["workers2"])
    assert any("control rate" in n for n in report["card"]["not_compared"])
    assert report["paired"] == 3 and not any(e["divergence"] for e in report["episodes"])
    assert "not compared: control rate" in "\n".join(report_lines(report))


def _damaged(runs: dict[str, Path], tmp_path: Path) -> dict[str, Path]:
    made = {}
    for name in ("no_results", "bad_json", "no_tape", "bad_tape"):
        made[name] = tmp_path / name
        shutil.copytree(runs["hopper"], made[name])
    (made["no_results"] / "results.json").unlink()
    (made["bad_json"] / "results.json").write_text("{not json")
    tape = sorted((made["no_tape"] / "tapes").glob("*.npz"))[0]
    tape.unlink()
    tape = sorted((made["bad_tape"] / "tapes").glob("*.npz"))[0]
    tape.write_bytes(tape.read_bytes()[:200])
    made["foreign"] = tmp_path / "foreign"
    made["foreign"].mkdir()
    (made["foreign"] / "notes.txt").write_text("not a run")
    made["missing"] = tmp_path / "missing"
    return made


def test_batched_inference_against_per_row_is_rounding_only_with_outcomes_counted(runs):
    report = _diff(runs, "per_row", "batched")
    assert _fields(report) == {"execution.batch_size": (1, 2)}
    assert report["verdict"] == "rounding only" and set(report["kinds"]) == {"rounding"}
    d = report["first"]["divergence"]
    assert (d["step"], d["field"]) == (0, "action") and "batch_size (1 vs 2)" in d["sentence"]
    assert report["numbers"]["outcome_differs"] == 0  # stated, whatever it is
    assert "0 of 4 episode(s) differ in success" in "\n".join(report_lines(report))


def test_damaged_or_foreign_folders_are_one_sentence_and_exit_2(runs, tmp_path, capsys):
    for name, folder in _damaged(runs, tmp_path).items():
        assert main(["diff", str(runs["hopper"]), str(folder)]) == 2, name
        err = capsys.readouterr().err.strip()
        assert err.startswith("rolltape: ") and "\n" not in err and "Traceback" not in err, err
        assert str(folder) in err, (name, err)
