"""An offline web viewer for MuJoCo tapes: the env's MJCF in MuJoCo's WebAssembly build,
drawn with three.js, playing the recorded ``qpos`` with play/pause, scrubbing and speed.

:func:`export_viewer` writes ``RUN/viewer/``: the page (``index.html``, ``viewer.js``,
``style.css``), the env's model files (the MJCF and every file it includes or references;
an env that builds its MJCF in a temporary file, as Gymnasium-Robotics' mazes do, gets the
model MuJoCo compiled, saved back as XML) and each MuJoCo tape's ``qpos`` as raw
little-endian float64 (``tapes/NAME.f64``, frames x nq) described by ``manifest.json``:
the run's own files only. The page's vendor assets (npm ``mujoco-js``, whose one JS file
embeds the wasm, and ``three``: 13 MB; ``viewer/package-lock.json`` pins both and
``npm ci --prefix viewer`` installs them) stay in the installation, one copy, and
:func:`serve` answers ``viewer/vendor/...`` from there. Nothing is fetched from anywhere
but the page's own origin. WebAssembly and ES modules do not load from ``file://``, so
:func:`serve` (and ``rolltape view RUN``) serves the run on localhost.

The page draws recorded states (like ``restore`` mode): it sets ``qpos``, calls
``mj_forward`` and places each geom from ``geom_xpos``/``geom_xmat``. It runs mujoco-js
0.0.7, which is MuJoCo 3.3.8, while tapes are recorded with the Python MuJoCo (4.x); see
:data:`MODEL_SUPPORT` for the Gymnasium models checked in it. A model that fails to load
there is shown as a message on the page.

May import: tape, envs, stats, files, errors, outputs. Never: policies, pass 1, executors.

Example (not run: it needs a finished run):
    >>> info = export_viewer("runs/cheetah")
    >>> info["href"]
    'viewer/index.html'
    >>> server, url = serve("runs/cheetah")   # open url in a browser
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from rolltape.errors import UsageError
from rolltape.files import atomic_folder

if TYPE_CHECKING:
    from rolltape.tape import Tape

#: The page's own source, in the repository (``viewer/`` beside ``src/``).
SOURCE_DIR = Path(__file__).resolve().parents[3] / "viewer"
#: Set to a ``node_modules`` folder to take the assets from there instead.
NODE_MODULES_ENV = "ROLLTAPE_VIEWER_NODE_MODULES"
INSTALL_HINT = "run `npm ci --prefix viewer` in the rolltape checkout (or `bash scripts/setup.sh`)"
PAGE_FILES = ("index.html", "viewer.js", "style.css")
#: (package, file inside it, the URL under RUN's viewer/ that :func:`serve` answers with it)
ASSETS = (
    ("mujoco-js", "dist/mujoco_wasm.js", "vendor/mujoco_wasm.js"),
    ("three", "build/three.module.js", "vendor/three.module.js"),
    ("three", "build/three.core.js", "vendor/three.core.js"),
    ("three", "examples/jsm/controls/OrbitControls.js", "vendor/addons/controls/OrbitControls.js"),
    ("three", "LICENSE", "vendor/three.LICENSE"),
)
#: Bumped when the layout of RUN/viewer/ changes, so `rolltape view` rebuilds old ones.
FORMAT = 2  # 2: vendor assets served from the installation, not copied into the run
BROWSER_MUJOCO = "3.3.8"  # what mujoco-js 0.0.7 reports (mj_versionString)

#: Gymnasium MuJoCo v5 models in mujoco-js 0.0.7 (MuJoCo 3.3.8), checked by
#: tests/outputs/test_viewer.py (viewer/check_models.mjs): each loads, has the nq/ngeom of the Python
#: MuJoCo 4.0 build, and mj_forward on the same qpos puts every geom within 1e-9 of where
#: the Python build puts it. True: loads and agrees; False: does not load or disagrees.
MODEL_SUPPORT: dict[str, bool] = {
    "Ant-v5": True,
    "HalfCheetah-v5": True,
    "Hopper-v5": True,
    "Humanoid-v5": True,
    "HumanoidStandup-v5": True,
    "InvertedDoublePendulum-v5": True,
    "InvertedPendulum-v5": True,
    "Pusher-v5": True,
    "Reacher-v5": True,
    "Swimmer-v5": True,
    "Walker2d-v5": True,
}


GYMNASIUM_V5 = tuple(MODEL_SUPPORT)


def check_models(env_ids: Sequence[str] = GYMNASIUM_V5, *, steps: int = 20,
                 node_modules: str | os.PathLike[str] | None = None) -> dict[str, dict[str, Any]]:
    """Load each env's MJCF in mujoco-js under Node.js (``viewer/check_models.mjs``) and
    compare it with the Python MuJoCo: same nq/nv/ngeom/nbody, and the same geom positions
    after ``mj_forward`` on the reset pose and on ``steps`` steps of random actions.
    Returns ``{env_id: {"ok", "error", "nq", "max_err", "version", ...}}``. A developer
    tool (it imports MuJoCo in this process); tests/outputs/test_viewer.py keeps
    :data:`MODEL_SUPPORT` equal to its answer."""
    import gymnasium as gym
    import mujoco

    check_assets(node_modules)
    node = shutil.which("node")
    if node is None:
        raise UsageError("Checking models in mujoco-js needs Node.js (`node`) on PATH.")
    cases, expected = [], {}
    for env_id in env_ids:
        env = gym.make(env_id)
        try:
            base: Any = env.unwrapped  # a MujocoEnv: data, model, fullpath
            env.action_space.seed(0)
            env.reset(seed=0)
            poses = [base.data.qpos.copy()]
            for _ in range(steps):
                env.step(env.action_space.sample())
            poses.append(base.data.qpos.copy())
            model = base.model
            data = mujoco.MjData(model)
            xpos = []
            for q in poses:
                data.qpos[:] = q
                mujoco.mj_forward(model, data)
                xpos.append(data.geom_xpos.ravel().tolist())
            files = model_files(base.fullpath)
            root = Path(os.path.commonpath([f.parent for f in files]))
            cases.append({"name": env_id, "main": str(files[0].relative_to(root)),
                          "files": {str(f.relative_to(root)): str(f) for f in files},
                          "qpos": [q.tolist() for q in poses], "geom_xpos": xpos})
            expected[env_id] = {"nq": model.nq, "nv": model.nv, "ngeom": model.ngeom,
                                "nbody": model.nbody}
        finally:
            env.close()
    import tempfile

    script = SOURCE_DIR / "check_models.mjs"
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(cases, f)
        f.flush()
        proc = subprocess.run([node, str(script), f.name], capture_output=True, text=True,
                              cwd=SOURCE_DIR)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("[")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"check_models.mjs failed ({proc.returncode}): {proc.stderr[-2000:]}")
    results = {}
    for r in json.loads(lines[-1]):
        want = expected[r["name"]]
        sizes = {k: r.get(k) for k in want}
        if r["ok"] and sizes != want:
            r["ok"] = False
            r["error"] = f"compiles to {sizes} in mujoco-js but {want} in Python MuJoCo"
        results[r.pop("name")] = r
    return results


# -- assets ---------------------------------------------------------------------------
def node_modules_dir(node_modules: str | os.PathLike[str] | None = None) -> Path:
    """Where the npm assets are: the argument, else $ROLLTAPE_VIEWER_NODE_MODULES, else
    ``viewer/node_modules`` in the rolltape checkout."""
    if node_modules is not None:
        return Path(node_modules)
    if os.environ.get(NODE_MODULES_ENV):
        return Path(os.environ[NODE_MODULES_ENV])
    return SOURCE_DIR / "node_modules"


def check_assets(node_modules: str | os.PathLike[str] | None = None) -> Path:
    """Return the node_modules folder after checking that every asset is there at the
    version ``viewer/package.json`` pins; otherwise one UsageError naming the install command."""
    folder = node_modules_dir(node_modules)
    missing = [f"{pkg}/{rel}" for pkg, rel, _ in ASSETS if not (folder / pkg / rel).is_file()]
    if missing:
        raise UsageError(f"The viewer's assets are not installed ({folder} lacks "
                         f"{', '.join(missing[:2])}); {INSTALL_HINT}.")
    pins = _pins()
    for pkg, want in pins.items():
        try:
            have = json.loads((folder / pkg / "package.json").read_text())["version"]
        except (OSError, ValueError, KeyError):
            have = None
        if have != want:
            raise UsageError(f"The viewer needs {pkg} {want} but {folder} has {have}; "
                             f"{INSTALL_HINT}.")
    for name in PAGE_FILES:
        if not (SOURCE_DIR / name).is_file():
            raise UsageError(f"The viewer page '{SOURCE_DIR / name}' is missing; this rolltape "
                             "install lacks its viewer/ folder (use a checkout of the repository).")
    return folder


def _pins() -> dict[str, str]:
    try:
        deps = json.loads((SOURCE_DIR / "package.json").read_text())["dependencies"]
    except (OSError, ValueError, KeyError):
        return {}
    return {pkg: deps[pkg] for pkg in ("mujoco-js", "three") if pkg in deps}


# -- models ---------------------------------------------------------------------------
_TEXTURE_FILES = ("file", "fileright", "fileleft", "fileup", "filedown", "filefront", "fileback")


def model_files(main: str | os.PathLike[str]) -> list[Path]:
    """The MJCF file and every file it needs: included XML (recursively), meshes, skins,
    height fields and textures, resolved as MuJoCo resolves them (relative to the main
    file's folder, or to the compiler's meshdir/texturedir/assetdir)."""
    main = Path(main).resolve()
    base = main.parent
    dirs = {"mesh": base, "texture": base}
    found: list[Path] = [main]

    def resolve(folder: Path, name: str) -> Path:
        path = Path(name)
        return (path if path.is_absolute() else folder / path).resolve()

    def visit(xml: Path) -> None:
        try:
            root = ET.parse(xml).getroot()
        except (ET.ParseError, OSError):
            return
        for compiler in root.iter("compiler"):
            if assetdir := compiler.get("assetdir"):
                dirs["mesh"] = dirs["texture"] = resolve(base, assetdir)
            if meshdir := compiler.get("meshdir"):
                dirs["mesh"] = resolve(base, meshdir)
            if texturedir := compiler.get("texturedir"):
                dirs["texture"] = resolve(base, texturedir)
        for el in root.iter():
            names: list[tuple[Path, str]] = []
            file = el.get("file")
            if el.tag in ("include", "model") and file:
                names.append((base, file))
            elif el.tag in ("mesh", "skin", "hfield") and file:
                names.append((dirs["mesh"], file))
            elif el.tag == "texture":
                names += [(dirs["texture"], v) for a in _TEXTURE_FILES if (v := el.get(a))]
            for folder, name in names:
                path = resolve(folder, name)
                if path.is_file() and path not in found:
                    found.append(path)
                    if path.suffix.lower() == ".xml":
                        visit(path)

    visit(main)
    return found


def _describe_envs(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """(Runs in a fresh interpreter.) What the viewer needs from each env: its MJCF path,
    step duration, nq and the camera Gymnasium renders with; ``fullpath`` None if not MuJoCo."""
    from rolltape.envs.build import make_env
    from rolltape.tape import json_safe

    out = []
    for spec in specs:
        env = make_env(spec)
        try:
            base = _mujoco_env(env.unwrapped)
            fullpath = getattr(base, "fullpath", None)
            model = getattr(base, "model", None)
            generated = bool(model is not None and fullpath and not Path(fullpath).is_file())
            if generated:
                fullpath = _saved_model(model)  # built in a temporary file, gone now
            renderer = getattr(base, "mujoco_renderer", None)
            cam = getattr(renderer, "default_cam_config", None) if renderer else None
            out.append({
                "fullpath": str(fullpath) if fullpath and model is not None else None,
                "dt": float(base.dt) if hasattr(base, "dt") else None,
                "render_fps": env.metadata.get("render_fps"),
                "nq": int(model.nq) if model is not None else None,
                "camera": json_safe(dict(cam)) if cam else None,
                "generated": generated,
            })
        finally:
            env.close()
    return out


def _mujoco_env(base: Any) -> Any:
    """The MuJoCo env that draws ``base``: itself, or the one a goal env holds
    (Gymnasium-Robotics' PointMaze keeps its MujocoEnv in ``point_env``)."""
    if getattr(base, "fullpath", None) is not None:
        return base
    for value in vars(base).values():
        if getattr(value, "fullpath", None) is not None and hasattr(value, "model"):
            return value
    return base


def _saved_model(model: Any) -> str | None:
    """The model an env compiled from an MJCF file that is gone, saved as XML (MuJoCo's
    ``mj_saveLastXML``: the last model parsed, this env's own, just made) into a fresh
    temporary folder the caller removes; None when what was saved is another model."""
    import tempfile

    import mujoco

    path = Path(tempfile.mkdtemp(prefix="rolltape-model-")) / "model.xml"
    try:
        mujoco.mj_saveLastXML(str(path), model)
        again = mujoco.MjModel.from_xml_path(str(path))
    except Exception:
        shutil.rmtree(path.parent, ignore_errors=True)
        return None
    if (again.nq, again.ngeom, again.nbody) != (model.nq, model.ngeom, model.nbody):
        shutil.rmtree(path.parent, ignore_errors=True)
        return None
    return str(path)


def describe_envs_soon(specs: list[dict[str, Any]], trusted: bool = False) -> None:
    """Start :func:`describe_envs` for ``specs`` on a thread now (eval: while pass 1 plays),
    so that the report's 3-D replay does not wait for its probe process at the end; the
    next :func:`describe_envs` of the same specs takes the answer."""
    key = _describe_key(specs, trusted)
    box: dict[str, Any] = {}

    def probe() -> None:
        try:
            box["value"] = describe_envs(specs, trusted, soon=False)
        except UsageError as exc:
            box["error"] = exc

    thread = threading.Thread(target=probe, name="rolltape-describe-envs", daemon=True)
    with _soon_lock:
        _soon[key] = (thread, box)
    thread.start()


_soon: dict[str, tuple[threading.Thread, dict[str, Any]]] = {}
_soon_lock = threading.Lock()


def _describe_key(specs: list[dict[str, Any]], trusted: bool) -> str:
    return json.dumps([specs, trusted], sort_keys=True, default=str)


def describe_envs(specs: list[dict[str, Any]], trusted: bool = False,
                  soon: bool = True) -> list[dict[str, Any]]:
    """:func:`_describe_envs` in a fresh interpreter, so this process never imports MuJoCo
    (which would fix its GL backend); in this process when MuJoCo is already imported.
    Unless the user named these envs (``trusted``: eval's own run), the specs come from
    tapes, so their env code must be installed and the current folder is not searched.
    The answer of a :func:`describe_envs_soon` of the same specs is taken when there is
    one (``soon``)."""
    with _soon_lock:
        started = _soon.pop(_describe_key(specs, trusted), None) if soon else None
    if started is not None:
        thread, box = started
        thread.join()
        if "error" in box:
            raise box["error"]
        if "value" in box:
            return list(box["value"])
    if "mujoco" in sys.modules:
        return _describe_envs(specs)
    from rolltape.interpreter import NO_GL, ChildFailed, run_once

    try:
        # A tape's env must not come from the current folder (only a user-named one may).
        return run_once(_describe_envs, specs, env=NO_GL, cwd_on_path=trusted)
    except ChildFailed as exc:
        raise UsageError(f"Could not build the run's env to find its MuJoCo model "
                         f"({exc}).") from None


# -- the run --------------------------------------------------------------------------
def _run_tapes(run_dir: Path, tape_paths: Sequence[str | os.PathLike[str]] | None) -> list[Path]:
    if not run_dir.is_dir() or not (run_dir / "tapes").is_dir() or not (
            (run_dir / "results.json").is_file() or (run_dir / "metadata.json").is_file()):
        raise UsageError(f"'{run_dir}' is not a rolltape run (no tapes/ and results.json); "
                         "give the folder `rolltape eval --out` wrote.")
    if tape_paths is None:  # a suite's are in tapes/SUITE/TASK/
        return sorted((run_dir / "tapes").rglob("*.npz"))
    return [Path(p) if Path(p).is_absolute() or Path(p).exists() else run_dir / p
            for p in tape_paths]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("._") or "model"


def _tape_name(run_dir: Path, path: Path) -> str:
    """A tape's name in the viewer: its path under ``tapes/`` (a suite's tapes of two
    tasks share a file name), as one slug."""
    try:
        rel = path.resolve().relative_to((run_dir / "tapes").resolve())
    except ValueError:
        rel = Path(path.name)
    return _slug(str(rel.with_suffix("")).replace(os.sep, "-"))


class _NoViewer(Exception):
    """Nothing to show (raised inside the staging folder, so that it is removed)."""


def export_viewer(run_dir: str | os.PathLike[str],
                  tape_paths: Sequence[str | os.PathLike[str]] | None = None, *,
                  overwrite: bool = False,
                  node_modules: str | os.PathLike[str] | None = None,
                  trusted: bool = False) -> dict[str, Any]:
    """Write ``RUN/viewer/`` for a run's MuJoCo tapes (all of ``RUN/tapes/`` by default).

    Returns ``{"href", "note", "models_ok", "tapes"}``: ``href`` is ``"viewer/index.html"``
    (relative to the run) or None when no tape holds MuJoCo state, ``note`` says why tapes
    were skipped (or None), ``models_ok`` maps each env id to :data:`MODEL_SUPPORT` (None
    when not checked; the page then tells whether it loads). The folder is built beside its
    place and renamed into it; an existing ``viewer/`` is replaced only with ``overwrite``.
    ``trusted``: the user named the run's env on this command line (eval does), so its code
    may come from the current folder; otherwise it is read from tapes, and must be installed.
    """
    from rolltape.envs.ids import check_tape_env_module
    from rolltape.tape import Tape

    run_dir = Path(run_dir)
    tapes = _run_tapes(run_dir, tape_paths)
    final = run_dir / "viewer"
    if final.exists() and not overwrite:
        raise UsageError(f"'{final}' already exists; pass overwrite=True (or `rolltape view "
                         "--refresh`) to rebuild it.")
    loaded: list[tuple[Path, Tape]] = []
    skipped: list[tuple[Path, Tape]] = []
    for path in tapes:
        tape = Tape.load(path)
        if not trusted:
            check_tape_env_module(tape.env_id, str(path))
        (loaded if tape.qpos is not None else skipped).append((path, tape))
    note_parts = []
    if skipped:  # counted among the tapes looked at, and those against the run's
        envs = sorted({t.env_id for _, t in skipped})
        total = len(_run_tapes(run_dir, None))
        among = f" chosen ({total} in the run)" if total != len(tapes) else ""
        note_parts.append(f"{len(skipped)} of the {len(tapes)} tapes{among} ({', '.join(envs)}) "
                          "hold no MuJoCo state (qpos), so the 3D viewer cannot show them")
    if not loaded:
        why = "; ".join(note_parts) or f"the run '{run_dir}' has no tapes"
        return {"href": None, "note": f"No 3D viewer: {why}.", "models_ok": {}, "tapes": []}
    check_assets(node_modules)  # served with the page (serve): there when the page is

    specs: dict[str, dict[str, Any]] = {}
    for _, tape in loaded:
        specs.setdefault(json.dumps(tape.env, sort_keys=True), tape.env)
    described = dict(zip(specs, describe_envs(list(specs.values()), trusted)))

    try:
        with atomic_folder(final) as staging:
            return _write(staging, run_dir, loaded, specs, described, note_parts)
    except _NoViewer as nothing:
        return {"href": None, "note": str(nothing), "models_ok": {}, "tapes": []}
    finally:
        for info in described.values():  # models saved from a temporary MJCF
            if info.get("generated") and info.get("fullpath"):
                shutil.rmtree(Path(info["fullpath"]).parent, ignore_errors=True)


def _write(out: Path, run_dir: Path, loaded: list[tuple[Path, Tape]],
           specs: dict[str, dict[str, Any]], described: dict[str, dict[str, Any]],
           note_parts: list[str]) -> dict[str, Any]:
    (out / "tapes").mkdir(parents=True)
    for name in PAGE_FILES:
        shutil.copyfile(SOURCE_DIR / name, out / name)

    models: dict[str, dict[str, Any]] = {}
    model_of_spec: dict[str, str] = {}
    for key, info in described.items():
        if not info.get("fullpath"):
            continue
        files = model_files(info["fullpath"])
        root = Path(os.path.commonpath([f.parent for f in files]))
        digest = hashlib.sha256()
        for f in files:
            digest.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes())
        mkey = f"{_slug(Path(info['fullpath']).stem)}-{digest.hexdigest()[:8]}"
        model_of_spec[key] = mkey
        if mkey in models:
            continue
        for f in files:
            dest = out / "models" / mkey / f.relative_to(root)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dest)
        env_id = specs[key]["id"]
        models[mkey] = {
            "env_id": env_id,
            "dir": f"models/{mkey}",
            "main": str(Path(info["fullpath"]).resolve().relative_to(root)),
            "files": [str(f.relative_to(root)) for f in files],
            "nq": info["nq"],
            "camera": info.get("camera"),
            "checked": MODEL_SUPPORT.get(env_id),
        }

    entries, not_mujoco = [], []
    for path, tape in loaded:
        key = json.dumps(tape.env, sort_keys=True)
        info = described[key]
        if key not in model_of_spec:
            not_mujoco.append(tape.env_id)
            continue
        qpos = np.ascontiguousarray(tape.qpos, dtype="<f8")
        name = _tape_name(run_dir, path)
        (out / "tapes" / f"{name}.f64").write_bytes(qpos.tobytes())
        dt = info.get("dt")
        fps = 1.0 / dt if dt else float(info.get("render_fps") or 30)
        meta = tape.meta or {}
        task = f"{meta['suite']}/{meta['task']} " if meta.get("task") else ""
        entries.append({
            "name": name,
            "label": f"{task}{meta.get('role', '')} episode {meta['index']}".strip()
            if "index" in meta else name,
            "role": meta.get("role"),  # the page opens on the first "policy" tape
            "env_id": tape.env_id,
            "model": model_of_spec[key],
            "qpos": f"tapes/{name}.f64",
            "frames": int(qpos.shape[0]),
            "nq": int(qpos.shape[1]),
            "fps": fps,
            "seed": tape.seed,
            "length": tape.length,
            "return": tape.total_return,
            "mujoco": (tape.env.get("versions") or {}).get("mujoco"),
        })
    if not_mujoco:
        note_parts.append(f"tapes of {', '.join(sorted(set(not_mujoco)))} have qpos but no "
                          "MuJoCo model file (env.unwrapped.fullpath) to draw them with")
    if not entries:
        raise _NoViewer(f"No 3D viewer: {'; '.join(note_parts)}.")
    models_ok = {m["env_id"]: m["checked"] for m in models.values()}
    bad = sorted(e for e, ok in models_ok.items() if ok is False)
    if bad:
        note_parts.append(f"{', '.join(bad)} do(es) not load in the viewer's MuJoCo "
                          f"{BROWSER_MUJOCO} (mujoco-js); the page says so")
    note = ("; ".join(note_parts) + ".") if note_parts else None
    # The note is kept with the viewer, so that `rolltape report RUN` can show it again.
    manifest = {"format": FORMAT, "browser_mujoco": BROWSER_MUJOCO, "models": models,
                "tapes": entries, "note": note}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, allow_nan=False) + "\n")
    return {"href": "viewer/index.html", "note": note, "models_ok": models_ok,
            "tapes": [e["name"] for e in entries]}


