"""The HTML report: built from a real run, checked as HTML and in a real headless browser.

The browser check runs Debian's chromium through Playwright with JavaScript disabled, to
prove the page reads without scripts: it must draw (a screenshot that is not blank), its
charts must have a size, and its video must be fetchable where the page points.
"""

from __future__ import annotations

import functools
import json
import shlex
import shutil
import threading
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rolltape
from rolltape.cli import main as cli_main
from rolltape.errors import UsageError
from rolltape.outputs.report import build_report

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


@pytest.fixture(scope="session")
def run(tmp_path_factory: pytest.TempPathFactory) -> rolltape.RunResult:
    out = tmp_path_factory.mktemp("report") / "run"
    return rolltape.evaluate("HalfCheetah-v5", "random", episodes=4, seed=3, baseline="random",
                             max_episode_steps=40, video=1, out=out)


@pytest.fixture(scope="session")
def report(run: rolltape.RunResult) -> Path:
    return build_report(run.path)


class Page(HTMLParser):
    """Tags, text and the structure the tests look at; fails on mis-nested elements."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.svgs: list[dict[str, Any]] = []
        self.videos: list[dict[str, str | None]] = []
        self.text: list[str] = []
        self.scripts = 0
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "script":
            self.scripts += 1
        if tag == "svg":
            self.svgs.append({"attrs": a, "title": None})
        if tag == "video":
            self.videos.append(a)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("svg", "video", "script"):
            self.handle_starttag(tag, attrs)
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
            return
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self.stack and self.stack[-1] == "title" and "svg" in self.stack:
            if self.svgs[-1]["title"] is None:
                self.svgs[-1]["title"] = data.strip()

    @property
    def all_text(self) -> str:
        return " ".join(" ".join(self.text).split())


def copy_run(run: rolltape.RunResult, tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(run.path, dst)
    (dst / "report.html").unlink(missing_ok=True)
    return dst


def edit_json(path: Path, change: Any) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


# ------------------------------------------------------------------------------- HTML


def test_report_parses_and_holds_the_numbers(run: rolltape.RunResult, report: Path) -> None:
    assert report == run.path / "report.html"
    page = Page(report.read_text())
    assert page.errors == [] and page.stack == []
    assert page.scripts == 0
    text = page.all_text
    results = json.loads((run.path / "results.json").read_text())
    for role in ("policy", "baseline"):
        s = results["summary"][role]
        assert f"{s['mean']:.2f} ± {s['std']:.2f}" in text
        assert f"{s['iqm']:.2f}" in text and f"[{s['iqm_ci'][0]:.2f}, {s['iqm_ci'][1]:.2f}]" in text
        assert f"{s['min']:.2f} / {s['max']:.2f}" in text
    assert "n/a" in text  # HalfCheetah reports no success
    imp = results["improvement_over_baseline"]
    assert f"{imp['mean_diff']:+.2f}" in text
    assert "HalfCheetah-v5" in text and "random policy" in text
    html = report.read_text()
    for fetch in ('src="http', "src='http", 'href="http', "@import", "url(", "<link"):
        assert fetch not in html  # self-contained: nothing from the network


def test_report_has_four_titled_svg_plots(report: Path) -> None:
    page = Page(report.read_text())
    assert len(page.svgs) == 4
    for svg in page.svgs:
        assert svg["title"], svg
        assert svg["attrs"].get("role") == "img" and svg["attrs"].get("viewbox")
    titles = [s["title"] for s in page.svgs]
    assert any("cumulative reward" in t for t in titles)
    assert "<polyline" in report.read_text()  # the cumulative curve from the tape


def test_video_src_is_relative_and_exists(run: rolltape.RunResult, report: Path) -> None:
    page = Page(report.read_text())
    [video] = page.videos
    assert "controls" in video
    src = video["src"]
    assert src == run.results.to_json()["videos"][0]["path"] and not src.startswith("/")
    assert (report.parent / src).is_file()
    assert "verified: replay earned exactly what pass 1 earned" in page.all_text


def test_provenance(run: rolltape.RunResult, tmp_path: Path) -> None:
    folder = copy_run(run, tmp_path)
    sha = "ab12" * 16

    def fake_checkpoint(meta: dict[str, Any]) -> None:
        meta["checkpoint_sha256"] = sha
        meta["policy"] = {"kind": "sb3", "algo": "PPO", "source": "/models/ppo.zip",
                          "sha256": sha, "deterministic": True}

    edit_json(folder / "metadata.json", fake_checkpoint)
    text = Page(build_report(folder).read_text()).all_text
    meta = json.loads((folder / "metadata.json").read_text())
    assert sha in text and "/models/ppo.zip" in text
    for name in ("numpy", "mujoco", "gymnasium"):
        assert meta["versions"][name] in text
    assert meta["platform"]["machine"] in text
    assert meta["render"]["backend_used"][0] in text
    assert "3 … 6" in text  # the seeds
    assert shlex.join(meta["command"]) in text and meta["config"]["env"] in text


def test_divergence_is_marked(run: rolltape.RunResult, tmp_path: Path) -> None:
    folder = copy_run(run, tmp_path)
    where = "step 7: reward was 0.5 in pass 1, 0.25 on replay (difference 0.25)"

    def diverge(results: dict[str, Any]) -> None:
        results["videos"][0].update(verified=False, divergence_text=where)

    edit_json(folder / "results.json", diverge)
    html = build_report(folder).read_text()
    text = Page(html).all_text
    assert f"diverged from pass 1 at {where}" in text
    assert 'class="status bad"' in html and "✗" in html
    assert "verified: replay earned exactly" not in text


def test_restore_videos_say_so(run: rolltape.RunResult, tmp_path: Path) -> None:
    folder = copy_run(run, tmp_path)
    edit_json(folder / "results.json",
              lambda r: r["videos"][0].update(verified=None, mode="restore"))
    assert "drawn from recorded states" in Page(build_report(folder).read_text()).all_text


def test_gif_is_an_image_and_text_is_escaped(run: rolltape.RunResult, tmp_path: Path) -> None:
    folder = copy_run(run, tmp_path)
    shutil.copy(folder / run.results.to_json()["videos"][0]["path"], folder / "videos" / "clip.gif")

    def change(results: dict[str, Any]) -> None:
        results["videos"][0].update(path="videos/clip.gif", paths=["videos/clip.gif"])
        results["env_id"] = "<script>alert(1)</script>"

    edit_json(folder / "results.json", change)
    html = build_report(folder).read_text()
    page = Page(html)
    assert page.videos == [] and '<img src="videos/clip.gif"' in html
    assert page.scripts == 0 and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert len(page.svgs) == 4 and page.errors == []


def test_viewer_section_only_when_asked(run: rolltape.RunResult, tmp_path: Path) -> None:
    folder = copy_run(run, tmp_path)
    assert 'id="viewer"' not in build_report(folder).read_text()
    html = build_report(folder, viewer={"href": "viewer/index.html", "note": None}).read_text()
    assert 'id="viewer"' in html and 'href="viewer/index.html"' in html
    note = "3-D replay unavailable: this tape has no MuJoCo state"
    html = build_report(folder, viewer={"href": None, "note": note}).read_text()
    assert note in html and 'href="viewer/index.html"' not in html
    # Written elsewhere, the links still point into the run.
    elsewhere = build_report(folder, out=tmp_path / "pages" / "r.html",
                             viewer={"href": "viewer/index.html", "note": None})
    video = Page(elsewhere.read_text()).videos[0]["src"]
    target = folder / run.results.to_json()["videos"][0]["path"]
    assert (elsewhere.parent / video).resolve() == target.resolve()
    assert 'href="../run/viewer/index.html"' in elsewhere.read_text()


def test_videos_name_their_camera_and_a_rebuilt_report_keeps_the_viewer(
        run: rolltape.RunResult, tmp_path: Path) -> None:
    folder = copy_run(run, tmp_path)
    hint = ("the 'default' camera does not follow the robot: torso leaves the picture at "
            "frame 9 of 41; add --camera track:torso to follow it")
    edit_json(folder / "results.json", lambda r: r["videos"][0].update(camera_hint=hint))
    page = Page(build_report(folder).read_text())
    assert "camera default (the env's own env.render() view)" in page.all_text
    assert "The" + hint[3:] + "." in page.all_text
    # The viewer eval (or `rolltape view`) left in the run is linked again, with its note,
    # and the command to serve it names where the run lives, not eval's staging folder.
    staging = folder.rename(folder.with_name(".run.partial"))
    (staging / "viewer").mkdir()
    note = "1 tape(s) of X hold no MuJoCo state (qpos), so the 3D viewer cannot show them."
    (staging / "viewer" / "manifest.json").write_text(json.dumps({"format": 1, "note": note}))
    html = build_report(staging).read_text()
    assert 'href="viewer/index.html"' in html and note in html
    assert f"<code>rolltape view {folder.absolute()}</code>" in html


@pytest.mark.parametrize("content", [None, "{not json", json.dumps({"schema_version": 99}),
                                     json.dumps([1, 2])])
def test_not_a_run(tmp_path: Path, content: str | None, capsys: pytest.CaptureFixture) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    if content is not None:
        (folder / "results.json").write_text(content)
    before = sorted(p.name for p in folder.iterdir())
    with pytest.raises(UsageError, match="is not a rolltape run .*results.json"):
        build_report(folder)
    assert cli_main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rolltape: ") and "is not a rolltape run" in " ".join(err.split())
    assert err.rstrip().endswith(".") and "Traceback" not in err
    assert sorted(p.name for p in folder.iterdir()) == before


def test_cli_writes_the_report(run: rolltape.RunResult, tmp_path: Path,
                               capsys: pytest.CaptureFixture) -> None:
    folder = copy_run(run, tmp_path)
    assert cli_main(["report", str(folder)]) == 0
    assert (folder / "report.html").is_file()
    assert str(folder / "report.html") in capsys.readouterr().out
    assert not [p for p in folder.iterdir() if p.name.endswith(".partial")]


def test_no_videos_still_four_plots(run: rolltape.RunResult, tmp_path: Path) -> None:
    folder = copy_run(run, tmp_path)
    edit_json(folder / "results.json", lambda r: r.update(videos=[]))
    page = Page(build_report(folder).read_text())
    assert len(page.svgs) == 4 and page.videos == []
    assert "best, median and worst" in page.all_text


# ------------------------------------------------------------------------------- browser


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def served(run: rolltape.RunResult, report: Path):
    server = ThreadingHTTPServer(("127.0.0.1", 0),
                                 functools.partial(_Quiet, directory=str(run.path)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.skipif(not CHROMIUM.exists(), reason="chromium is not installed "
                    "(apt-get install -y --no-install-recommends chromium)")
def test_report_in_a_real_browser_without_javascript(served: str, run: rolltape.RunResult,
                                                     tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    from PIL import Image

    requests: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(java_script_enabled=False,
                                          viewport={"width": 1280, "height": 900})
            page = context.new_page()
            page.on("request", lambda r: requests.append(r.url))
            response = page.goto(f"{served}/report.html", wait_until="load")
            assert response is not None and response.status == 200
            shot = tmp_path / "report.png"
            page.screenshot(path=str(shot), full_page=True)
            svgs = page.locator("svg.chart")
            assert svgs.count() == 4
            for i in range(4):
                box = svgs.nth(i).bounding_box()
                assert box is not None and box["width"] > 300 and box["height"] > 150, box
            video = page.locator("video").first
            assert video.bounding_box()["width"] > 200
            src = video.get_attribute("src")
            fetched = context.request.get(f"{served}/{src}")
            assert fetched.status == 200
            assert fetched.body() == (run.path / src).read_bytes()
            # With scripts on, the browser itself resolves the element's source.
            scripted = browser.new_context()
            page2 = scripted.new_page()
            page2.goto(f"{served}/report.html")
            assert page2.evaluate("document.querySelector('video').currentSrc") == f"{served}/{src}"
            page2.wait_for_function("document.querySelector('video').readyState >= 1",
                                    timeout=15_000)  # the browser read the video's header
            scripted.close()
        finally:
            browser.close()
    assert all(url.startswith(served) for url in requests), requests  # nothing from outside
    image = Image.open(shot).convert("RGB")
    assert image.width == 1280 and image.height > 2000
    pixels = np.asarray(image.resize((image.width // 4, image.height // 4))).reshape(-1, 3)
    assert len(np.unique(pixels, axis=0)) > 200  # text, charts and a video frame: not blank
    assert np.ptp(pixels.mean(axis=1)) > 200 and pixels.std() > 10


def test_a_run_whose_every_episode_failed_still_gets_its_report(tmp_path):
    from tests.conftest import run_cli

    (tmp_path / "bad.py").write_text("import numpy as np\ndef act(obs):\n    return np.zeros(30)\n")
    done = run_cli("eval", "HalfCheetah-v5", "--policy", f"{tmp_path}/bad.py:act", "-n", "1",
                   "--max-episode-steps", "5", "--out", str(tmp_path / "run"))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "1 episode(s) failed" in done.stderr  # the env's own reason is in the warning
    assert "no episode finished" in (tmp_path / "run" / "report.html").read_text()
