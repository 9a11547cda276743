"""Choosing, probing and diagnosing MuJoCo's OpenGL backend for headless rendering.

MuJoCo reads ``MUJOCO_GL`` exactly once, when ``import mujoco`` runs, and PyOpenGL reads
``PYOPENGL_PLATFORM`` once, when ``OpenGL.platform`` is first imported. A process therefore
cannot switch backends after the fact, and a backend whose libraries are missing can make
``import mujoco`` itself fail. Everything here follows from that:

* :func:`gl_environment` says which variables a process needs *before* it imports mujoco;
* :func:`select_backend_in_this_process` is the first call in a spawned render worker;
* :func:`probe` tries a backend in a fresh subprocess, so a failure (or a crash, or a hang)
  costs the caller nothing, and turns the failure into one short reason and one fix;
* :func:`doctor` / :func:`format_doctor` probe several backends and print a report.

This module is imported by the orchestrator, so it must stay light: mujoco, OpenGL and numpy
are imported only inside the probe child (:func:`_probe_here`), never at module level.

Measured on Debian 12 with Mesa 22.3 (llvmpipe), mujoco 4.0 and PyOpenGL 3.1.10:
``EGL_PLATFORM`` (unset, surfaceless, device, x11, wayland) makes no difference, because
mujoco asks for an ``EGL_PLATFORM_DEVICE_EXT`` display explicitly, so it is left alone; a
missing ``libOSMesa``/``libEGL`` surfaces as ``AttributeError: 'NoneType' object has no
attribute ...`` deep inside PyOpenGL, which is why the child re-checks the libraries itself.

May import: errors (mujoco and OpenGL only inside probe children). Never: policies, pass 1,
executors, outputs.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import MutableMapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from rolltape.errors import UsageError
from rolltape.interpreter import ChildFailed, run_once

__all__ = [
    "BACKENDS_HELP",
    "DEFAULT_ORDER",
    "KNOWN_BACKENDS",
    "ProbeResult",
    "doctor",
    "first_working",
    "format_doctor",
    "gl_environment",
    "parse_backends",
    "probe",
    "select_backend_in_this_process",
]

KNOWN_BACKENDS: tuple[str, ...] = ("egl", "osmesa", "glfw")
"""Every backend rolltape knows how to select and probe."""

DEFAULT_ORDER: tuple[str, ...] = ("egl", "osmesa")
BACKENDS_HELP = "GL backends to try in order, comma-separated (egl, osmesa, glfw)."
"""Backends rolltape tries, in order, when the user names none (glfw needs a display)."""

# Debian packages that provide each backend's shared libraries.
_APT_FIX: dict[str, str] = {
    "egl": "apt-get install -y --no-install-recommends libegl1 libopengl0 libgl1-mesa-dri",
    "osmesa": "apt-get install -y --no-install-recommends libosmesa6",
    "glfw": "apt-get install -y --no-install-recommends libglfw3",
}
_DISPLAY_FIX = "set DISPLAY or use egl/osmesa"

# Libraries the child re-checks after a failure: (PyOpenGL-style short name, what it is for).
# PyOpenGL swallows the dlopen error and later fails with an unrelated AttributeError, so
# loading them ourselves is the only way to name the real cause.
_LIBRARIES: dict[str, tuple[str, ...]] = {
    "egl": ("EGL", "OpenGL"),
    "osmesa": ("OSMesa",),
    "glfw": (),  # the pip wheel bundles libglfw; pyGLFW reports its own load errors
}

# A box under a light: the smallest scene whose render is certainly not a single colour.
_PROBE_XML = """
<mujoco>
  <worldbody>
    <light pos="0 0 3" dir="0 0 -1"/>
    <geom type="box" size=".2 .2 .2" rgba="1 0 0 1"/>
  </worldbody>
