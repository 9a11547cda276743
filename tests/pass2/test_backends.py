"""Tests for rolltape.backends: parsing, environments, and real probes in subprocesses.

The probes really render with Mesa (llvmpipe) on this machine: osmesa needs libosmesa6,
egl needs libegl1 libopengl0 libgl1-mesa-dri. Failures are produced for real too, never by a
hook inside rolltape:

* an unloadable library: a directory of empty ``libOSMesa.so*`` / ``libEGL.so*`` files is put
  first on LD_LIBRARY_PATH, so dlopen finds them first and fails ("file too short"), exactly
  as a broken or missing package would;
* a hang or a crash: a ``sitecustomize.py`` on the child's PYTHONPATH sleeps or sends itself
  SIGSEGV while the interpreter starts. A real GL hang cannot be caused on demand, and the
  parent's handling (kill after the timeout, name the signal) does not care where the child
  stops. monkeypatch changes os.environ only after this test process has started, so only
  the probe children see it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rolltape.errors import UsageError
from rolltape.pass2.backends import (
    DEFAULT_ORDER,
    KNOWN_BACKENDS,
    ProbeResult,
    doctor,
    first_working,
    format_doctor,
    gl_environment,
    parse_backends,
    probe,
)

OSMESA_FIX = "apt-get install -y --no-install-recommends libosmesa6"
EGL_FIX = "apt-get install -y --no-install-recommends libegl1 libopengl0 libgl1-mesa-dri"


def _shadow_library(directory: Path, short_name: str) -> None:
    """Create empty lib<short_name>.so, .so.0 ... .so.9 files: present but unloadable."""
    directory.mkdir(parents=True, exist_ok=True)
    for suffix in [""] + [f".{i}" for i in range(10)]:
        (directory / f"lib{short_name}.so{suffix}").write_bytes(b"")


def _prepend_path(monkeypatch: pytest.MonkeyPatch, name: str, directory: Path) -> None:
    old = os.environ.get(name)
    monkeypatch.setenv(name, str(directory) + (os.pathsep + old if old else ""))


def _single_line(text: str | None) -> bool:
    return bool(text) and "\n" not in text and "Traceback" not in text


# --- parse_backends / gl_environment ------------------------------------------------------


def test_parse_backends_accepts_text_and_sequences() -> None:
    assert parse_backends("egl,osmesa") == ("egl", "osmesa")
    assert parse_backends(" EGL , osmesa,egl,, ") == ("egl", "osmesa")
    assert parse_backends(["glfw", "osmesa"]) == ("glfw", "osmesa")
    assert parse_backends(KNOWN_BACKENDS) == KNOWN_BACKENDS
    assert DEFAULT_ORDER == ("egl", "osmesa")


@pytest.mark.parametrize("bad", ["egl,vulkan", ["wgl"], "", " , "])
def test_parse_backends_rejects_unknown_or_empty(bad: str | list[str]) -> None:
    with pytest.raises(UsageError) as info:
        parse_backends(bad)
    message = str(info.value)
    for name in KNOWN_BACKENDS:
        assert name in message
    assert message.count(". ") == 0 and message.endswith(".")  # one sentence


def test_gl_environment() -> None:
    assert gl_environment("egl") == {"MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl"}
    assert gl_environment("osmesa") == {"MUJOCO_GL": "osmesa", "PYOPENGL_PLATFORM": "osmesa"}
    # glfw: PyOpenGL guesses glx/egl itself, consistently with pyGLFW.
    assert gl_environment("glfw") == {"MUJOCO_GL": "glfw"}
    with pytest.raises(UsageError):
        gl_environment("vulkan")
    with pytest.raises(UsageError):
        probe("vulkan")


def test_module_import_is_light() -> None:
    # The package itself needs numpy (tapes); what must never load early is GL or torch.
    code = (
        "import sys, rolltape.pass2.backends; "
        "print([m for m in ('mujoco', 'OpenGL', 'torch') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- select_backend_in_this_process -------------------------------------------------------


def test_select_backend_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYOPENGL_PLATFORM", "egl")  # stale value the worker inherited
    code = textwrap.dedent(
        """
        import os
        from rolltape.pass2.backends import select_backend_in_this_process as select
        select("osmesa")
        assert os.environ["MUJOCO_GL"] == "osmesa", os.environ["MUJOCO_GL"]
        assert os.environ["PYOPENGL_PLATFORM"] == "osmesa"
        import mujoco
        select("osmesa")  # same backend again: fine
        try:
            select("egl")
        except RuntimeError as exc:
            assert "MUJOCO_GL='osmesa'" in str(exc), exc
            print("refused")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "refused"


