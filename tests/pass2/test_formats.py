"""The table of formats (rolltape.pass2.formats): every list of formats reads it, and a new
format is one row plus its writer.

The toy format here is written by the orchestrator from the tape (no pixels: a ``.npy`` of
the episode's rewards), so a row added in this process is enough; a format of drawn frames
would also need the row in the render workers' interpreters.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rolltape import UsageError, evaluate
from rolltape.outputs.artifacts import artifact_paths, check_output_name
from rolltape.pass2 import formats
from rolltape.pass2.encode import FORMATS, format_from_path

ENVS = Path(__file__).parents[1] / "assets" / "suite_envs.py"


def write_rewards(path: str, tape: Any, record: dict[str, Any]) -> None:
    """The toy format's writer: the episode's rewards as a .npy array."""
    np.save(path, np.asarray(tape.rewards))


def test_every_list_of_formats_is_the_table():
    assert formats.names() == ", ".join(formats.TABLE)
    assert FORMATS == tuple(n for n, f in formats.TABLE.items() if f.writer)
    assert formats.data_suffixes() == (".npz", ".jsonl")
    for name, row in formats.TABLE.items():
        [path] = artifact_paths("v/ep", name)
        assert path == ("v/ep/" if not row.suffix else f"v/ep{row.suffix}")
        if row.writer:
            assert format_from_path(path) == name
    with pytest.raises(UsageError, match=formats.names()):
        artifact_paths("v/ep", "avi")


def test_a_new_format_is_one_row_and_its_writer(monkeypatch, tmp_path):
    row = formats.Format("rewards", ".npy", "whole", "data",
                         tape_writer="test_formats:write_rewards")
    monkeypatch.setitem(formats.TABLE, "rewards", row)  # the only change: one row
    check_output_name("ep.npy", False)  # the suffix is known now
    run = evaluate(f"{ENVS}:Lever", episodes=2, video=1, video_format="gif,rewards",
                   out=tmp_path / "run")
    [video] = run.results.videos
    assert [Path(p).suffix for p in video.paths] == [".gif", ".npy"] and video.verified
    from rolltape import Tape

    saved = np.load(run.path / video.paths[1])
    assert np.array_equal(saved, Tape.load(run.tape_path(video)).rewards)
    assert (run.path / f"{video.paths[1]}.metadata.json").is_file()  # a sidecar, as every output
    page = (run.path / "report.html").read_text()
    assert '<img src="videos/policy-0000.gif"' in page
