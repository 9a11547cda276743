"""Cameras, layouts and overlays for rendered frames (used inside render workers).

A camera is named by a string:

- ``default``: whatever the env's own ``env.render()`` shows (the default; exact);
- ``free``: MuJoCo's free camera, aimed at the bodies as Gymnasium aims it;
- ``NAME``: a camera defined in the model's MJCF (``<camera name="...">``);
- ``track:BODY``: a camera that follows a body of the model.

Several cameras are combined by a layout: ``single``, ``horizontal``, ``vertical``,
``grid``, or ``separate`` (one file per camera). A stream that runs out of frames holds its
last frame. An overlay can write the step, reward and return onto each frame.

May import: envs, errors, numpy (mujoco lazily). Never: policies, pass 1, executors,
outputs.

Example (not run: it needs a MuJoCo env and a GL context):
    >>> rig = CameraRig(env, ["default", "track:torso"])
    >>> frame = compose(rig.frames(), "horizontal")
"""

from __future__ import annotations

import math
import sys
from typing import Any, Sequence

import numpy as np

from rolltape.errors import UsageError

LAYOUTS = ("single", "horizontal", "vertical", "grid", "separate")


def check_layout(layout: str, cameras: Sequence[str]) -> None:
    """Refuse a layout that cannot hold the cameras asked for."""
    if layout not in LAYOUTS:
        raise UsageError(f"Unknown layout '{layout}' (--layout); use one of "
                         f"{', '.join(LAYOUTS)}.")
    if layout == "single" and len(cameras) > 1:
        raise UsageError(f"{len(cameras)} cameras need a --layout other than 'single' "
                         "(horizontal, vertical, grid or separate).")


def check_cameras(env: Any, cameras: Sequence[str]) -> list[tuple[str, int]]:
    """Resolve camera names against ``env``'s model: (kind, id) per name, or one line
    naming what the model has. Needs no renderer, so it also runs before pass 1."""
    if any(name != "default" for name in cameras) and not hasattr(env.unwrapped, "model"):
        raise UsageError(f"--camera: env '{env.spec.id}' is not a MuJoCo env, so only its "
                         "default camera can be drawn; drop --camera.")
    return [_resolve(env, name) for name in cameras]


def _resolve(env: Any, name: str) -> tuple[str, int]:
    if name == "default":
        return ("default", 0)
    if name == "free":
        return ("free", -1)
    import mujoco

    model = env.unwrapped.model
    if name.startswith("track:"):
        body = name[len("track:"):]
        body_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, body)
        if body_id < 0:
            bodies = [model.body(i).name for i in range(1, model.nbody)]
            raise UsageError(f"--camera {name}: env '{env.spec.id}' has no body '{body}' to "
                             f"track; its bodies are: {', '.join(bodies)}.")
        return ("track", body_id)
    cam_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, name)
    if cam_id < 0:
        names = [model.camera(i).name for i in range(model.ncam)]
        listed = ", ".join(n for n in names if n) or "none"
        raise UsageError(f"--camera {name}: env '{env.spec.id}' has no camera '{name}'; its "
                         f"cameras are: {listed} (or use default, free, track:BODY).")
    return ("fixed", cam_id)


