"""The 3-D tape viewer: exported next to a run (its own files only: the vendor assets are
served from the installation), served on localhost, driven in Debian's chromium through
Playwright (no browser download), and checked to pose the recorded qpos, on every built-in
MuJoCo suite too (issue 34, item 15)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import rolltape
from conftest import interruptible, run_cli
from rolltape import UsageError
from rolltape.outputs.viewer import (
    MODEL_SUPPORT,
    SOURCE_DIR,
    check_models,
    export_viewer,
    model_files,
    node_modules_dir,
    serve,
    viewer_is_current,
)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]

needs_assets = pytest.mark.skipif(
    not (node_modules_dir() / "mujoco-js" / "dist" / "mujoco_wasm.js").is_file(),
    reason="viewer assets not installed: run `npm ci --prefix viewer` (bash scripts/setup.sh)")
needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="Node.js not installed")


@pytest.fixture(scope="module")
def cheetah_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("viewer") / "cheetah"
    rolltape.evaluate("HalfCheetah-v5", "random", episodes=2, max_episode_steps=30, out=out,
                      show_progress=False)
    return out


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("viewer") / "cartpole"
    rolltape.evaluate("CartPole-v1", "random", episodes=1, max_episode_steps=20, out=out,
                      show_progress=False)
    return out


@needs_assets
def test_export_writes_page_assets_model_and_qpos(cheetah_run: Path) -> None:
    info = export_viewer(cheetah_run, overwrite=True)
    assert info == {"href": "viewer/index.html", "note": None,
                    "models_ok": {"HalfCheetah-v5": True},
                    "tapes": ["policy-0000", "policy-0001"]}
    folder = cheetah_run / "viewer"
    for rel in ("index.html", "viewer.js", "style.css"):
        assert (folder / rel).is_file(), rel
    # The 13 MB of vendor assets stay in the installation (served by `rolltape view`): the
    # run holds only its own files.
    assert not (folder / "vendor").exists()
    assert sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) < 300_000
    manifest = json.loads((folder / "manifest.json").read_text())
    (model,) = manifest["models"].values()
    assert model["env_id"] == "HalfCheetah-v5" and model["main"] == "half_cheetah.xml"
    assert (folder / model["dir"] / "half_cheetah.xml").is_file()
    tape = rolltape.Tape.load(cheetah_run / "tapes" / "policy-0001.npz")
    entry = manifest["tapes"][1]
    assert (entry["frames"], entry["nq"], entry["fps"]) == (31, 9, 20.0)
    stored = np.fromfile(folder / entry["qpos"], dtype="<f8").reshape(31, 9)
    assert np.array_equal(stored, tape.qpos)  # bit for bit
    assert not list(cheetah_run.glob(".viewer*")), "no staging folder left behind"
    # Nothing in the page reaches beyond its own folder.
    page = (folder / "index.html").read_text() + (folder / "viewer.js").read_text()
    assert "http://" not in page and "https://" not in page
    assert viewer_is_current(cheetah_run)
    with pytest.raises(UsageError, match="already exists"):
        export_viewer(cheetah_run)


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


class Page:
    """The viewer of a run, served on localhost and open in chromium."""

    def __init__(self, browser, run: Path, query: str = "?autoplay=0") -> None:
        self.server, self.url = serve(run)
        self.origin = self.url.split("/viewer/")[0]
        self.requests: list[str] = []
        self.problems: list[str] = []
        self.page = browser.new_page(viewport={"width": 960, "height": 600})
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("pageerror", lambda e: self.problems.append(str(e)))
        self.page.on("console", lambda m: self.problems.append(m.text)
                     if m.type == "error" else None)
        self.page.goto(self.url + query)
        self.page.wait_for_function(
            "() => window.rolltapeViewer && (rolltapeViewer.ready || rolltapeViewer.error)",
            timeout=60_000)

    def js(self, code: str):
        return self.page.evaluate(code)

    def close(self) -> None:
        self.page.close()
        self.server.shutdown()
        self.server.server_close()


@needs_assets
def test_page_in_chromium_loads_model_scrubs_and_plays(cheetah_run: Path, browser) -> None:
    export_viewer(cheetah_run, overwrite=True)
    view = Page(browser, cheetah_run)
    page = view.page
    try:
        state = view.js("() => ({nq: rolltapeViewer.nq, frames: rolltapeViewer.frames,"
                        " error: rolltapeViewer.error, tapes: rolltapeViewer.tapes,"
                        " version: rolltapeViewer.mujocoVersion, drawn: rolltapeViewer.geomsDrawn,"
                        " status: document.getElementById('status').textContent})")
        assert state["error"] is None
        assert state["status"] == "model nq=9, 31 frames"
        assert page.locator("#status").is_visible()
        assert (state["nq"], state["frames"]) == (9, 31)
        assert state["tapes"] == ["policy-0000", "policy-0001"]
        assert state["version"] == "3.3.8"
        assert state["drawn"] == 9  # the floor and 8 capsules

        # Scrubbing changes the pose; the same frame gives the same pose again.
        first, last, again = view.js(
            "() => { const v = rolltapeViewer; v.setFrame(0); const a = v.poseDigest();"
            " v.setFrame(30); const b = v.poseDigest(); v.setFrame(0);"
            " return [a, b, v.poseDigest()]; }")
        assert first != last and first == again
        # The slider scrubs too.
        page.locator("#scrub").fill("15")
        assert view.js("() => rolltapeViewer.frame") == 15
        # Play advances frames (looping at the end); pause stops.
        page.locator("#play").click()
        page.wait_for_function("() => rolltapeViewer.frame !== 15", timeout=10_000)
        page.locator("#play").click()
        assert view.js("() => rolltapeViewer.playing") is False
        page.select_option("#speed", "4")
        # The other tape: same model, other states.
        page.select_option("#tape", "1")
        page.wait_for_function("() => rolltapeViewer.tape === 'policy-0001' && "
                               "rolltapeViewer.ready", timeout=10_000)

        view.js("() => rolltapeViewer.setFrame(30)")
        shot = cheetah_run / "viewer-screenshot.png"
        page.locator("#stage").screenshot(path=str(shot))
    finally:
        view.close()
    assert not view.problems, view.problems
    assert view.requests and all(r.startswith(view.origin + "/") or r.startswith("data:")
                                 for r in view.requests), "only its own origin may be fetched"
    _assert_not_blank(shot)


@pytest.fixture(scope="module")
def baseline_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run as `rolltape eval` writes it: a video, the 3-D replay, and a baseline (whose
    tapes sort first). A space in its path: the commands the pages show must quote it."""
    out = tmp_path_factory.mktemp("viewer") / "with baseline"
    rolltape.evaluate("HalfCheetah-v5", "random", episodes=1, baseline="random",
                      max_episode_steps=20, video=1, viewer=True, out=out, show_progress=False)
    return out


