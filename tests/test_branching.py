"""``rolltape branch`` finds where an episode was decided (:mod:`rolltape.branching`).

On Ledge-v0 (tests/assets/ledge.py) the first kick at step k carries the block over the
ledge, so P(success | state at t) drops from >= 0.8 to 0 between t = k and t = k + 1: the
curve's 0.5 crossing must lie within 2 steps of k, for each of 20 seeded episodes. The run
is made by ``eval --branch``, which branches the rendered episode and draws its curve under
the video. (Restoring itself: tests/pass1/test_branches.py; bad input:
tests/cli/test_cli_branch.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rolltape.cli import main
from rolltape.record import Run
from rolltape.tape import Tape

ASSETS = Path(__file__).parent / "assets"
LEDGE = f"{ASSETS / 'ledge.py'}:Ledge-v0"


@pytest.fixture(scope="module")
def ledge_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ledge") / "run"
    # 120 episodes: the 20 worst of them are kicked off the ledge (see the crossing test).
    assert main(["eval", LEDGE, "-n", "120", "--seed", "0", "--max-episode-steps", "20",
                 "--video", "worst", "--branch", "-o", str(out), "-q"]) == 0
    return Run.load(out)


def test_eval_branch_draws_the_curve_under_the_rendered_episode(ledge_run):
    [video] = ledge_run.results.videos
    label = Path(video.tape).stem
    assert [p.name for p in (ledge_run.path / "branch").iterdir()] == [label]
    html = (ledge_run.path / "report.html").read_text()
    assert html.count('<figure class="branch" ') == 1
    assert f'src="branch/{label}/branch.png"' in html


def _first_kick(tape: Tape) -> int:
    kicks = np.flatnonzero(tape.actions[:, 0] > 0.98)
    return int(kicks[0])


def test_the_curve_crosses_one_half_where_the_episode_was_decided(ledge_run, capsys):
    """Over 20 seeded episodes, each decided by a kick at a known step k, every curve
    crosses 0.5 within 2 steps of k.

    Why 20 *of 120* seeds: an episode can only be decided where it could still have gone
    either way, so P(success | state at k) must be well above 0.5 (0.99^(20 - k) >= 0.82
    here); that same rarity of the kick makes most seeded episodes never kicked (about 1
    in 6 is), and an episode that was never kicked has no k. So the run has 120 seeds and
    its 20 worst episodes, all kicked, are branched; which seeds they are is fixed by
    the seeds, and so is every branch (seeded), so the check is deterministic. 6 branches
    every 2 steps keep it cheap: the crossing is then the first grid step after k (k + 1
    or k + 2) unless a step at or before k drew under 3 successes of 6, about 1 in 100 at
    p >= 0.82 and needing two such steps in a row to land 3 steps early; 0 successes of
    6 put the Wilson band's upper end at 0.39, under 0.5, so the point of no return is
    found too."""
    policy = list(ledge_run.results.of_role("policy"))
    code = main(["branch", str(ledge_run.path), "--pick", "worst:20", "--branches", "6",
                 "--every", "2", "--env", LEDGE, "--overwrite", "-q"])
    shown = capsys.readouterr().out
    assert code == 0
    assert shown.count("point of no return at step") == 20
    records = [json.loads(p.read_text())
               for p in sorted((ledge_run.path / "branch").glob("*/branch.json"))]
    assert len(records) == 20
    assert len({r["episode"]["seed"] for r in records}) == 20
    assert sum(e.success_at_end is False for e in policy) >= 20  # of 120: all 20 were kicked
    worst = min(records, key=lambda r: r["episode"]["return"])
    off = []
    for record in records:
        tape = Tape.load(ledge_run.path / record["episode"]["tape"])
        k = _first_kick(tape)
        assert record["episode"]["success"] is False
        assert record["estimate"] == "P(success | state at t)"
        off.append((record["crossing"] - k, record["point_of_no_return"] - k))
        after = [p for p in record["points"] if p["t"] > k]
        assert all(p["p"] == 0 and p["hi"] < 0.5 for p in after)  # irreversible
        before = [p["p"] for p in record["points"] if p["t"] <= k]
        assert np.mean(before) > 0.6
        for p in record["points"]:
            assert p["n"] == 6 and p["lo"] <= p["p"] <= p["hi"]
    assert all(abs(c) <= 2 and abs(n) <= 2 for c, n in off), off  # all 20 episodes
    png = ledge_run.path / "branch" / Path(worst["episode"]["tape"]).stem / "branch.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The report is rebuilt with the curve under the worst episode's video.
    html = (ledge_run.path / "report.html").read_text()
    assert html.count('<figure class="branch" ') == 1
    assert f'src="branch/{Path(worst["episode"]["tape"]).stem}/branch.png"' in html
    # A budget thins the grid and says so.
    code = main(["branch", str(ledge_run.path), "--pick", "worst:1", "--branches", "2",
                 "--every", "1", "--budget", "150", "--env", LEDGE, "--overwrite", "-q"])
    shown = capsys.readouterr().out
    assert code == 0 and "grid thinned from every 1 to every 4 steps" in shown
    [record] = [json.loads(p.read_text()) for p in (ledge_run.path / "branch").glob("*/branch.json")]
    assert record["every"] == 4 and record["asked_every"] == 1
    assert 2 * sum(record["episode"]["length"] - t + 1 for t in record["grid"]) <= 150


CHROMIUM = Path("/usr/bin/chromium")


def test_the_curve_marker_follows_the_video(ledge_run):
    """In a real browser, seeking the episode's video moves the marker on its branch curve to
    the step shown: at the start, the chart's left end; at the last frame, its right end."""
    sync_api = pytest.importorskip("playwright.sync_api")
    from rolltape.outputs.branch_chart import AXES

    assert CHROMIUM.exists(), "chromium is not installed (apt-get install -y chromium)"
    report = ledge_run.path / "report.html"
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM),
                                    args=["--headless=new", "--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page()
            page.goto(report.as_uri(), wait_until="load")
            line = page.locator("figure.branch svg.branch-now line")
            page.wait_for_function("document.querySelector('video').readyState >= 1",
                                   timeout=10_000)

            def seek(where: str) -> tuple[float, int]:
                page.evaluate(f"(() => {{ const v = document.querySelector('video');"
                              f" v.currentTime = {where}; }})()")
                page.wait_for_function(
                    "!document.querySelector('video').seeking", timeout=5_000)
                page.wait_for_timeout(50)  # the seeked handler has run
                return float(line.get_attribute("x1")), int(line.get_attribute("data-step"))

            start = seek("0")
            middle = seek("v.duration / 2")
            end = seek("v.duration - 0.001")
            # The marker's layer covers the picture exactly: the chart is not letterboxed
            # (as the page's square video images are), so t / steps lands on step t.
            page.locator("figure.branch img").scroll_into_view_if_needed()
            page.wait_for_function("document.querySelector('figure.branch img').naturalWidth")
            shape = page.evaluate("(() => { const i = document.querySelector('figure.branch img');"
                                  " return [i.clientHeight / i.clientWidth,"
                                  " i.naturalHeight / i.naturalWidth]; })()")
        finally:
            browser.close()
    [video] = ledge_run.results.videos
    steps = ledge_run.results.by_key[video.key].length
    assert start == (AXES[0], 0)
    assert middle[0] > start[0] and 0 < middle[1] < steps
    assert end[1] == steps and abs(end[0] - AXES[1]) < 1e-9
    assert shape[0] == pytest.approx(shape[1], abs=0.01)


@pytest.mark.usefixtures("python3_kernel")  # from conftest
def test_the_notebook_plots_each_branched_episode(ledge_run):
    """report.ipynb's branch cell, executed by a real kernel, draws one curve per branch.json
    (whichever ran first: the cell reads branch/ when it runs)."""
    import nbformat
    from nbclient import NotebookClient

    from rolltape.outputs.notebook import write_notebook

    nb = nbformat.read(write_notebook(ledge_run), as_version=4)
    keep = {"setup", "branch"}  # the other cells are tests/outputs/test_notebook.py's
    nb.cells = [c for c in nb.cells if c.get("id") in keep]
    assert [c.id for c in nb.cells] == ["setup", "branch"]
    NotebookClient(nb, timeout=60, kernel_name="python3",
                   resources={"metadata": {"path": str(ledge_run.path)}}).execute()
    outputs = nb.cells[1].outputs
    assert not [o for o in outputs if o.output_type == "error" or o.get("name") == "stderr"]
    records = sorted((ledge_run.path / "branch").glob("*/branch.json"))
    assert records
    pngs = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) == len(records)
    printed = "".join(o.text for o in outputs if o.output_type == "stream")
    assert printed.count("point of no return") == len(records)