class CameraRig:
    """Draws one frame per camera from a Gymnasium MuJoCo env, leaving its own camera as it was."""

    _CAM_FIELDS = ("type", "fixedcamid", "trackbodyid", "distance", "azimuth", "elevation")

    def __init__(self, env: Any, cameras: Sequence[str]) -> None:
        self.env = env
        self.names = list(cameras) or ["default"]
        self.renderer = getattr(env.unwrapped, "mujoco_renderer", None)
        if self.names != ["default"] and self.renderer is None:
            raise UsageError(f"Env '{env.spec.id}' is not a MuJoCo env, so only its default "
                             "camera can be drawn; drop --camera.")
        self.views = check_cameras(env, self.names)
        self._render: Any = None  # env.render, or the same pixels for less (see rgb_only)

    def follow_hint(self, qpos: np.ndarray | None) -> str | None:
        """A ``--camera track:BODY`` suggestion when a fixed camera of this rig loses the
        robot during the recorded states ``qpos`` (frames x nq), else None.

        Gymnasium's ``env.render()`` draws MuJoCo envs with its free camera (``camera_id``
        -1), placed once from ``default_camera_config``; a free camera never moves (the
        config's ``trackbodyid`` only matters to a tracking camera), so a robot that travels
        walks out of the picture. Call after a frame was drawn (the viewer exists).

        Heuristic: the robot is each body hung from the world by joints (Hopper's torso,
        Pusher's arm and object); it is lost when its origin projects outside the picture
        of the free camera. Model cameras are not judged (tracking ones follow by design).
        """
        static = [n for n in self.names if n == "free"
                  or (n == "default" and getattr(self.renderer, "camera_id", None) == -1)]
        if not static or qpos is None or self.renderer is None:
            return None
        import mujoco

        model = self.env.unwrapped.model
        viewer = self.renderer._get_viewer(self.env.unwrapped.render_mode)
        cam = viewer.cam
        az, el = math.radians(cam.azimuth), math.radians(cam.elevation)
        # MuJoCo's free camera: it looks along `forward` at `lookat` from `distance` away.
        forward = np.array([math.cos(el) * math.cos(az), math.cos(el) * math.sin(az),
                            math.sin(el)])
        up = np.array([-math.sin(el) * math.cos(az), -math.sin(el) * math.sin(az),
                       math.cos(el)])
        right = np.cross(forward, up)
        eye = np.array(cam.lookat) - cam.distance * forward
        half_h = math.tan(math.radians(model.vis.global_.fovy) / 2)
        half_w = half_h * viewer.viewport.width / viewer.viewport.height
        roots = [b for b in range(1, model.nbody)
                 if model.body_parentid[b] == 0 and model.body_jntnum[b] > 0
                 and model.body(b).name]  # a suggestion must name the body
        data = mujoco.MjData(model)  # a scratch copy: the env's own state stays as it is
        for frame, q in enumerate(qpos):
            data.qpos[:] = q
            mujoco.mj_kinematics(model, data)
            for body in roots:
                v = data.xpos[body] - eye
                depth = float(v @ forward)
                if (depth <= 0 or abs(v @ right) > half_w * depth
                        or abs(v @ up) > half_h * depth):
                    name = model.body(body).name
                    which = ", ".join(f"'{n}'" for n in static)
                    return (f"the {which} camera does not follow the robot: {name} leaves the "
                            f"picture at frame {frame} of {len(qpos)}; add --camera "
                            f"track:{name} to follow it")
        return None

    def frames(self) -> list[np.ndarray]:
        """One frame per camera, in order."""
        if self._render is None:
            self._render = self._choose_render()
        return [self._draw(kind, ident) for kind, ident in self.views]

    def _choose_render(self) -> Any:
        """``env.render``, or :func:`rgb_only` when it gives the same pixels here.

        Checked on this env's first frame: both draw the same state and must agree bit for
        bit, as the lean policy path must agree with ``predict``."""
        fast = rgb_only(self.env)
        if fast is None:
            return self.env.render
        return fast if np.array_equal(fast(), self.env.render()) else self.env.render

    def _draw(self, kind: str, ident: int) -> np.ndarray:
        if kind == "default":
            return self._render()
        import mujoco

        renderer = self.renderer
        assert renderer is not None  # __init__ refused named cameras without one
        viewer = renderer._get_viewer(self.env.unwrapped.render_mode)
        cam = viewer.cam
        saved = {f: getattr(cam, f) for f in self._CAM_FIELDS}
        saved_lookat, saved_id = cam.lookat.copy(), renderer.camera_id
        try:
            if kind == "track":
                renderer.camera_id = None  # draw with our cam, not a fixed/free override
                cam.type = mujoco.mjtCamera.mjCAMERA_TRACKING
                cam.trackbodyid = ident
            else:
                renderer.camera_id = ident  # -1: free; >= 0: a model camera
            return self._render()
        finally:
            for f, value in saved.items():
                setattr(cam, f, value)
            cam.lookat[:] = saved_lookat
            renderer.camera_id = saved_id