def viewer_is_current(run_dir: str | os.PathLike[str]) -> bool:
    """True when ``RUN/viewer/`` has this rolltape's layout, page and assets and shows every
    MuJoCo tape of the run (so ``rolltape view`` need not rebuild it)."""
    from rolltape.tape import Tape

    run_dir = Path(run_dir)
    folder = run_dir / "viewer"
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        if manifest.get("format") != FORMAT or any(
                (folder / name).read_bytes() != (SOURCE_DIR / name).read_bytes()
                for name in PAGE_FILES):
            return False
    except (OSError, ValueError):
        return False
    shown = {t["name"] for t in manifest.get("tapes", [])
             if (folder / t.get("qpos", "-")).is_file()}
    for path in sorted((run_dir / "tapes").rglob("*.npz")):
        if _tape_name(run_dir, path) not in shown and Tape.load(path).qpos is not None:
            return False
    return bool(shown)


# -- serving --------------------------------------------------------------------------
class _Handler(http.server.SimpleHTTPRequestHandler):
    """The run's files, and ``/viewer/vendor/...`` from the installation's assets (one
    copy for every run: :data:`ASSETS` names the only files answered there)."""

    assets: Path | None = None  # the node_modules folder, set per server

    def translate_path(self, path: str) -> str:
        url = path.split("?", 1)[0].split("#", 1)[0]
        if self.assets is not None and url.startswith("/viewer/vendor/"):
            wanted = url[len("/viewer/"):]
            for pkg, rel, target in ASSETS:
                if target == wanted:
                    return str(self.assets / pkg / rel)
            return str(Path(self.directory) / "viewer" / "vendor" / "-missing-")
        return super().translate_path(path)

    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".wasm": "application/wasm",
        ".js": "text/javascript",
        ".mjs": "text/javascript",
        ".json": "application/json",
        ".html": "text/html; charset=utf-8",
        ".css": "text/css",
        ".xml": "application/xml",
        ".f64": "application/octet-stream",
    }

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the CLI prints the URL
        pass


def serve(run_dir: str | os.PathLike[str], port: int = 0,
          host: str = "127.0.0.1") -> tuple[http.server.ThreadingHTTPServer, str]:
    """Serve a run folder over HTTP from a daemon thread; returns ``(server, url)`` where
    ``url`` opens the viewer. Stop it with ``server.shutdown(); server.server_close()``."""
    run_dir = Path(run_dir)
    _run_tapes(run_dir, None)
    handler_cls = type("RunHandler", (_Handler,), {"assets": check_assets().resolve()})
    handler = functools.partial(handler_cls, directory=str(run_dir.resolve()))
    try:
        server = http.server.ThreadingHTTPServer((host, port), handler)
    except OSError as exc:
        raise UsageError(f"Cannot serve on {host}:{port} ({exc.strerror}); choose another "
                         "--port.") from None
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="rolltape-view", daemon=True).start()
    shown_host = f"[{host}]" if ":" in host else host
    return server, f"http://{shown_host}:{server.server_address[1]}/viewer/index.html"
