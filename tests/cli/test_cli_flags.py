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

BEFORE = json.loads((Path(__file__).parents[1] / "assets" / "cli_flags.json").read_text())


def _now(verb: str) -> dict[str, object]:
    """Each flag (its names, an argument by its name) and its default."""
    command = typer.main.get_command(app).commands[verb]  # type: ignore[attr-defined]
    rows = {}
    for p in command.params:
        default = "<callable>" if callable(p.default) else p.default
        try:
            json.dumps(default)
        except TypeError:
            default = repr(default)
        rows[" ".join(sorted(p.opts + p.secondary_opts))] = default
    return rows


@pytest.mark.parametrize("verb", sorted(BEFORE))
def test_every_flag_of_before_is_still_there_with_its_default(verb: str) -> None:
    # Keyed by the names a user types: the Python parameter behind a flag may be renamed
    # (--camera fills the config's `cameras`), the flag may not.
    before = {" ".join(row["opts"]): row["default"] for row in BEFORE[verb].values()}
    now = _now(verb)
    gone = sorted(set(before) - set(now))
    assert gone == []
    changed = {flags: (was, now[flags]) for flags, was in before.items() if now[flags] != was}
    assert changed == {}


@pytest.mark.parametrize("verb", sorted(BEFORE))
def test_help_fits_80_columns_in_panels_without_cutting_a_flag(verb: str) -> None:
    """`--help` on an 80-column terminal: no line wider, every flag name whole, switches
    without a metavar, the options grouped into panels."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "COLUMNS": "80", "TERM": "dumb"}
    shown = subprocess.run([sys.executable, "-m", "rolltape", verb, "--help"], env=env,
                           capture_output=True, text=True, check=True).stdout
    assert max(len(line) for line in shown.splitlines()) <= 80
    assert "…" not in shown and "<bool>" not in shown
    names = set(shown.replace(",", " ").split())
    for flags in _now(verb):
        for name in flags.split():
            if name.startswith("-"):
                assert name in names, (name, shown)
    panels = [line for line in shown.splitlines() if line.startswith("╭─ ")]
    assert len(panels) >= (4 if verb == "eval" else 2), panels
