"""Batch re-rendering: the tapes of one MuJoCo env drawn all at once on MuJoCo Warp's batch
renderer (issue 41, part 2; ``rolltape render --renderer mjwarp``).

Each tape's recorded states (``qpos``/``qvel`` per frame, from pass 1 on CPU MuJoCo or on
MuJoCo Warp alike) go into one world of a MuJoCo Warp batch. For every frame, every world
gets its tape's state, its kinematics are computed (bodies, the centre of mass a tracking
camera follows, cameras, lights), and all worlds are drawn in one launch: RGB, and depth and
segmentation on request. A tape that has ended holds its last state (and gets no more
frames) while the longer ones go on. Nothing is re-simulated or verified: these are the
recorded states, drawn as they were.

``rolltape export --renderer mjwarp`` takes the very same frames (:func:`draw_batch`, each
frame handed to the caller) into its dataset's camera videos.

The pictures are a ray tracer's (MuJoCo Warp's), not ``env.render()``'s (MuJoCo's OpenGL
renderer): no shadows, reflections or multisampling, and curved geoms are exact where
OpenGL draws them as polygons. Every output says so (the printed summary, and each tape's
sidecar). The classic renderer's ``--quality`` presets are OpenGL settings that mean
nothing to a ray tracer, so a preset other than ``full`` is refused with it rather
than silently ignored (``full``, the default, cannot be told from "not given").

Depth and segmentation agree with MuJoCo's OpenGL ones on the same states
(tests/pass2/test_batch.py: 16 tapes of HalfCheetah and Ant at 64x64, the same geom at
>= 99% of pixels; the same depth within 1% relative at >= 99%).

Outputs per tape, beside its video (or PNG folder), written by :mod:`rolltape.pass2.encode`:

- ``NAME.depth.npy``: float32 (frames, height, width), metres along the camera's axis
  (planar depth, as ``mujoco.Renderer``'s depth rendering gives it); 0 where no geom is hit.
- ``NAME.seg.npy``: int32 (frames, height, width, 2): (geom id, ``mjOBJ_GEOM``) per pixel,
  (-1, -1) where no geom is hit: ``mujoco.Renderer``'s segmentation layout.

``.npy``, because numpy reads it back exactly (memory-mapped too, one frame at a time) and
it can be streamed: the header is written first, each frame appended as it is drawn, and
the file renamed into place when complete (nothing is kept in memory, nothing half-written
is left behind).

May import: envs, tape, errors, files, flags, limits, the render side's request and encode
and cameras (overlay), numpy; mujoco, warp and mujoco_warp when a batch is drawn. Never:
torch, pass 1, policies, executors, outputs, the orchestrator.

Example (not run: it compiles Warp kernels):
    >>> done = render_batch(BatchRequest(tapes=("a.npz", "b.npz"),
    ...                                  outputs=(("a.mp4",), ("b.mp4",)), width=128,
    ...                                  height=128, depth=True))
    >>> [r.frames for r in done.results]
    [1001, 1001]
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from rolltape.envs.ids import check_tape_env_module
from rolltape.envs.mjwarp import missing_extra, quiet_warp, require_extra
from rolltape.errors import UsageError
from rolltape.files import atomic_file
from rolltape.limits import check_frame_size
from rolltape.pass2.cameras import draw_overlay
from rolltape.pass2.encode import open_writer
from rolltape.pass2.request import RenderResult
from rolltape.tape import Tape

#: What every batch output says about its pictures (printed, and in each sidecar).
RAY_TRACED = ("drawn by MuJoCo Warp's batch renderer, a ray tracer: not env.render()'s "
              "OpenGL images (no shadows, reflections or multisampling)")
BACKEND = "mujoco_warp"  # a result's backend: what drew its frames
WORLDS = 1024  # tapes drawn at once; more wait for the next round (encoders stay few)


@dataclass(frozen=True, kw_only=True)
class BatchRequest:
    """What to draw: the tapes, each tape's outputs (pixel formats: video files or a PNG
    folder ending in /), the env to draw them on (None: the tape's own), the frame size
    (None: the env's own render size) and camera (None: the model's first camera)."""

    tapes: tuple[str, ...]
    outputs: tuple[tuple[str, ...], ...]
    env_ids: tuple[str | None, ...] = ()
    width: int | None = None
    height: int | None = None
    camera: str | None = None
    depth: bool = False
    segmentation: bool = False
    fps: float | None = None
    overlay: bool = False
    overwrite: bool = False
    worlds: int = WORLDS

    def __post_init__(self) -> None:
        check_frame_size(self.width, self.height)
        if len(self.outputs) != len(self.tapes) or (self.env_ids
                                                    and len(self.env_ids) != len(self.tapes)):
            raise ValueError("one entry of outputs (and of env_ids, when given) per tape")
        if self.worlds < 1:
            raise ValueError("worlds must be at least 1")


@dataclass(frozen=True)
class BatchResult:
    """What a batch render did: one :class:`RenderResult` per tape (mode ``restore``,
    backend ``mujoco_warp``), and the batch's own facts."""

    results: tuple[RenderResult, ...]
    env_id: str
    camera: str
    width: int
    height: int
    device: str
    seconds: float  # the whole call: model, kernels (compiled or cached), drawing, encoding
    draw_seconds: float  # setting states, kinematics and drawing only

    @property
    def frames(self) -> int:
        return sum(r.frames for r in self.results)

    def summary(self) -> str:
        """The line that says what drew the frames, and how fast."""
        rate = self.frames / self.seconds if self.seconds > 0 else float("inf")
        return (f"{self.frames} frames of {len(self.results)} tape(s) of {self.env_id} at "
                f"{self.width}x{self.height}, camera '{self.camera}', on Warp's {self.device} "
                f"device in {self.seconds:.1f} s ({rate:.0f} frames/s): {RAY_TRACED}.")


def _state_problem(tape: Tape, path: str) -> str | None:
    if not tape.has_state:
        return (f"Tape '{path}' holds no MuJoCo state (qpos/qvel), so MuJoCo Warp cannot "
                "draw it; render it with --renderer opengl.")
    return None


def _spec(tape: Tape, env_id: str | None) -> dict[str, Any]:
    return dict(tape.env) if env_id is None else {**tape.env, "id": env_id}


def _same_env_key(spec: dict[str, Any]) -> tuple[str, str]:
    import json

    return str(spec["id"]), json.dumps(spec.get("kwargs") or {}, sort_keys=True, default=str)


@dataclass
class _Loaded:
    """The tapes checked, and the model they are drawn on."""

    tapes: list[Tape]
    env: Any
    env_id: str
    camera: str
    width: int
    height: int
    fps: float


def _load(req: BatchRequest, given: Sequence[Tape] | None = None) -> _Loaded:
    """Load (unless ``given``) and check every tape before anything is built or written."""
    from rolltape.envs.build import make_env

    if not req.tapes:
        raise UsageError("No tapes were given to draw; name one or more .npz tapes.")
    tapes, keys = [], []
    for i, path in enumerate(req.tapes):
        tape = given[i] if given is not None else Tape.load(path)
        env_id = req.env_ids[i] if req.env_ids else None
        if env_id is None:
            check_tape_env_module(tape.env_id, path)  # a tape is data: it names no code
        problem = _state_problem(tape, path)
        if problem:
            raise UsageError(problem)
        tapes.append(tape)
        keys.append(_same_env_key(_spec(tape, env_id)))
    if len(set(keys)) > 1:
        other = next(i for i, k in enumerate(keys) if k != keys[0])
        a, b = ((k[0] if keys[0][0] != keys[other][0] else f"{k[0]} with kwargs {k[1]}")
                for k in (keys[0], keys[other]))
        raise UsageError(f"--renderer mjwarp draws the tapes of one env at a time, but "
                         f"'{req.tapes[0]}' is of {a} and '{req.tapes[other]}' of {b}; render "
                         "each env's tapes apart.")
    env = make_env(_spec(tapes[0], req.env_ids[0] if req.env_ids else None))
    model = getattr(env.unwrapped, "model", None)
    if model is None or not hasattr(model, "ncam"):
        env.close()
        raise UsageError(f"Env '{keys[0][0]}' is not a MuJoCo env, so MuJoCo Warp cannot draw "
                         "it; render it with --renderer opengl.")
    for tape, path in zip(tapes, req.tapes):
        assert tape.qpos is not None and tape.qvel is not None  # checked above
        if tape.qpos.shape[1] != model.nq or tape.qvel.shape[1] != model.nv:
            env.close()
            raise UsageError(f"Tape '{path}' holds states of {tape.qpos.shape[1]} positions "
                             f"and {tape.qvel.shape[1]} velocities, but {keys[0][0]}'s model "
                             f"has {model.nq} and {model.nv}; render it with its own env.")
    names = [model.camera(i).name for i in range(model.ncam)]
    if not names:
        env.close()
        raise UsageError(f"Env '{keys[0][0]}'s model has no camera, and MuJoCo Warp draws "
                         "only the model's own cameras; render it with --renderer opengl.")
    camera = req.camera or names[0]
    if camera not in names:
        env.close()
        if camera == "default" or camera == "free" or camera.startswith("track:"):
            raise UsageError(f"--camera {camera} is a view of env.render()'s renderer, and "
                             "MuJoCo Warp draws only the model's own cameras; give one of "
                             f"{keys[0][0]}'s: {', '.join(names)}.")
        raise UsageError(f"--camera '{camera}' is not one of {keys[0][0]}'s model cameras "
                         f"({', '.join(names)}), which are all MuJoCo Warp draws.")
    base = env.unwrapped
    width = req.width or int(getattr(base, "width", None) or 480)
    height = req.height or int(getattr(base, "height", None) or 480)
    fps = req.fps or float(env.metadata.get("render_fps") or 30)
    return _Loaded(tapes, env, keys[0][0], camera, width, height, fps)


def _stem(outputs: Sequence[str], tape: str) -> Path:
    """Where a tape's arrays go: beside its first output, named after it (a video's suffix
    or a PNG folder's slash dropped); beside the tape when it has no pixel output."""
    if not outputs:
        return Path(tape).with_suffix("")
    first = Path(outputs[0].rstrip("/"))
    return first.with_suffix("") if not outputs[0].endswith("/") else first


def array_paths(req: BatchRequest) -> list[list[str]]:
    """Each tape's .npy outputs (depth, then segmentation, as asked)."""
    kinds = [k for k, on in ((".depth.npy", req.depth), (".seg.npy", req.segmentation)) if on]
    return [[f"{_stem(outs, tape)}{k}" for k in kinds]
            for tape, outs in zip(req.tapes, req.outputs)]


class _ArrayFile:
    """One .npy file streamed frame by frame into a temporary sibling, renamed into place
    when complete (:func:`rolltape.files.atomic_file`)."""

    def __init__(self, stack: contextlib.ExitStack, path: str, shape: tuple[int, ...],
                 dtype: np.dtype[Any], overwrite: bool) -> None:
        if os.path.lexists(path) and not overwrite:
            raise UsageError(f"{path} already exists; pass --overwrite to replace it.")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: IO[bytes] = stack.enter_context(atomic_file(path))
        np.lib.format.write_array_header_1_0(self._file, {
            "descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
            "shape": shape})
        self._dtype = dtype

    def write(self, frame: np.ndarray) -> None:
        self._file.write(np.ascontiguousarray(frame, dtype=self._dtype).tobytes())


class _Batch:
    """N worlds of one model on MuJoCo Warp, with a render context for one camera."""

    def __init__(self, model: Any, worlds: int, camera: str, width: int, height: int,
                 depth: bool, segmentation: bool) -> None:
        wp = _quiet_warp()
        import mujoco_warp as mjw

        self.mjw, self.wp = mjw, wp
        try:
            self.m = mjw.put_model(model)
        except (NotImplementedError, ValueError) as exc:
            raise UsageError(f"MuJoCo Warp cannot take this env's model ({exc}); render it "
                             "with --renderer opengl.") from None
        self.d = mjw.make_data(model, nworld=worlds)
        self.rc = mjw.create_render_context(
            model, nworld=worlds, cam_res=(width, height), render_rgb=True,
            render_depth=depth, render_seg=segmentation, cam_active=[camera],
            render_skybox=True)
        # Depth comes out divided by a scale and clipped to [0, 1]: the far plane's
        # distance as the scale keeps every depth (nothing beyond it is hit).
        self.zfar = float(model.vis.map.zfar * model.stat.extent)
        shape = (worlds, height, width)
        self.rgb = wp.zeros(shape, dtype=wp.vec3)
        self.depth = wp.zeros(shape, dtype=float) if depth else None
        self.seg = wp.zeros(shape, dtype=wp.vec2i) if segmentation else None

    def draw(self, qpos: np.ndarray, qvel: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """Put each world into its state (float32 arrays, a row per world) and draw them all:
        (RGB uint8 (N, H, W, 3), depth in metres (N, H, W) or None, segmentation int32
        (N, H, W, 2) or None)."""
        mjw = self.mjw
        self.d.qpos.assign(qpos)
        self.d.qvel.assign(qvel)
        mjw.kinematics(self.m, self.d)
        mjw.com_pos(self.m, self.d)  # a tracking camera follows the subtree's centre of mass
        mjw.camlight(self.m, self.d)
        mjw.refit_bvh(self.m, self.d, self.rc)
        mjw.render(self.m, self.d, self.rc)
        mjw.get_rgb(self.rc, 0, self.rgb)
        rgb = np.rint(self.rgb.numpy() * 255.0).astype(np.uint8)
        depth = seg = None
        if self.depth is not None:
            mjw.get_depth(self.rc, 0, self.zfar, self.depth)
            depth = self.depth.numpy() * np.float32(self.zfar)
        if self.seg is not None:
            mjw.get_segmentation(self.rc, 0, self.seg)
            seg = self.seg.numpy().astype(np.int32)
        return rgb, depth, seg


#: The refusal where the optional extra is missing (render's and export's).
MISSING_EXTRA = missing_extra("--renderer mjwarp")


def check_installed() -> None:
    """Refuse, without importing Warp (a process that only orchestrates may ask), where
    the mjwarp extra is not installed."""
    require_extra("--renderer mjwarp")


def _quiet_warp() -> Any:
    """Warp, initialized and quiet (:func:`rolltape.envs.mjwarp.quiet_warp`), or a
    one-sentence refusal where the optional extra is not installed."""
    check_installed()
    return quiet_warp()


def _warp_device() -> str:
    return str(_quiet_warp().get_device().alias)


#: Where one tape's frames go, called with (the tape's frame index, RGB (H, W, 3) uint8,
#: depth (H, W) or None, segmentation (H, W, 2) or None), on one thread at a time per tape.
Sink = Callable[[int, np.ndarray, "np.ndarray | None", "np.ndarray | None"], None]


def render_batch(req: BatchRequest, on_progress: Callable[[int], None] | None = None,
                 tapes: Sequence[Tape] | None = None) -> BatchResult:
    """Draw every tape of ``req`` on MuJoCo Warp's batch renderer and write its outputs;
    ``on_progress(frames)``: frames drawn so far, all tapes together; ``tapes``: the
    request's tapes, loaded already (else loaded here).

    Every tape is loaded and checked, and every output opened (an existing one refused
    unless ``overwrite``), before anything is drawn. Tapes are drawn ``req.worlds`` at a
    time; each tape's outputs appear whole when its round ends, or not at all."""
    started = time.perf_counter()
    _quiet_warp()  # a missing extra is refused before anything else
    loaded = _load(req, tapes)
    try:
        return _render(req, loaded, started, on_progress)
    finally:
        loaded.env.close()


def draw_batch(req: BatchRequest,
               open_sink: Callable[[int, int], contextlib.AbstractContextManager[Sink]],
               last_frame: bool = True,
               on_progress: Callable[[int], None] | None = None) -> BatchResult:
    """Draw every tape of ``req`` (its outputs unused) and hand each frame to the tape's
    :data:`Sink`, for a caller that encodes the frames its own way (``rolltape export
    --renderer mjwarp``): the very frames :func:`render_batch` writes. ``open_sink(i, frames)``
    (tape ``i`` and how many frames it gets) is entered when its round begins and left when it ends (with the error, if one
    stops the drawing). ``last_frame=False``: each tape's frames stop before its last one
    (a dataset's frames are the observations its actions were taken on). The result holds
    no per-tape results."""
    started = time.perf_counter()
    _quiet_warp()
    loaded = _load(req)
    try:
        ranges = [(first, stop if last_frame else stop - 1)
                  for first, stop in (t.frame_range for t in loaded.tapes)]
        device, draw_s = _draw(req, loaded, ranges, open_sink, on_progress)
    finally:
        loaded.env.close()
    return BatchResult((), loaded.env_id, loaded.camera, loaded.width, loaded.height, device,
                       time.perf_counter() - started, draw_s)


def _draw(req: BatchRequest, loaded: _Loaded, ranges: list[tuple[int, int]],
          open_sink: Callable[[int, int], contextlib.AbstractContextManager[Sink]],
          on_progress: Callable[[int], None] | None) -> tuple[str, float]:
    """Draw the tapes ``req.worlds`` at a time, frames ``ranges[i]`` of tape ``i`` into
    the sink ``open_sink(i, frames)`` gives (entered for that tape's round); returns (Warp's
    device, the drawing seconds)."""
    tapes, n = loaded.tapes, len(loaded.tapes)
    batch = _Batch(loaded.env.unwrapped.model, min(n, req.worlds), loaded.camera,
                   loaded.width, loaded.height, req.depth, req.segmentation)
    device = _warp_device()
    draw_s, done = 0.0, 0

    def progress(frames: int) -> None:
        if on_progress is not None:
            on_progress(done + frames)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as encoders:
        for lo in range(0, n, batch.d.nworld):
            chunk = range(lo, min(n, lo + batch.d.nworld))
            with contextlib.ExitStack() as this_round:  # left: the round's outputs published
                sinks = [this_round.enter_context(open_sink(i, ranges[i][1] - ranges[i][0]))
                         for i in chunk]
                draw_s += _round(batch, [tapes[i] for i in chunk], [ranges[i] for i in chunk],
                                 sinks, encoders, progress)
            done += sum(stop - first for first, stop in (ranges[i] for i in chunk))
    return device, draw_s


def _render(req: BatchRequest, loaded: _Loaded, started: float,
            on_progress: Callable[[int], None] | None) -> BatchResult:
    tapes = loaded.tapes
    arrays = array_paths(req)
    frame_ranges = [t.frame_range for t in tapes]
    with contextlib.ExitStack() as opened:
        # Every output first, each tape's in a stack of its own (closed, so published, when
        # its round ends): a refusal (an output exists) comes before any drawing, and an
        # error aborts every output not yet published.
        stacks, writers, files = [], [], []
        for outs, paths, (first, stop) in zip(req.outputs, arrays, frame_ranges):
            stack = opened.enter_context(contextlib.ExitStack())
            stacks.append(stack)
            writers.append([stack.enter_context(open_writer(p, fps=loaded.fps,
                                                            overwrite=req.overwrite))
                            for p in outs])
            files.append([_ArrayFile(stack, p, _array_shape(p, stop - first, loaded),
                                     _array_dtype(p), req.overwrite) for p in paths])

        @contextlib.contextmanager
        def outputs(i: int, frames: int) -> Iterator[Sink]:
            tape = tapes[i]
            returns = np.concatenate([[0.0], np.cumsum(tape.rewards)]) if req.overlay else None

            def write(index: int, rgb: np.ndarray, depth: np.ndarray | None,
                      seg: np.ndarray | None) -> None:
                frame = rgb
                if returns is not None:
                    reward = float(tape.rewards[index - 1]) if index else None
                    frame = draw_overlay(frame, index, reward, float(returns[index]))
                for writer in writers[i]:
                    writer.write(frame)
                for f in files[i]:
                    f.write(seg if f.path.endswith(".seg.npy") else depth)  # type: ignore[arg-type]

            with stacks[i]:  # left when the round ends: published, or aborted on an error
                yield write

        device, draw_s = _draw(req, loaded, frame_ranges, outputs, on_progress)
    seconds = time.perf_counter() - started
    results = tuple(
        RenderResult(tape=path, outputs=(*outs, *paths), mode="restore", backend=BACKEND,
                     steps=tape.length, frames=stop - first, verified=None, divergence=None,
                     replay_return=None, seconds=seconds, fps=loaded.fps,
                     cameras=(loaded.camera,), warnings=(RAY_TRACED,))
        for path, tape, outs, paths, (first, stop)
        in zip(req.tapes, tapes, req.outputs, arrays, frame_ranges))
    return BatchResult(results, loaded.env_id, loaded.camera, loaded.width, loaded.height,
                       device, seconds, draw_s)


def _array_shape(path: str, frames: int, loaded: _Loaded) -> tuple[int, ...]:
    plane = (frames, loaded.height, loaded.width)
    return (*plane, 2) if path.endswith(".seg.npy") else plane


def _array_dtype(path: str) -> np.dtype[Any]:
    return np.dtype("<i4") if path.endswith(".seg.npy") else np.dtype("<f4")


def _round(batch: _Batch, tapes: list[Tape], ranges: list[tuple[int, int]],
           sinks: list[Sink], encoders: ThreadPoolExecutor,
           progress: Callable[[int], None]) -> float:
    """Draw one round of tapes (a world each), frame by frame, into their sinks; returns
    the drawing seconds. Frame k of the round is each tape's frame ``first + k``, held at
    its last one."""
    worlds = batch.d.nworld
    longest = max(stop - first for first, stop in ranges)
    # Every world's state at every frame of the round, in the float32 MuJoCo Warp computes
    # in: a finished tape repeats its last state; idle worlds (the last round's) the first's.
    rows = [np.minimum(np.arange(first, first + longest), stop - 1) for first, stop in ranges]
    states = []
    for name in ("qpos", "qvel"):
        per_world = [getattr(t, name)[r] for t, r in zip(tapes, rows)]
        per_world += per_world[:1] * (worlds - len(tapes))
        states.append(np.stack(per_world, axis=1).astype(np.float32))  # (frames, worlds, n)
    draw_s = 0.0
    for k in range(longest):
        index = [int(r[k]) for r in rows]
        t0 = time.perf_counter()
        rgb, depth, seg = batch.draw(states[0][k], states[1][k])
        draw_s += time.perf_counter() - t0
        live = [w for w, (first, stop) in enumerate(ranges) if first + k < stop]

        def write(w: int) -> None:
            sinks[w](index[w], rgb[w], None if depth is None else depth[w],
                     None if seg is None else seg[w])

        list(encoders.map(write, live))  # each tape's sink on one thread at a time
        if (k + 1) % 10 == 0 or k + 1 == longest:
            progress(sum(min(k + 1, stop - first) for first, stop in ranges))
    return draw_s
