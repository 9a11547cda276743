"""What the CLI prints: a summary table that fits 80 columns, what --mode auto and restore
drew, and no noise from render workers. Real runs, the real `rolltape` command."""

from __future__ import annotations

import dataclasses
import io
import os
import pty
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from conftest import ENV_ID, SHORT, run_cli
from rolltape import Tape
from rolltape.cli.show import summary_table

TABLE = re.compile(r"^[┏┃┡│└]")  # the lines rich draws a table with (heavy head, light body)


def _eval_in_a_terminal(folder: Path) -> str:
    """`rolltape eval` with its stdout on a pseudo-terminal of 80 columns; what it printed."""
    main, child = pty.openpty()
    env = {**os.environ, "COLUMNS": "80", "TERM": "xterm"}
    proc = subprocess.Popen([sys.executable, "-m", "rolltape.cli", "eval", ENV_ID, "-n", "3",
                             "--baseline", "random", "--max-episode-steps", str(SHORT),
                             "--no-report", "-q", "--out", str(folder)],
                            stdout=child, stderr=subprocess.PIPE, env=env)
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 4096)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=300) == 0, proc.stderr.read()
    os.close(main)
    text = b"".join(chunks).decode().replace("\r\n", "\n")
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)  # colours and cursor codes


def test_summary_table_fits_80_columns_on_a_terminal_and_off_one(tmp_path: Path) -> None:
    on_tty = _eval_in_a_terminal(tmp_path / "tty")
    off_tty = run_cli("eval", ENV_ID, "-n", "3", "--baseline", "random", "--max-episode-steps",
                      str(SHORT), "--no-report", "-q", "--out", str(tmp_path / "pipe")).stdout
    for text in (on_tty, off_tty):
        table = [line for line in text.splitlines() if TABLE.match(line)]
        assert len(table) == 6, text  # top, header, rule, policy, baseline, bottom: no wraps
        assert max(len(line) for line in table) <= 80, text
        assert "IQM [95% CI]" in text and "mean ± std" in text


def test_wide_numbers_drop_columns_rather_than_wrap(random_run) -> None:
    wide = {role: replace(s, mean=-12345.678, std=2345.6, iqm=-12000.5,  # a long MuJoCo episode
                          iqm_ci=(-13999.25, -10001.75), min=-19999.99, max=-1000.01)
            for role, s in random_run.results.summary.items()}
    results = replace(random_run.results, summary=wide)
    table = summary_table(results, 80)
    headers = [c.header for c in table.columns]
    assert "min / max" not in headers and "mean ± std" in headers
    console = Console(file=io.StringIO(), width=80)
    console.print(table)
    lines = console.file.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80
    assert sum(1 for line in lines if line.startswith("│")) == 2  # one line per role
    # With room, nothing is dropped.
    assert len(summary_table(results, 200).columns) == 6


def test_auto_says_it_fell_back_to_restore_and_why(random_run, tmp_path: Path) -> None:
    tape = Tape.load(random_run.path / "tapes" / "policy-0001.npz")
    actions = tape.actions.copy()
    actions[5] = -actions[5]  # pass 2 now earns another reward at step 5
    bad = dataclasses.replace(tape, actions=actions).save(tmp_path / "altered.npz")
    proc = run_cli("render", str(bad), "--mode", "auto", "--format", "png", "--width", "48",
                   "--height", "48", "--out", str(tmp_path / "v"), "-q")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("DIVERGED"))
    assert "altered.npz: first at step 5: reward was" in lines[first]
    assert lines[first + 1].strip().startswith("--mode auto fell back to restore: the video "
                                               "draws the recorded states")


def test_render_workers_print_no_display_noise(tmp_path: Path) -> None:
    """pygame (CartPole's drawing) probed for a display and printed "XDG_RUNTIME_DIR is
    invalid or not set" from every render worker on a machine without one."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("XDG_RUNTIME_DIR", "DISPLAY", "WAYLAND_DISPLAY", "SDL_VIDEODRIVER")}
    proc = subprocess.run([sys.executable, "-m", "rolltape.cli", "eval", "CartPole-v1", "-n",
                           "2", "--max-episode-steps", str(SHORT), "--video", "1", "-q",
                           "--out", str(tmp_path / "cp")], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "verified" in proc.stdout
    assert proc.stderr == ""
