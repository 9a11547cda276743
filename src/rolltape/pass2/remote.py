"""One replay as a task of a remote executor (Ray): the tape comes in as bytes and the
outputs go back as bytes, because a task's machine need not share the caller's disk.

The task draws exactly as a local render worker does (:class:`replay.Replayer`, the same
backend checks), in a temporary folder of its own; the caller writes the returned files at
the paths it asked for. A process keeps one replayer per backend across tasks (envs and GL
contexts are reused, as in a local worker); one process serves one backend.

May import: the render side. Never: policy code, torch, executors, outputs.

Example (not run: it renders):
    >>> kind, result, files = replay_shipped("egl", request, Path(request.tape).read_bytes())
    >>> kind, sorted(files) == sorted(request.outputs)
    ('done', True)
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

from rolltape.envs.build import forget_mujoco_warnings
from rolltape.errors import UsageError
from rolltape.files import unmap_paths
from rolltape.interpreter import GL_VARIABLES
from rolltape.pass2.backends import (
    gl_environment,
    mujoco_gl_already_read,
    select_backend_in_this_process,
)
from rolltape.pass2.replay import BackendFailure, Replayer, inject_fault
from rolltape.pass2.request import RenderRequest

_REPLAYERS: dict[str | None, Replayer] = {}


def replay_shipped(backend: str | None, req: RenderRequest, tape: bytes | None
                   ) -> tuple[str, Any, dict[str, Any] | None]:
    """Replay ``req`` from the tape's bytes; return (kind, payload, files).

    kind is "done" (payload: the RenderResult, naming the caller's paths; files: each
    output's bytes, or {frame name: bytes} for a folder of PNG frames, keyed by the caller's
    path), "backend_failed", "usage_error" or "error" (payload: text). ``tape`` None means
    the caller's tape does not exist (the loader then says so, as it would locally)."""
    # Here: the orchestrator imports this module (the task it ships), never the encoder.
    from rolltape.pass2.encode import format_from_path

    failed = _select(backend)
    if failed:
        return "backend_failed", failed, None
    forget_mujoco_warnings()
    tmp = Path(tempfile.mkdtemp(prefix="rolltape-render-"))
    local_tape = tmp / Path(req.tape).name
    paths = {str(local_tape): req.tape}  # temporary -> the caller's, for messages and files
    outputs = []
    for k, original in enumerate(req.outputs):
        fmt = format_from_path(original)
        # The suffix (or its absence, for PNG frames) tells the writer the format.
        local = tmp / (f"out{k}.{fmt}" if fmt != "png" else f"out{k}")
        paths[str(local)] = original
        outputs.append(str(local))
    try:
        if tape is not None:
            local_tape.write_bytes(tape)
        replayer = _REPLAYERS.get(backend)
        if replayer is None:
            replayer = _REPLAYERS[backend] = Replayer(backend, progress=lambda n: None)
        try:
            result = replayer.run(replace(req, tape=str(local_tape), outputs=tuple(outputs),
                                          overwrite=True))
        except BackendFailure as exc:
            _REPLAYERS.pop(backend, None)
            replayer.close()
            return "backend_failed", str(exc), None
        files = {paths[p]: _read_output(Path(p)) for p in outputs}
        return "done", replace(result, tape=req.tape, outputs=tuple(req.outputs)), files
    except UsageError as exc:
        return "usage_error", unmap_paths(str(exc), paths), None
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        return "error", unmap_paths(text, paths), None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _select(backend: str | None) -> str | None:
    """Make this process draw with ``backend`` (before mujoco is imported); return why it
    cannot, or None. A process that draws nothing gets no GL variable at all."""
    if backend is None:
        if "mujoco" not in sys.modules:  # only meaningful before mujoco is imported
            for var in GL_VARIABLES:
                os.environ.pop(var, None)
        return None
    wanted = gl_environment(backend)["MUJOCO_GL"]
    if os.environ.get("MUJOCO_GL") != wanted:
        return (f"the worker started with MUJOCO_GL={os.environ.get('MUJOCO_GL')!r}, not "
                f"{wanted!r} (its environment was not applied)")
    try:
        select_backend_in_this_process(backend)
    except RuntimeError as exc:
        return str(exc)
    inject_fault(backend)  # test hook (ROLLTAPE_FAULT), as in a local render worker
    try:
        import mujoco  # noqa: F401  (the import itself fails for a missing GL library)
    except Exception as exc:
        return f"import mujoco failed: {exc}"
    read = mujoco_gl_already_read()
    return None if read == wanted else f"mujoco was imported with MUJOCO_GL={read!r}"


def _read_output(path: Path) -> bytes | dict[str, bytes]:
    if path.is_dir():  # PNG frames
        return {p.name: p.read_bytes() for p in sorted(path.iterdir())}
    return path.read_bytes()