</mujoco>
"""
_PROBE_SIZE = 64


@dataclass(frozen=True)
class ProbeResult:
    """Outcome of rendering one frame with one backend in a fresh subprocess.

    Attributes:
        backend: The backend probed ("egl", "osmesa" or "glfw").
        ok: True when a 64x64 frame was rendered and was not a single value.
        seconds: Wall time of the whole subprocess (interpreter start, import, render).
        reason: One line saying why it failed (None when ok).
        fix: The command or setting that most likely fixes it (None when unknown or ok).
        renderer: GL_RENDERER and GL_VENDOR, e.g. "llvmpipe (LLVM 15.0.6, 256 bits),
            Mesa/X.org", when the child could read them.
    """

    backend: str
    ok: bool
    seconds: float
    reason: str | None
    fix: str | None
    renderer: str | None


def parse_backends(text: str | Sequence[str]) -> tuple[str, ...]:
    """Parse a backend list such as ``"egl,osmesa"`` or ``["egl", "osmesa"]``.

    Names are stripped and lower-cased; duplicates are dropped, keeping the first.

    Raises:
        UsageError: A name is not in :data:`KNOWN_BACKENDS`, or no name was given.
    """
    parts = text.split(",") if isinstance(text, str) else list(text)
    names: list[str] = []
    for part in parts:
        name = str(part).strip().lower()
        if not name:
            continue
        if name not in KNOWN_BACKENDS:
            raise UsageError(
                f"Unknown rendering backend {name!r} (--backends); use one or more of "
                f"{', '.join(KNOWN_BACKENDS)}, separated by commas."
            )
        if name not in names:
            names.append(name)
    if not names:
        raise UsageError(
            f"No rendering backend given; use one or more of {', '.join(KNOWN_BACKENDS)}, "
            "separated by commas."
        )
    return tuple(names)


def _check_backend(backend: str) -> str:
    """Return ``backend`` normalised, raising UsageError for an unknown name."""
    (name,) = parse_backends([backend])
    return name


#: Render workers draw off screen. Classic-control envs draw with pygame, whose SDL would
#: otherwise probe X11 and Wayland for a display (and sound devices) it never uses, and
#: print "error: XDG_RUNTIME_DIR is invalid or not set" where there is none. SDL's dummy
#: drivers ask for nothing; a value the user set is kept.
HEADLESS_SDL = {"SDL_VIDEODRIVER": "dummy", "SDL_AUDIODRIVER": "dummy"}


def worker_environment(backend: str | None, workers: int,
                       cores: int | None = None) -> dict[str, str]:
    """A render worker's variables: its GL backend's, SDL's dummy drivers, and its share of
    the ``cores`` (default: all) for Mesa's llvmpipe (which would otherwise draw on every
    core in each).
    (Here, not in rolltape.rendering: an export starts its workers before it imports the
    heavier render orchestration, and every import before a worker's start delays it.)"""
    env = gl_environment(backend) if backend else {}
    env.update({k: v for k, v in HEADLESS_SDL.items() if k not in os.environ})
    if "LP_NUM_THREADS" not in os.environ:
        env["LP_NUM_THREADS"] = str(max(1, (cores or os.cpu_count() or 1) // workers))
    return env


def gl_environment(backend: str) -> dict[str, str]:
    """Return the variables a process must have before ``import mujoco`` to use ``backend``.

    ``MUJOCO_GL`` picks mujoco's context class; ``PYOPENGL_PLATFORM`` must agree with it
    for egl and osmesa, or mujoco's backend module refuses to load. For glfw the platform is
    left to PyOpenGL's own guess (glx on X11, egl on Wayland), which is the same guess pyGLFW
    makes, so ``PYOPENGL_PLATFORM`` is deliberately absent and a stale value is removed when
    the environment is applied. ``EGL_PLATFORM`` is not set: measured, it has no effect.

    Raises:
        UsageError: ``backend`` is unknown.
    """
    name = _check_backend(backend)
    if name == "glfw":
        return {"MUJOCO_GL": "glfw"}
    return {"MUJOCO_GL": name, "PYOPENGL_PLATFORM": name}


def _apply_gl_environment(env: MutableMapping[str, str], backend: str) -> None:
    """Set ``backend``'s variables in ``env`` and drop an inherited PYOPENGL_PLATFORM for glfw."""
    wanted = gl_environment(backend)
    if "PYOPENGL_PLATFORM" not in wanted:
        env.pop("PYOPENGL_PLATFORM", None)
    env.update(wanted)


def mujoco_gl_already_read() -> str | None:
    """Return the MUJOCO_GL value an already-imported mujoco read, or None if not imported."""
    if "mujoco" not in sys.modules:
        return None
    # mujoco >= 3.4 keeps it in rendering.classic.gl_context, older ones in mujoco.gl_context.
    for module_name in ("mujoco.rendering.classic.gl_context", "mujoco.gl_context"):
        module = sys.modules.get(module_name)
        value = getattr(module, "_MUJOCO_GL", None)
        if isinstance(value, str):
            return value
    # Unknown layout: assume nobody changed the variable since the import.
    return os.environ.get("MUJOCO_GL", "").lower().strip()


def select_backend_in_this_process(backend: str) -> None:
    """Make this process render with ``backend``; call it before anything imports mujoco.

    Meant as the very first statement of a spawned render worker. Calling it again with the
    same backend after mujoco was imported is fine.

    Raises:
        UsageError: ``backend`` is unknown.
        RuntimeError: mujoco (or PyOpenGL's platform) was already imported with a different
            backend; both read their variable once, so the worker must be started afresh.
    """
    name = _check_backend(backend)
    read = mujoco_gl_already_read()
    if read is not None:
        # An empty MUJOCO_GL means glfw on Linux (mujoco's fallback branch).
        effective = read or ("glfw" if sys.platform.startswith("linux") else read)
        if effective != name:
            raise RuntimeError(
                f"mujoco was already imported with MUJOCO_GL={read!r}, so this process cannot "
                f"switch to {name!r}; select the backend before anything imports mujoco."
            )
    platform_module = sys.modules.get("OpenGL.platform")
    if platform_module is not None and name in ("egl", "osmesa"):
        loaded = type(getattr(platform_module, "PLATFORM", None)).__name__.lower()
        if not loaded.startswith(name):
            raise RuntimeError(
                f"PyOpenGL was already imported with the {loaded!r} platform, so this process "
                f"cannot use {name!r}; select the backend before anything imports OpenGL."
            )
    _apply_gl_environment(os.environ, name)


def _src_root() -> str:
    """Directory that holds the ``rolltape`` package, so the child imports this very code."""
    return str(Path(__file__).resolve().parents[2])


def _child_environment(backend: str) -> dict[str, str | None]:
    """What a probe child's environment changes from this process's (None: removed): the
    backend's variables as :func:`_apply_gl_environment` sets them, and our src path first."""
    pythonpath = os.environ.get("PYTHONPATH")
    return {"PYOPENGL_PLATFORM": None, **gl_environment(backend),
            "PYTHONPATH": _src_root() + (os.pathsep + pythonpath if pythonpath else ""),
            # What a crashing child printed last is the clue: nothing may wait in a buffer.
            "PYTHONUNBUFFERED": "1"}


def _last_meaningful_line(text: str) -> str | None:
    """Return the last line of ``text`` that is an error message, not traceback scaffolding."""
    for line in reversed(text.splitlines()):
        stripped = line.strip()
        if not stripped or line[:1].isspace() or stripped.startswith(("Traceback", "^", "~")):
            continue
        return _shorten(stripped)
    return None


def _shorten(text: str, limit: int = 240) -> str:
    """Collapse whitespace and cut ``text`` to ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _alternatives(backend: str) -> str:
    """A fix that points at the other default backends."""
    others = [b for b in DEFAULT_ORDER if b != backend]
    return f"use {'/'.join(others)} instead" if others else "use another backend"


def _fix_for(backend: str, reason: str, missing_library: bool) -> str | None:
    """Map a failure reason to the single most likely fix."""
    low = reason.lower()
    if "no module named 'opengl'" in low:
        return "pip install PyOpenGL"
    if "no module named 'glfw'" in low:
        return "pip install glfw"
    if "no module named 'mujoco'" in low:
        return "pip install mujoco"
    if backend == "glfw":
        if "glfw" in low and "shared library" in low:  # pyGLFW: "Failed to load GLFW3 ..."
            return f"pip install glfw, or {_APT_FIX['glfw']}"
        # Anything else from glfw on a headless machine comes down to having no display.
        return _DISPLAY_FIX
    if "pyopengl_platform" in low:
        return f"unset PYOPENGL_PLATFORM or set it to {backend}"
    # A missing library, or the misleading messages its absence produces.
    if (
        missing_library
        or "platform_device" in low
        or "nonetype" in low
        or "unable to load" in low
        or "cannot open shared object" in low
    ):
        return _APT_FIX[backend]
    return None


def _result_from_child(backend: str, seconds: float, payload: dict[str, object]) -> ProbeResult:
    """Turn the child's report (:func:`_probe_here`) into a ProbeResult."""
    raw_renderer = payload.get("renderer")
    renderer = raw_renderer if isinstance(raw_renderer, str) and raw_renderer else None
    if payload.get("ok"):
        return ProbeResult(backend, True, seconds, None, None, renderer)
    reason = str(payload.get("reason") or "probe failed without a message")
    missing = bool(payload.get("missing_library"))
    fix = _fix_for(backend, reason, missing)
    return ProbeResult(backend, False, seconds, reason, fix, renderer)


def probe(backend: str, timeout: float = 60.0) -> ProbeResult:
    """Render one 64x64 frame with ``backend`` in a fresh subprocess and report how it went.

    The child inherits this process's environment (DISPLAY, LD_LIBRARY_PATH,
    MUJOCO_EGL_DEVICE_ID, ...) plus :func:`gl_environment`. It imports mujoco, builds a
    box-and-light model, renders it with ``mujoco.Renderer`` and checks the frame is not a
    single value (:func:`rolltape.interpreter.run_once`, capturing what it prints: a GL
    library's own complaint is often the only clue). A child that outlives ``timeout`` is
    killed and reported as a hang; one killed by a signal is reported as a crash naming the
    signal.

    Raises:
        UsageError: ``backend`` is unknown.
    """
    name = _check_backend(backend)
    start = time.monotonic()
    try:
        payload = run_once(_probe_here, name, env=_child_environment(name), timeout=timeout,
                           cwd_on_path=False, capture=True)
    except OSError as exc:
        return ProbeResult(name, False, time.monotonic() - start,
                           f"could not start the probe: {exc}", None, None)
    except ChildFailed as failed:
        seconds = time.monotonic() - start
        if failed.hung:
            return ProbeResult(name, False, seconds,
                               f"hang: no frame after {timeout:g}s, probe killed",
                               _alternatives(name), None)
        detail = _last_meaningful_line(failed.output)
        code = failed.returncode
        if code is not None and code < 0:
            try:
                signame = signal.Signals(-code).name
            except ValueError:
                signame = f"signal {-code}"
            reason = f"crash: probe killed by {signame}" + (f" ({detail})" if detail else "")
            return ProbeResult(name, False, seconds, reason, _alternatives(name), None)
        # It died before it could answer (e.g. our import failed): what it printed says why.
        reason = detail or f"probe exited with status {code}, no message"
        return ProbeResult(name, False, seconds, reason, _fix_for(name, reason, False), None)
    return _result_from_child(name, time.monotonic() - start, payload)


def doctor(
    backends: Sequence[str] | str = KNOWN_BACKENDS, timeout: float = 60.0
) -> list[ProbeResult]:
    """Probe each backend concurrently (each probe is its own subprocess); keep input order.

    Raises:
        UsageError: A backend name is unknown.
    """
    names = parse_backends(backends)
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        return list(pool.map(lambda b: probe(b, timeout=timeout), names))


def first_working(
    results: Sequence[ProbeResult], order: Sequence[str] = DEFAULT_ORDER
) -> str | None:
    """Return the first backend of ``order`` whose probe passed, or None."""
    passed = {r.backend for r in results if r.ok}
    return next((b for b in order if b in passed), None)


def format_doctor(results: Sequence[ProbeResult], order: Sequence[str] = DEFAULT_ORDER) -> str:
    """Render probe results as plain text: one line per backend, then the backend chosen.

    Each line reads ``<backend> ok|FAIL <seconds>s`` followed by the renderer when ok, or by
    ``reason: ...`` and ``fix: ...`` when not.
    """
    width = max([len(r.backend) for r in results] + [6])
    lines: list[str] = []
    for r in results:
        head = f"{r.backend:<{width}}  {'ok' if r.ok else 'FAIL':<4}  {r.seconds:5.2f}s"
        parts = [head]
        if r.renderer:
            parts.append(f"renderer: {r.renderer}")
        if r.reason:
            parts.append(f"reason: {r.reason}")
        if r.fix:
            parts.append(f"fix: {r.fix}")
        lines.append("  ".join(parts))
    chosen = first_working(results, order)
    if chosen:
        lines.append(f"rolltape will use {chosen} first (order: {','.join(order)})")
    else:
        lines.append(
            f"rolltape has no working backend among {','.join(order)}; apply a fix above"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Probe child. Everything below runs in the subprocess started by probe(), after the parent
# has put the backend's variables in its environment.


def _library_problem(short_name: str) -> str | None:
    """Try to dlopen ``lib<short_name>.so*`` the way PyOpenGL does; return the error or None."""
    import ctypes

    base = f"lib{short_name}.so"
    errors: list[str] = []
    for filename in [base] + [f"{base}.{i}" for i in range(9, -1, -1)]:
        try:
            ctypes.CDLL(filename, mode=ctypes.RTLD_GLOBAL)
            return None
        except OSError as exc:
            errors.append(str(exc))
    # Prefer an error about a file that exists but is broken over "No such file".
    informative = [e for e in errors if "No such file" not in e]
    return f"cannot load {base}: {(informative or errors)[0]}"


def _child_render() -> str | None:
    """Import mujoco, render the probe scene, return the GL renderer string (or None)."""
    import mujoco
    import numpy as np

    model = mujoco.MjModel.from_xml_string(_PROBE_XML)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    renderer = mujoco.Renderer(model, _PROBE_SIZE, _PROBE_SIZE)
    try:
        renderer.update_scene(data)
        frame = np.asarray(renderer.render())
        if frame.size == 0 or frame.min() == frame.max():
            value = frame.flat[0] if frame.size else "none"
            raise RuntimeError(f"rendered frame is blank (every pixel is {value})")
        return _gl_strings()
    finally:
        renderer.close()


def _gl_strings() -> str | None:
    """GL_RENDERER and GL_VENDOR of the current context; None when they cannot be read."""
    try:
        from OpenGL import GL

        values = [GL.glGetString(GL.GL_RENDERER), GL.glGetString(GL.GL_VENDOR)]
    except Exception:  # diagnostics only: the frame already rendered
        return None
    texts = [v.decode(errors="replace") if isinstance(v, bytes) else str(v) for v in values if v]
    return ", ".join(texts) or None


def _glfw_text(message: Warning | str) -> str:
    """``(65550) b'X11: The DISPLAY ...'`` -> ``X11: The DISPLAY ...``."""
    text = str(message)
    match = re.fullmatch(r"\(\d+\) b(['\"])(.*)\1", text, flags=re.DOTALL)
    return _shorten(match.group(2) if match else text)


def _probe_here(backend: str) -> dict[str, object]:
    """(In the probe's child, whose environment selects ``backend``.) Draw the probe scene;
    what happened, as :func:`_result_from_child` reads it."""
    import traceback
    import warnings

    payload: dict[str, object] = {"backend": backend, "ok": False}
    # pyGLFW reports the real cause (e.g. no DISPLAY) only as warnings, before mujoco raises
    # a misleading "no OpenGL platform library" error, so record them.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            payload["renderer"] = _child_render()
            payload["ok"] = True
        except BaseException as exc:  # report everything, including SystemExit from libraries
            described = "".join(traceback.format_exception_only(type(exc), exc))
            message = _last_meaningful_line(described)
            reason = message or type(exc).__name__
            glfw_messages = [_glfw_text(w.message) for w in caught
                             if "GLFW" in type(w.message).__name__]
            if glfw_messages:
                reason = "GLFW: " + glfw_messages[0]
            for short_name in _LIBRARIES.get(backend, ()):
                problem = _library_problem(short_name)
                if problem:
                    reason, payload["missing_library"] = problem, True
                    break
            payload["reason"] = _shorten(reason)
    return payload


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rolltape.pass2.backends [--probe NAME | --doctor [NAMES]]`` for use by hand."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 2 and args[0] == "--probe":
        result = probe(args[1])
        print(format_doctor([result], order=(result.backend,)))
        return 0 if result.ok else 1
    if args[:1] == ["--doctor"] and len(args) <= 2:
        results = doctor(args[1] if len(args) == 2 else KNOWN_BACKENDS)
        print(format_doctor(results))
        return 0 if first_working(results) else 1
    print("usage: python -m rolltape.pass2.backends --probe NAME | --doctor [egl,osmesa,glfw]",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
