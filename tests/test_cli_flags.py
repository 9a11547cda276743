"""The command line keeps its word: every flag of ``eval``, ``render``, ``verify``,
``parity`` and ``serve`` that existed when this list was taken (tests/assets/cli_flags.json,
written from the CLI of 2026-12-02) still exists, under the same names, with the same
default. New flags may come; none may vanish or change its default unnoticed (the config
dataclasses and the CLI are to become one declaration: this guards that move)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer

from rolltape.cli import app

BEFORE = json.loads((Path(__file__).parent / "assets" / "cli_flags.json").read_text())


def _now(verb: str) -> dict[str, dict[str, object]]:
    command = typer.main.get_command(app).commands[verb]  # type: ignore[attr-defined]
    rows = {}
    for p in command.params:
        default = "<callable>" if callable(p.default) else p.default
        try:
            json.dumps(default)
        except TypeError:
            default = repr(default)
        rows[p.name] = {"opts": sorted(p.opts + p.secondary_opts), "default": default}
    return rows


@pytest.mark.parametrize("verb", sorted(BEFORE))
def test_every_flag_of_before_is_still_there_with_its_default(verb: str) -> None:
    now = _now(verb)
    gone = sorted(set(BEFORE[verb]) - set(now))
    assert gone == []
    changed = {name: (was, now[name]) for name, was in BEFORE[verb].items() if now[name] != was}
    assert changed == {}
