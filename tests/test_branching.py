"""``rolltape branch``: episodes continued from their tapes' recorded states.

- Part 1, restoring to continue: with noise 0 a deterministic policy's branch from any step
  t replays the rest of the episode bit for bit (HalfCheetah, Pusher), and every branch is
  a tape that re-simulates (``verify``).
- The estimate finds a known decisive step: on Ledge-v0 (tests/assets/ledge.py) the first
  kick at step k carries the block over the ledge, so P(success | state at t) drops from
  >= 0.8 to 0 between t = k and t = k + 1; the curve's 0.5 crossing must lie within 2 steps.
- Bad input: one sentence, exit 2, nothing left behind.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rolltape import RenderRequest, evaluate, render
from rolltape.branching import branch, same_as_source
from rolltape.cli import main
from rolltape.tape import Tape

ASSETS = Path(__file__).parent / "assets"
LEDGE = f"{ASSETS / 'ledge.py'}:Ledge-v0"
HALF_CHEETAH = f"{ASSETS / 'policies.py'}:function"
PUSHER = f"{ASSETS / 'ledge.py'}:pusher"


@pytest.mark.parametrize("env_id, policy", [("HalfCheetah-v5", HALF_CHEETAH),
                                            ("Pusher-v5", PUSHER)])
def test_a_branch_without_noise_replays_the_episode_bit_for_bit(tmp_path, env_id, policy):
    run = evaluate(env_id, policy, episodes=1, seed=3, max_episode_steps=30, video=0,
                   baseline=None, out=tmp_path / "run")
    result = branch(str(run.path), episodes="all", branches=1, every=7, noise=0.0,
                    policy=policy, workers=1)
    [record] = result.episodes
    assert record["grid"] == [0, 7, 14, 21, 28]
    assert record["replays_source"] is True
    source = Tape.load(run.path / "tapes" / "policy-0000.npz")
    tapes = sorted((result.out / "policy-0000" / "tapes").glob("*.npz"))
    assert len(tapes) == 5
    for t, path in zip(record["grid"], tapes):
        tape = Tape.load(path)
        assert same_as_source(tape, source, t)  # actions, rewards, both flags
        assert tape.start_step == max(0, t - 1) and tape.meta["step"] == t
        # the physics states too: the branch continued from exactly the recorded state
        assert np.array_equal(tape.physics, source.physics[max(0, t - 1):])
    # Each branch is a tape: it re-simulates and verifies like any other.
    assert all(r.verified for r in render([RenderRequest(str(p)) for p in tapes[1:3]]))
    # Without a success signal the estimate is the expected return from t; noise 0 gives
    # the recorded one.
    for point in record["points"]:
        assert point["p"] == pytest.approx(point["recorded"], rel=1e-12, abs=1e-12)


@pytest.fixture(scope="module")
def ledge_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ledge") / "run"
    return evaluate(LEDGE, "random", episodes=20, seed=0, max_episode_steps=20, video=0,
                    baseline=None, out=out)


def _first_kick(tape: Tape) -> int:
    kicks = np.flatnonzero(tape.actions[:, 0] > 0.98)
    return int(kicks[0])


def test_the_curve_crosses_one_half_where_the_episode_was_decided(ledge_run, capsys):
    failed = [e for e in ledge_run.results.of_role("policy") if e.success_at_end is False]
    assert len(failed) >= 2  # seeds 0..19: several episodes were kicked off the ledge
    code = main(["branch", str(ledge_run.path), "--episodes", "worst:2", "--branches", "8",
                 "--every", "1", "--env", LEDGE, "-q"])
    shown = capsys.readouterr().out
    assert code == 0
    assert shown.count("point of no return at step") == 2
    records = [json.loads(p.read_text())
               for p in sorted((ledge_run.path / "branch").glob("*/branch.json"))]
    assert len(records) == 2
    for record in records:
        tape = Tape.load(ledge_run.path / record["episode"]["tape"])
        k = _first_kick(tape)
        assert record["episode"]["success"] is False
        assert record["estimate"] == "P(success | state at t)"
        assert abs(record["crossing"] - k) <= 2, (record["crossing"], k)
        assert abs(record["point_of_no_return"] - k) <= 2
        before = [p for p in record["points"] if p["t"] <= k]
        after = [p for p in record["points"] if p["t"] > k]
        assert all(p["p"] == 0 and p["hi"] < 0.5 for p in after)
        assert np.mean([p["p"] for p in before]) > 0.6
        for p in record["points"]:
            assert p["n"] == 8 and p["lo"] <= p["p"] <= p["hi"]
        png = ledge_run.path / "branch" / Path(record["episode"]["tape"]).stem / "branch.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # A budget thins the grid and says so.
    code = main(["branch", str(ledge_run.path), "--episodes", "worst:1", "--branches", "2",
                 "--every", "1", "--budget", "150", "--env", LEDGE, "--overwrite", "-q"])
    shown = capsys.readouterr().out
    assert code == 0 and "grid thinned from every 1 to every 4 steps" in shown
    [record] = [json.loads(p.read_text()) for p in (ledge_run.path / "branch").glob("*/branch.json")]
    assert record["every"] == 4 and record["asked_every"] == 1
    assert 2 * sum(record["episode"]["length"] - t + 1 for t in record["grid"]) <= 150


def test_bad_input_is_one_sentence_and_exit_2(ledge_run, tmp_path, capsys):
    out = tmp_path / "b"

    def refused(*args: str) -> str:
        assert main(["branch", *args, "-q"]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("rolltape: ")
        assert not out.exists()  # no half-written results
        return lines[0]

    run = str(ledge_run.path)
    assert "--branches must be at least 1" in refused(run, "--branches", "0", "-o", str(out))
    assert "not a rolltape run" in refused(str(tmp_path / "none"), "-o", str(out))
    assert "a tape may not run code" in refused(run, "-o", str(out))
    assert "--episodes asks for episode 40" in refused(run, "--episodes", "3,40", "--env", LEDGE,
                                                       "-o", str(out))
    assert "cannot hold even one grid point" in refused(run, "--budget", "5", "--env", LEDGE,
                                                        "-o", str(out))
    # An env whose state is more than MuJoCo's (a generator drawn from at every step).
    noisy = evaluate(f"{ASSETS / 'ledge.py'}:NoisyLedge-v0", "random", episodes=1,
                     max_episode_steps=10, video=0, baseline=None, out=tmp_path / "noisy")
    line = refused(str(noisy.path), "--every", "5", "--branches", "1", "--env",
                   f"{ASSETS / 'ledge.py'}:NoisyLedge-v0", "-o", str(out))
    assert "cannot be restored faithfully at step 5" in line
    # A run of an env without MuJoCo states, and a policy that is code named in a run.
    cartpole = evaluate("CartPole-v1", HALF_CHEETAH.replace("function", "cartpole_balance"),
                        episodes=1, max_episode_steps=5, video=0, baseline=None,
                        out=tmp_path / "cartpole")
    assert "is code named in its files" in refused(str(cartpole.path), "-o", str(out))
    line = refused(str(cartpole.path), "--policy",
                   HALF_CHEETAH.replace("function", "cartpole_balance"), "-o", str(out))
    assert "holds no MuJoCo physics state" in line