# --- real probes ---------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["osmesa", "egl"])
def test_probe_renders_on_this_machine(backend: str) -> None:
    result = probe(backend)
    assert result.ok, result
    assert result.backend == backend
    assert result.reason is None and result.fix is None
    assert result.renderer, result  # e.g. "llvmpipe (LLVM 15.0.6, 256 bits), Mesa/X.org"
    assert 0 < result.seconds < 60


def test_probe_glfw_without_display(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    result = probe("glfw")
    assert not result.ok
    assert _single_line(result.reason)
    assert "DISPLAY" in (result.reason or "")
    assert result.fix is not None and "DISPLAY" in result.fix


@pytest.mark.parametrize(
    ("backend", "library", "fix"),
    [("osmesa", "OSMesa", OSMESA_FIX), ("egl", "EGL", EGL_FIX)],
)
def test_probe_unloadable_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str, library: str, fix: str
) -> None:
    # Without our own dlopen check this shows up as PyOpenGL's
    # "AttributeError: 'NoneType' object has no attribute ...", which names nothing useful.
    _shadow_library(tmp_path / "libs", library)
    _prepend_path(monkeypatch, "LD_LIBRARY_PATH", tmp_path / "libs")
    result = probe(backend)
    assert not result.ok
    assert _single_line(result.reason)
    assert f"lib{library}.so" in (result.reason or "")
    assert "file too short" in (result.reason or "")
    assert result.fix == fix


def test_probe_timeout_is_a_hang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sitecustomize.py").write_text("import time\ntime.sleep(120)\n")
    _prepend_path(monkeypatch, "PYTHONPATH", tmp_path)
    result = probe("osmesa", timeout=2.0)
    assert not result.ok
    assert (result.reason or "").startswith("hang")
    assert 2.0 <= result.seconds < 30
    assert result.fix is not None


def test_probe_crash_names_the_signal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sitecustomize.py").write_text(
        "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n"
    )
    _prepend_path(monkeypatch, "PYTHONPATH", tmp_path)
    result = probe("egl")
    assert not result.ok
    assert "crash" in (result.reason or "") and "SIGSEGV" in (result.reason or "")


# --- doctor / format_doctor ----------------------------------------------------------------


def test_format_doctor_lines() -> None:
    results = [
        ProbeResult("egl", False, 0.4, "cannot load libEGL.so: x", EGL_FIX, None),
        ProbeResult("osmesa", True, 0.5, None, None, "llvmpipe, Mesa/X.org"),
        ProbeResult("glfw", False, 0.3, "GLFW: no DISPLAY", "set DISPLAY or use egl/osmesa", None),
    ]
    text = format_doctor(results)
    lines = text.splitlines()
    assert len(lines) == 4
    assert lines[0].startswith("egl") and "FAIL" in lines[0] and EGL_FIX in lines[0]
    assert lines[1].startswith("osmesa") and " ok " in lines[1] and "llvmpipe" in lines[1]
    assert lines[2].startswith("glfw") and "set DISPLAY" in lines[2]
    assert "rolltape will use osmesa first" in lines[3]
    assert first_working(results) == "osmesa"

    none_ok = format_doctor([ProbeResult("egl", False, 1.0, "x", None, None)])
    assert "no working backend" in none_ok.splitlines()[-1]


def test_doctor_probes_every_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    results = doctor()
    assert [r.backend for r in results] == list(KNOWN_BACKENDS)
    text = format_doctor(results)
    for name in KNOWN_BACKENDS:
        assert name in text
    assert {r.backend: r.ok for r in results} == {"egl": True, "osmesa": True, "glfw": False}
    assert "rolltape will use egl first" in text
