"""Sizes and types a user or a zoo folder gives are checked before anything allocates: one
sentence each, exit 2, quickly. (--until's looks, its return bounds and returns found outside
them; --frame-stack; a zoo folder's frame_stack, env_kwargs, wrapper sizes and alias bomb.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tests.conftest import run_cli

from rolltape.errors import UsageError

ARGS = "env: CartPole-v1\nalgo: ppo\n"
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))


def folder(tmp_path: Path, config: str, args: str = ARGS) -> Path:
    """A model repo's files (the model itself is not read before these checks)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "ppo-CartPole-v1.zip").write_bytes(b"PK\x05\x06" + bytes(18))
    (repo / "config.yml").write_text(config)
    (repo / "args.yml").write_text(args)
    return repo


@pytest.mark.parametrize("config, args, words", [
    ("frame_stack: 1000000000\n", ARGS, ["frame_stack", "1,024"]),
    ("frame_stack: abc\n", ARGS, ["frame_stack", "whole number", "'abc'"]),
    ("frame_stack: 1e3\n", ARGS, ["frame_stack", "whole number"]),  # YAML 1.1: a string
    ("frame_stack: [4]\n", ARGS, ["frame_stack", "[4]"]),
    ("frame_stack: 1.5\n", ARGS, ["frame_stack", "1.5"]),  # was silently 1
    ("frame_stack: true\n", ARGS, ["frame_stack", "True"]),  # was silently 1
    ("env_kwargs: [1, 2]\n", ARGS, ["env_kwargs", "mapping"]),
    ("{}\n", ARGS + "env_kwargs: 5\n", ["args.yml", "env_kwargs"]),
    ("{}\n", "env: [CartPole-v1]\n", ["env must be a name"]),
    ("{}\n", ARGS + "gym_packages: gymnasium\n", ["gym_packages", "list"]),
    ("env_wrapper:\n  - gymnasium.wrappers.FrameStackObservation:\n"
     "      stack_size: 1000000000\n", ARGS, ["FrameStackObservation", "1,000,000"]),
    (BOMB, ARGS, ["aliases", "100,000"]),
    ("x: &x [*x]\n", ARGS, ["alias"]),
])
def test_zoo_values_are_typed_and_bounded(tmp_path: Path, config: str, args: str,
                                          words: list[str]) -> None:
    from rolltape.zoo import zoo_options

    repo = folder(tmp_path, config, args)
    started = time.perf_counter()
    with pytest.raises(UsageError) as err:
        zoo_options(f"zoo:{repo}", None, {})
    assert time.perf_counter() - started < 5
    said = str(err.value)
    assert "\n" not in said and all(w in said for w in words), said


def refused(res, *words: str) -> str:
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


@pytest.mark.parametrize("args, words", [
    (["--frame-stack", "1000000"], ["--frame-stack 1000000", "1,024"]),
    (["--until", "width<5", "--max-episodes", str(10**12)], ["looks", "--batch"]),
    (["--until", "width<5", "--max-episodes", str(2**70)], ["--max-episodes", "1e+15"]),
    (["--until", "width<5", "--max-episodes", "20", "--return-bounds=-1e308,1e308"],
     ["--return-bounds", "1e+150"]),
])
def test_sizes_on_the_command_line_are_bounded(tmp_path: Path, args: list[str],
                                               words: list[str]) -> None:
    res = run_cli("eval", "CartPole-v1", "-n", "2", "-o", str(tmp_path / "r"), *args)
    refused(res, *words)
    assert not (tmp_path / "r").exists()


def test_a_zoo_alias_bomb_is_refused_by_eval(tmp_path: Path) -> None:
    repo = folder(tmp_path, BOMB)
    res = run_cli("eval", "--policy", f"zoo:{repo}", "-o", str(tmp_path / "r"))
    refused(res, "config.yml", "aliases")


def test_returns_outside_the_bounds_are_found_at_the_first_look(tmp_path: Path) -> None:
    """Random CartPole returns ~10-40: bounds 0,5 are wrong, said after the first batch
    (not after every episode was played, and not as a traceback); nothing is left."""
    res = run_cli("eval", "CartPole-v1", "--until", "width<1", "--max-episodes", "40",
                  "--batch", "2", "--return-bounds", "0,5", "-o", str(tmp_path / "r"), "-q")
    refused(res, "outside --return-bounds 0,5", "CartPole-v1")
    assert not (tmp_path / "r").exists()
