"""``rolltape branch`` on bad input: one sentence, exit 2, nothing left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from rolltape import evaluate
from rolltape.cli import main

ASSETS = Path(__file__).parents[1] / "assets"
LEDGE = f"{ASSETS / 'ledge.py'}:Ledge-v0"
BALANCE = f"{ASSETS / 'policies.py'}:cartpole_balance"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("branch-input")
    ledge = evaluate(LEDGE, "random", episodes=2, max_episode_steps=20, video=0,
                     baseline=None, out=root / "ledge")
    cartpole = evaluate("CartPole-v1", BALANCE, episodes=1, max_episode_steps=5, video=0,
                        baseline=None, out=root / "cartpole")
    stacked = evaluate(LEDGE, "random", frame_stack=2, episodes=1, max_episode_steps=5,
                       video=0, baseline=None, out=root / "stacked")
    return str(ledge.path), str(cartpole.path), str(stacked.path)


def test_bad_input_is_one_sentence_and_exit_2(runs, tmp_path, capsys):
    ledge, cartpole, stacked = runs
    out = tmp_path / "b"

    def refused(*args: str) -> str:
        assert main(["branch", *args, "-o", str(out), "-q"]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("rolltape: ")
        assert not out.exists()  # no half-written results
        return lines[0]

    assert "--branches must be at least 1" in refused(ledge, "--branches", "0")
    assert "--noise must be a finite number" in refused(ledge, "--noise", "nan")
    assert "--threshold must lie strictly between 0 and 1" in refused(ledge, "--threshold", "1")
    # Issue 40: the branches' seed is --branch-seed (eval's --seed resets episodes).
    assert "--branch-seed must be 0 or more" in refused(ledge, "--branch-seed", "-1")
    assert "no option --episodes" in refused(ledge, "--episodes", "worst:3")  # now --pick
    # --policy and --workers are eval's declarations: one policy, a count of 1 or more.
    assert "--policy names one policy here, not 2" in refused(ledge, "-p", "random", "-p",
                                                              "random")
    assert "--workers must be at least 1, got 0" in refused(ledge, "--workers", "0")
    assert "--executor must be one of local, ray; got 'nope'" in refused(ledge, "--executor",
                                                                          "nope")
    assert "not a rolltape run" in refused(str(tmp_path / "none"))
    # A tape names its env's code: it is imported only when the user names it.
    assert "a tape may not run code" in refused(ledge)
    assert "--pick asks for episode 40" in refused(ledge, "--pick", "1,40", "--env", LEDGE)
    assert "cannot hold even one grid point" in refused(ledge, "--budget", "5", "--env", LEDGE)
    # A policy that is code, named only in the run's files; an env without MuJoCo states.
    assert "is code (or a server) named only in its files" in refused(cartpole)
    assert "holds no MuJoCo or ALE state" in refused(cartpole, "--policy", BALANCE)
    # A frame stack's contents are not on the tape (observations are kept as digests).
    said = refused(stacked, "--env", LEDGE)
    assert "policy-side wrappers (frame_stack=2): their state at step t" in said
    assert "keeps the base env's observations only as digests" in said
    # eval --branch with what it cannot branch: one sentence before any work.
    assert main(["eval", LEDGE, "--branch", "--until", "decided", "--max-episodes", "4",
                 "-o", str(out), "-q"]) == 2
    assert "--branch branches one policy's rendered episodes" in capsys.readouterr().err
    assert not out.exists()