def rgb_only(env: Any) -> Any:
    """A function drawing what ``env.render()`` returns for a Gymnasium MuJoCo env in
    ``rgb_array`` mode, or None for any other env.

    Gymnasium's offscreen viewer reads back the depth buffer with every frame (and drops it
    for ``rgb_array``) and reads colour as 3-byte RGB, which Mesa converts pixel by pixel.
    This does what the viewer does (update the scene with its camera, draw, resolve the
    multisample buffer, read, flip) but reads 4-byte RGBA, Mesa's plain copy, and no depth:
    about 20% more frames/s at the ``fast`` preset and 40% at ``full`` on OSMesa. It relies
    on the viewer's attributes, so :class:`CameraRig` uses it only after comparing it with
    ``env.render()`` bit for bit.
    """
    if "gymnasium.envs.mujoco.mujoco_env" not in sys.modules:
        return None  # no MujocoEnv exists here, and importing MuJoCo to ask costs ~0.35 s
    from gymnasium.envs.mujoco.mujoco_env import MujocoEnv
    from gymnasium.envs.mujoco.mujoco_rendering import OffScreenViewer

    base = env.unwrapped
    renderer = getattr(base, "mujoco_renderer", None)
    if (not isinstance(base, MujocoEnv) or type(base).render is not MujocoEnv.render
            or base.render_mode != "rgb_array" or renderer is None):
        return None
    import mujoco

    try:
        from OpenGL import GL
    except Exception:  # PyOpenGL missing or unusable here: keep env.render()
        return None

    def read_rgb(viewer: Any) -> np.ndarray:
        con, width, height = viewer.con, viewer.viewport.width, viewer.viewport.height
        GL.glBindFramebuffer(GL.GL_READ_FRAMEBUFFER, con.offFBO)
        GL.glReadBuffer(GL.GL_COLOR_ATTACHMENT0)
        if con.offSamples:  # resolve into the plain buffer first, as mjr_readPixels does
            GL.glBindFramebuffer(GL.GL_DRAW_FRAMEBUFFER, con.offFBO_r)
            GL.glDrawBuffer(GL.GL_COLOR_ATTACHMENT0)
            GL.glBlitFramebuffer(0, 0, width, height, 0, 0, width, height,
                                 GL.GL_COLOR_BUFFER_BIT, GL.GL_NEAREST)
            GL.glBindFramebuffer(GL.GL_READ_FRAMEBUFFER, con.offFBO_r)
            GL.glReadBuffer(GL.GL_COLOR_ATTACHMENT0)
        rgba = np.empty((height, width, 4), dtype=np.uint8)
        GL.glReadPixels(0, 0, width, height, GL.GL_RGBA, GL.GL_UNSIGNED_BYTE, rgba)
        GL.glBindFramebuffer(GL.GL_FRAMEBUFFER, con.offFBO)  # where MuJoCo left it
        return rgba[::-1, :, :3]  # OpenGL's rows run bottom-up

    def draw() -> np.ndarray:
        viewer = renderer._get_viewer(render_mode="rgb_array")
        if not isinstance(viewer, OffScreenViewer) or viewer._markers or viewer._overlays:
            return env.render()
        if renderer.camera_id is not None:  # as OffScreenViewer.render applies it
            if renderer.camera_id == -1:
                viewer.cam.type = mujoco.mjtCamera.mjCAMERA_FREE
            else:
                viewer.cam.type = mujoco.mjtCamera.mjCAMERA_FIXED
            viewer.cam.fixedcamid = renderer.camera_id
        mujoco.mjv_updateScene(base.model, base.data, viewer.vopt, viewer.pert, viewer.cam,
                               mujoco.mjtCatBit.mjCAT_ALL, viewer.scn)
        mujoco.mjr_render(viewer.viewport, viewer.scn, viewer.con)
        return read_rgb(viewer)

    return draw