@needs_assets
def test_report_opened_from_disk_says_to_serve_the_replay(baseline_run: Path, browser,
                                                         tmp_path: Path) -> None:
    """From file:// a browser loads no WebAssembly: the report and the viewer page both say
    to run `rolltape view RUN` (the page no longer waits on "loading" for ever), and
    `rolltape report RUN` keeps the 3-D section eval wrote."""
    assert run_cli("report", str(baseline_run)).returncode == 0
    command = f"rolltape view '{baseline_run}'"
    page = browser.new_page(viewport={"width": 1000, "height": 700})
    try:
        page.goto((baseline_run / "report.html").as_uri())
        section = page.locator("#viewer")
        assert command in " ".join(section.inner_text().split())
        section.screenshot(path=str(tmp_path / "report-viewer-section.png"))
        page.locator("#viewer a.button").click()
        page.wait_for_selector("#error", state="visible", timeout=10_000)
        assert page.url.startswith("file://") and page.url.endswith("/viewer/index.html")
        assert command in page.locator("#error").inner_text()
        assert page.locator("#status").inner_text() == "not served: run rolltape view"
        page.screenshot(path=str(tmp_path / "viewer-from-file.png"))
    finally:
        page.close()


@needs_assets
def test_page_opens_on_a_policy_episode(baseline_run: Path, browser) -> None:
    export_viewer(baseline_run, overwrite=True)  # every tape, as `rolltape view` shows them
    view = Page(browser, baseline_run)
    try:
        assert view.js("() => [rolltapeViewer.tapes, rolltapeViewer.tape]") == [
            ["baseline-0000", "policy-0000"], "policy-0000"]
    finally:
        view.close()


def _copy_run_with_model(run: Path, tmp_path: Path, edit) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("viewer*"))
    export_viewer(copy)
    (xml,) = (copy / "viewer" / "models").glob("*/half_cheetah.xml")
    xml.write_text(edit(xml.read_text()))
    return copy


@needs_assets
def test_page_draws_mesh_geoms(cheetah_run: Path, browser, tmp_path: Path) -> None:
    mesh = ('<asset><mesh name="tet" vertex="0 0 0  .3 0 0  0 .3 0  0 0 .3"/></asset>'
            '<worldbody><geom type="mesh" mesh="tet" pos="1 1 0" rgba="0 .5 1 1"/>')
    run = _copy_run_with_model(cheetah_run, tmp_path,
                               lambda text: text.replace("<worldbody>", mesh, 1))
    view = Page(browser, run)
    try:
        assert view.js("() => [rolltapeViewer.error, rolltapeViewer.geomsDrawn]") == [None, 10]
    finally:
        view.close()


