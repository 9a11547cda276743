"""Every warning made while writing a run is printed and recorded, and what the command
prints names only files that exist: on a real full disk (a 3 MiB tmpfs), where the report,
or the video and then the report, do not fit."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from tests.conftest import fill, run_cli

PAGE = 4096
# A 201-frame video (~120 KB) is three times the report (~44 KB): short by 35 pages, the
# video cannot fit whatever the encoder's last few bytes; short by 6, only the report.
ARGS = ["eval", "Pendulum-v1", "--episodes", "2", "--max-episode-steps", "200", "--video", "1",
        "--no-viewer", "--quiet"]


def used(disk: Path) -> int:
    st = os.statvfs(disk)
    return (st.f_blocks - st.f_bavail) * st.f_frsize


def on_a_disk_short_by(disk: Path, pages: int, whole: int) -> tuple[int, str, str, Path]:
    """Run ARGS on ``disk`` with ``pages`` pages fewer free than the whole run takes."""
    for old in disk.iterdir():
        shutil.rmtree(old) if old.is_dir() else old.unlink()
    fill(disk, whole - pages * PAGE)
    out = disk / "run"
    done = run_cli(*ARGS, "--out", str(out))
    return done.returncode, done.stdout, done.stderr, out


def test_a_report_or_video_that_does_not_fit_is_said_and_recorded(small_disk):
    before = used(small_disk)
    assert run_cli(*ARGS, "--out", str(small_disk / "whole")).returncode == 0
    whole = used(small_disk) - before  # what the run takes on this disk, in pages

    # 6 pages short: the numbers and the video fit, the report does not.
    code, out, err, run = on_a_disk_short_by(small_disk, 6, whole)
    assert code == 0, err
    recorded = json.loads((run / "results.json").read_text())["warnings"]
    said = [w for w in recorded if w.startswith("The report could not be written")]
    assert said and "No space left on device" in said[0] and ".partial" not in said[0]
    assert said[0] in " ".join(err.split()) or said[0][:60] in err  # printed too
    assert said[0] in json.loads((run / "metadata.json").read_text())["warnings"]
    # no half report, and nothing printed names one
    assert not (run / "report.html").exists() and not (run / "report.ipynb").exists()
    assert "report.html" not in out and "report.ipynb" not in out
    for name in ("results.json", "episodes.jsonl", "metadata.json", "tapes/", "videos/"):
        if name in out:
            assert (run / name.rstrip("/")).exists()

    # 35 pages short: the video does not fit either; the last sentence is the video's.
    code, out, err, run = on_a_disk_short_by(small_disk, 35, whole)
    last = " ".join(err.split())
    assert code == 2, err
    assert last.startswith("rolltape: Rendering") and "policy-0000.npz" in last, last
    assert "The report could not" not in last
    assert ".partial'" not in last and f"'{run}/results.json'" in last
    recorded = json.loads((run / "results.json").read_text())["warnings"]
    assert any(w.startswith("Rendering") for w in recorded)
    assert any(w.startswith("The report could not be written") for w in recorded)
    assert not (run / "report.html").exists()