class Compositor:
    """Lays out one frame per stream; a stream that has ended holds its last frame."""

    def __init__(self, layout: str) -> None:
        self.layout = layout
        self._last: list[np.ndarray | None] = []

    def __call__(self, frames: Sequence[np.ndarray | None]) -> np.ndarray:
        if len(self._last) < len(frames):
            self._last += [None] * (len(frames) - len(self._last))
        tiles = []
        for k, frame in enumerate(frames):
            if frame is None:
                frame = self._last[k]
            if frame is None:
                raise ValueError(f"stream {k} has no frame yet")
            self._last[k] = frame
            tiles.append(frame)
        return compose(tiles, self.layout)


def compose(tiles: Sequence[np.ndarray], layout: str) -> np.ndarray:
    """Place equally sized frames side by side, stacked, or in a near-square grid."""
    if len(tiles) == 1 or layout in ("single", "separate"):
        return tiles[0]
    if layout == "horizontal":
        return np.concatenate(tiles, axis=1)
    if layout == "vertical":
        return np.concatenate(tiles, axis=0)
    cols = math.ceil(math.sqrt(len(tiles)))
    rows = math.ceil(len(tiles) / cols)
    blank = np.zeros_like(tiles[0])
    padded = list(tiles) + [blank] * (rows * cols - len(tiles))
    return np.concatenate([np.concatenate(padded[r * cols:(r + 1) * cols], axis=1)
                           for r in range(rows)], axis=0)


def draw_overlay(frame: np.ndarray, step: int, reward: float | None, total: float) -> np.ndarray:
    """Write 'step N  reward R  return G' in the top-left corner, on a dark band for contrast."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.fromarray(frame)
    draw = ImageDraw.Draw(image)
    size = max(10, frame.shape[0] // 24)
    font = ImageFont.load_default(size=size)
    text = f"step {step}" + ("" if reward is None else f"   reward {reward:+.3f}") + \
        f"   return {total:+.2f}"
    left, top, right, bottom = draw.textbbox((6, 4), text, font=font)
    draw.rectangle((0, 0, right + 6, bottom + 4), fill=(0, 0, 0))
    draw.text((6, 4), text, fill=(255, 255, 255), font=font)
    return np.asarray(image)


def separate_path(path: str, camera: str) -> str:
    """``ep.mp4`` for camera ``track:torso`` -> ``ep-track-torso.mp4`` (a folder keeps no suffix)."""
    from pathlib import PurePath

    p = PurePath(path.rstrip("/"))
    tag = camera.replace(":", "-").replace("/", "-")
    trailing = "/" if path.endswith("/") else ""
    return str(p.with_name(f"{p.stem}-{tag}{p.suffix}")) + trailing


def drawing_problem(spec: dict[str, Any], width: int | None, height: int | None,
                    cameras: Sequence[str]) -> str | None:
    """(In a fresh interpreter: ``rolltape.evaluate`` runs it before pass 1 when a video
    asks for a size or cameras, since importing MuJoCo in the orchestrator would fix its GL
    backend.) Build the env without rendering and check that it has what was asked for:
    None, or the one-line problem."""
    from rolltape.envs.build import check_sizing, make_env

    try:
        env = make_env(spec)
        try:
            if width is not None or height is not None:
                check_sizing(spec["id"])
            check_cameras(env, cameras)
        finally:
            env.close()
    except UsageError as exc:
        return str(exc)
    except Exception:  # not this check's to report: pass 1 builds the env and says why
        return None
    return None