@needs_assets
def test_page_says_clearly_when_the_model_does_not_load(cheetah_run: Path, browser,
                                                       tmp_path: Path) -> None:
    run = _copy_run_with_model(cheetah_run, tmp_path, lambda text: text.replace(
        "<worldbody>", '<worldbody><geom type="box" size="1 1" from_a_newer_mujoco="1"/>', 1))
    view = Page(browser, run)
    try:
        error = view.js("() => rolltapeViewer.error")
        assert "HalfCheetah-v5 model (half_cheetah.xml) does not load in this viewer's " \
               "MuJoCo 3.3.8" in error
        assert view.page.locator("#error").is_visible()
        assert view.page.locator("#status").text_content() == \
            "model failed to load in MuJoCo 3.3.8"
        assert view.js("() => [rolltapeViewer.ready, rolltapeViewer.nq]") == [False, 0]
    finally:
        view.close()


def _assert_not_blank(path: Path) -> None:
    from PIL import Image

    img = np.asarray(Image.open(path).convert("RGB"), dtype=np.float64)
    assert img.shape[0] > 300 and img.shape[1] > 600
    assert img.std() > 20, "the 3-D view is blank"
    # The cheetah's tan/pink capsules are in the middle of the picture.
    h, w, _ = img.shape
    mid = img[h // 4: 3 * h // 4, w // 4: 3 * w // 4]
    r, g, b = mid[..., 0], mid[..., 1], mid[..., 2]
    body = (r > g + 25) & (r > b + 40)
    assert body.sum() > 500, "no cheetah in the middle of the view"


def test_tapes_without_mujoco_state_get_a_note_not_a_viewer(cartpole_run: Path) -> None:
    info = export_viewer(cartpole_run)
    assert info["href"] is None and info["models_ok"] == {}
    assert "CartPole-v1" in info["note"] and "MuJoCo state" in info["note"]
    assert "1 of the 1 tapes (CartPole-v1)" in info["note"]  # counted against the run's
    one = export_viewer(cartpole_run, [cartpole_run / "tapes" / "policy-0000.npz"])
    assert "1 of the 1 tapes (CartPole-v1)" in one["note"], one
    assert not (cartpole_run / "viewer").exists()
    assert run_cli("view", str(cartpole_run)).returncode == 2


def test_missing_assets_name_the_install_command(cheetah_run: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError, match=r"npm ci --prefix viewer"):
        export_viewer(cheetah_run, overwrite=True, node_modules=tmp_path)
    monkeypatch.setenv("ROLLTAPE_VIEWER_NODE_MODULES", str(tmp_path / "nowhere"))
    with pytest.raises(UsageError, match=r"npm ci --prefix viewer"):
        export_viewer(cheetah_run, overwrite=True)


def test_not_a_run_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a rolltape run"):
        export_viewer(tmp_path)
    with pytest.raises(UsageError, match="not a rolltape run"):
        serve(tmp_path / "missing")
    proc = run_cli("view", str(tmp_path))
    assert proc.returncode == 2 and "not a rolltape run" in proc.stderr


@needs_assets
def test_cli_view_serves_the_run_until_interrupted(cheetah_run: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "rolltape.cli", "view", str(cheetah_run),
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=interruptible)
    try:
        line = proc.stdout.readline()
        assert line.startswith("open http://127.0.0.1:"), line + proc.stderr.read()
        url = line.split()[1]
        base = url.rsplit("/", 1)[0]
        with urllib.request.urlopen(url, timeout=10) as r:
            assert r.headers["Content-Type"].startswith("text/html")
            assert b"viewer.js" in r.read()
        for rel, mime in (("viewer.js", "text/javascript"),
                          ("vendor/mujoco_wasm.js", "text/javascript"),
                          ("manifest.json", "application/json")):
            with urllib.request.urlopen(f"{base}/{rel}", timeout=10) as r:
                assert r.headers["Content-Type"] == mime, rel
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_sends_wasm_as_application_wasm(cheetah_run: Path) -> None:
    (cheetah_run / "probe.wasm").write_bytes(b"\0asm\1\0\0\0")
    server, url = serve(cheetah_run)
    try:
        base = url.split("/viewer/")[0]
        with urllib.request.urlopen(f"{base}/probe.wasm", timeout=10) as r:
            assert r.headers["Content-Type"] == "application/wasm"
    finally:
        server.shutdown()
        server.server_close()
        (cheetah_run / "probe.wasm").unlink()


def test_model_files_follow_includes_meshes_and_textures(tmp_path: Path) -> None:
    (tmp_path / "assets" / "meshes").mkdir(parents=True)
    (tmp_path / "common").mkdir()
    (tmp_path / "assets" / "meshes" / "part.stl").write_bytes(b"solid x\nendsolid x\n")
    (tmp_path / "assets" / "wood.png").write_bytes(b"\x89PNG")
    (tmp_path / "common" / "materials.xml").write_text(
        '<mujoco><asset><texture name="wood" type="2d" file="wood.png"/></asset></mujoco>')
    main = tmp_path / "robot.xml"
    main.write_text(
        '<mujoco><compiler meshdir="assets/meshes" texturedir="assets"/>'
        '<include file="common/materials.xml"/>'
        '<asset><mesh name="part" file="part.stl"/><mesh name="gone" file="missing.stl"/></asset>'
        '<worldbody><geom type="mesh" mesh="part"/></worldbody></mujoco>')
    found = [p.relative_to(tmp_path).as_posix() for p in model_files(main)]
    assert found == ["robot.xml", "common/materials.xml", "assets/wood.png",
                     "assets/meshes/part.stl"]


@needs_assets
@needs_node
def test_model_support_table_matches_mujoco_js() -> None:
    """Every Gymnasium MuJoCo v5 model loads in mujoco-js 0.0.7 (MuJoCo 3.3.8) and poses
    exactly as the Python MuJoCo does; MODEL_SUPPORT says so."""
    results = check_models(tuple(MODEL_SUPPORT))
    assert {env: r["ok"] for env, r in results.items()} == MODEL_SUPPORT, results
    assert {r["version"] for r in results.values()} == {"3.3.8"}


def test_lock_file_pins_the_assets_without_a_registry_host() -> None:
    lock = json.loads((SOURCE_DIR / "package-lock.json").read_text())
    pkg = json.loads((SOURCE_DIR / "package.json").read_text())
    for name, version in pkg["dependencies"].items():
        assert version[0].isdigit(), f"{name} must be pinned to an exact version"
        entry = lock["packages"][f"node_modules/{name}"]
        assert entry["version"] == version and entry["integrity"].startswith("sha512-")
    assert "registry" not in (SOURCE_DIR / "package-lock.json").read_text()


def test_describe_envs_soon_hands_its_answer_to_the_next_describe_envs():
    """eval starts the viewer's env probe beside pass 2; export_viewer takes its answer."""
    from rolltape.envs.ids import env_spec
    from rolltape.outputs import viewer

    specs = [env_spec("Pusher-v5")]
    viewer.describe_envs_soon(specs, trusted=True)
    assert len(viewer._soon) == 1
    soon = viewer.describe_envs(specs, trusted=True)
    assert viewer._soon == {}  # taken, not probed again
    assert soon == viewer.describe_envs(specs, trusted=True)  # the same as a fresh probe
    assert soon[0]["fullpath"].endswith("pusher_v5.xml") and soon[0]["nq"] == 11


# Every task of each built-in MuJoCo suite, in one run of a manifest of them (a few steps:
# the test is of the viewer), opened in chromium on each of its tapes.
MUJOCO_SUITES = ("mazes", "adroit", "locomotion")


@needs_assets
def test_every_builtin_mujoco_suite_opens_in_the_viewer(browser, tmp_path: Path) -> None:
    from rolltape.suites.builtin import BUILTIN

    manifest = tmp_path / "mujoco-suites.yaml"
    manifest.write_text(json.dumps({name: {"max_episode_steps": 5, "tasks": dict(
        BUILTIN[name]["tasks"])} for name in MUJOCO_SUITES}))  # JSON is YAML
    tasks = sum(len(BUILTIN[name]["tasks"]) for name in MUJOCO_SUITES)
    out = tmp_path / "run"
    rolltape.evaluate(None, "random", suite=str(manifest), episodes=1, out=out,
                      show_progress=False)
    info = export_viewer(out, overwrite=True)  # every tape of the run, as `rolltape view`
    assert info["href"] == "viewer/index.html" and info["note"] is None, info
    assert len(info["tapes"]) == tasks, info
    view = Page(browser, out)
    try:
        got = view.js("""async () => { const v = rolltapeViewer, out = [];
            for (const name of v.tapes) { const ok = await v.selectTape(name);
              out.push([name, ok, v.error, v.geomsDrawn > 0]); }
            return out; }""")
    finally:
        view.close()
    assert len(got) == tasks and all(row[1:] == [True, None, True] for row in got), got
