"""The render side's request and result types: what a replay is asked to do
(:class:`RenderOptions`, :class:`RenderRequest`; :class:`BatchOptions` for ``render
--renderer mjwarp``, drawn by :mod:`rolltape.pass2.batch`) and what it did
(:class:`RenderResult`, :class:`Divergence`).

They live apart from the worker (:mod:`rolltape.pass2.replay`) so that whoever only builds
requests or reads results (the CLI, the config, the orchestrator's pass 2, training,
comparisons, datasets, benchmarks) imports these records, not the worker's process code.

>>> RenderRequest("a.npz", ("a.mp4",), quality="fast").render_options()["quality"]
'fast'

May import: errors, flags, limits, pass2.cameras (the layout check), numpy. Never: GL,
policies, pass 1, torch or SB3, the orchestrator, an executor, outputs (a render worker
imports this module too).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, List, Optional, Sequence

import numpy as np

from rolltape.errors import UsageError, check_choice
from rolltape.flags import VIDEO, above, check_flags, flag, non_negative
from rolltape.groups import Workers
from rolltape.limits import check_frame_size
from rolltape.pass2 import formats
from rolltape.pass2.backends import BACKENDS_HELP, DEFAULT_ORDER, parse_backends
from rolltape.pass2.cameras import check_layout

MODES = ("resim", "restore", "auto")
ON_DIVERGENCE = ("warn", "fail")
TRUST_HELP = ("A module (top-level name) that a tape's env id (MODULE:EnvId) or a --policy "
              "zoo:FOLDER may name, imported as if you had named it; repeatable. Its code "
              "runs: name only code you trust. Packages of Gymnasium envs need no flag.")
ENV_HELP = ("Replay on this env (id, MODULE:EnvId or FILE.py:CLASS) instead of the tape's; a "
            "tape of your own env needs it: tapes never import code.")


def _strings(paths: Any) -> tuple[str, ...]:
    return tuple(str(p) for p in paths)


@dataclass(frozen=True, kw_only=True)
class RenderOptions:
    """How replays are drawn and checked: the one record of these choices, shared by an
    evaluation's config (``EvalConfig``) and each :class:`RenderRequest`.

    >>> RenderRequest("a.npz", ("a.mp4",), width=64).render_options()["width"]
    64
    """

    mode: str = flag("resim", "resim (replay and verify), restore (draw the recorded states) "
                              "or auto (resim, else restore).", panel=VIDEO)
    width: int | None = flag(None, "Frame width (env default when omitted).", panel=VIDEO)
    height: int | None = flag(None, "Frame height.", panel=VIDEO)
    cameras: tuple[str, ...] = flag(  # see rolltape.cameras; () is the env's own view
        (), "default, free, a model camera NAME, or track:BODY; repeat for several.",
        panel=VIDEO, names=("--camera",), cli_type=Optional[List[str]], cli_default=None,
        parse=tuple)
    layout: str = flag(  # how several cameras share a frame (or "separate" files)
        "single", "single, horizontal, vertical, grid, or separate (one file per camera).",
        panel=VIDEO)
    overlay: bool = flag(False, "Write step, reward and return onto the frames.", panel=VIDEO)
    quality: str = flag("full", "full (exactly env.render()), balanced, or fast (no "
                                "shadows/reflections/MSAA).", panel=VIDEO)
    rtol: float = flag(0.0, "Relative tolerance for reward parity (exact by default).",
                       panel=VIDEO, rule=non_negative())
    atol: float = flag(0.0, "Absolute tolerance for reward parity.", panel=VIDEO,
                       rule=non_negative())

    def __post_init__(self) -> None:
        """Refuse, on construction, choices no replay can make."""
        check_choice("mode", self.mode, MODES, "--mode")
        check_choice("quality", self.quality, tuple(QUALITY), "--quality")
        check_layout(self.layout, self.cameras)
        check_frame_size(self.width, self.height)  # before a GL backend tries to allocate it
        check_flags(self)  # every field's rule: this record's and any subclass's

    def render_options(self) -> dict[str, Any]:
        """These fields and their values, to make a :class:`RenderRequest` from any
        record that has them."""
        return {f.name: getattr(self, f.name) for f in fields(RenderOptions)}


@dataclass(frozen=True, kw_only=True)
class ReplayOptions:
    """How a verb replays tapes: which GL backends it tries, which modules the tapes may
    name, what a divergence does. Shared by eval (its pass 2), render, verify and export.

    >>> ReplayOptions(backends="osmesa").backends
    ('osmesa',)
    """

    trust_module: tuple[str, ...] = flag(
        (), TRUST_HELP, panel=VIDEO, names=("--trust-module",), cli_type=Optional[List[str]],
        cli_default=None, parse=tuple)
    backends: tuple[str, ...] = flag(DEFAULT_ORDER, BACKENDS_HELP, panel=VIDEO, cli_type=str,
                                     cli_default=",".join(DEFAULT_ORDER), parse=parse_backends)
    on_divergence: str = flag("warn", "warn (keep and mark the video) or fail.", panel=VIDEO)
    video_format: str | None = flag(  # unset: --out's own suffix, else mp4
        None, f"Comma-separated: {formats.names()} (png: a folder of frames); default: "
        "--out's suffix, else mp4.", panel=VIDEO, names=("--format",))

    def __post_init__(self) -> None:
        # The API takes "egl,osmesa" too: read once, into the tuple every reader uses.
        object.__setattr__(self, "backends", tuple(parse_backends(self.backends)))
        object.__setattr__(self, "trust_module", tuple(self.trust_module or ()))
        check_choice("--on-divergence", self.on_divergence, ON_DIVERGENCE)


@dataclass(frozen=True, kw_only=True)
class ReplayVerb(Workers, ReplayOptions, RenderOptions):
    """What ``rolltape render`` and ``verify`` take beside their tapes: the replay and
    drawing choices, an env to replay on, and their processes (unset: one per core)."""

    tapes: tuple[str, ...] = flag((), "Tape files (.npz).", panel=VIDEO, argument=True,
                                  cli_type=List[Path], cli_default=..., parse=_strings)
    env: str | None = flag(None, ENV_HELP, panel=VIDEO)

    def __post_init__(self) -> None:
        RenderOptions.__post_init__(self)
        ReplayOptions.__post_init__(self)


#: What draws a render's frames: MuJoCo's OpenGL renderer as env.render() uses it, in render
#: processes (the classic path), or MuJoCo Warp's batch renderer, every tape at once.
RENDERERS = ("opengl", "mjwarp")


@dataclass(frozen=True, kw_only=True)
class BatchOptions:
    """The flags of ``rolltape render --renderer mjwarp``: draw every tape at once on MuJoCo
    Warp's batch renderer (:mod:`rolltape.pass2.batch`), and what else to write.

    (Named ``--renderer``, not ``--batch``: eval's ``--batch`` already counts episodes per
    look with ``--until``, and an option name means one thing in rolltape.)

    >>> BatchOptions(depth=True).check_batch("full", "single", ())
    Traceback (most recent call last):
    rolltape.errors.UsageError: --depth is drawn only with --renderer mjwarp; add it or drop --depth.
    """

    renderer: str = flag("opengl", "opengl (env.render()'s, in render processes) or mjwarp "
                         "(every tape at once on MuJoCo Warp's batch renderer: a ray tracer, "
                         "not env.render()'s images, of the recorded states, not a replay's; "
                         "one model camera).", panel=VIDEO)
    depth: bool = flag(False, "With --renderer mjwarp: also write each tape's depth, metres "
                       "(NAME.depth.npy).", panel=VIDEO)
    segmentation: bool = flag(False, "With --renderer mjwarp: also write each tape's geom id "
                              "per pixel (NAME.seg.npy).", panel=VIDEO)

    @property
    def batch(self) -> bool:
        """True when MuJoCo Warp draws every tape at once."""
        return self.renderer == "mjwarp"

    def check_batch(self, quality: str, layout: str, cameras: Sequence[str]) -> None:
        """Refuse, in one sentence, what a batch render cannot do (the render options it
        shares with the classic renderer are given)."""
        check_choice("renderer", self.renderer, RENDERERS, "--renderer")
        if not self.batch:
            asked = [n for n, on in (("--depth", self.depth),
                                     ("--segmentation", self.segmentation)) if on]
            if asked:
                one = len(asked) == 1
                raise UsageError(f"{' and '.join(asked)} {'is' if one else 'are'} drawn only "
                                 "with --renderer mjwarp; add it or drop "
                                 f"{' and '.join(asked)}.")
            return
        if len(cameras) > 1:
            raise UsageError(f"--renderer mjwarp draws one model camera, not {len(cameras)}; "
                             "give --camera once.")
        if layout != "single":
            raise UsageError(f"--renderer mjwarp draws one camera, so --layout {layout} has "
                             "nothing to lay out; drop --layout.")
        if quality in QUALITY and quality != "full":  # an unknown one: RenderOptions says so
            raise UsageError(f"--quality {quality} is a preset of the OpenGL renderer and "
                             "means nothing to --renderer mjwarp (a ray tracer); drop "
                             "--quality.")


@dataclass(frozen=True)
class RenderRequest(RenderOptions):
    """One tape to replay, and what to make of it (no outputs: verify only, nothing drawn);
    the :class:`RenderOptions` are keyword-only."""

    tape: str
    outputs: tuple[str, ...] = ()
    fps: float | None = flag(None, "Frame rate (env's render_fps by default).", panel=VIDEO,
                             rule=above(0))
    overwrite: bool = False
    env_id: str | None = None  # replay against another env than the tape's (checked)
    frames: tuple[int, int] | None = None  # draw only frames [first, stop): one segment


@dataclass(frozen=True)
class Divergence:
    """The first step where the replay differs from pass 1."""

    step: int
    field: str
    expected: Any
    got: Any
    diff: float | None = None

    def describe(self) -> str:
        extra = f" (difference {self.diff:.3g})" if self.diff is not None else ""
        return f"step {self.step}: {self.field} was {self.expected!r} in pass 1, {self.got!r} on replay{extra}"


@dataclass(frozen=True)
class RenderResult:
    """What pass 2 did with one tape."""

    tape: str
    outputs: tuple[str, ...]
    mode: str  # the mode that drew the frames: "resim", "restore" or "verify"
    backend: str | None
    steps: int
    frames: int
    verified: bool | None  # None when nothing was re-simulated (restore)
    divergence: Divergence | None
    replay_return: float | None
    seconds: float
    failures: tuple[tuple[str, str], ...] = field(default_factory=tuple)  # (backend, reason)
    warnings: tuple[str, ...] = ()  # what MuJoCo warned about in the worker
    torch_loaded: bool = False  # isolation check: a render worker must never import torch
    # ...nor anything of the policy side or the orchestrator (names found in sys.modules)
    forbidden_loaded: tuple[str, ...] = ()
    rewards: tuple[float, ...] = ()  # the replay's rewards (to join segments' returns exactly)
    fps: float = 0.0  # frame rate the outputs were written at
    segments: int = 1  # how many workers drew parts of this episode
    niceness: int = 0  # the worker's CPU priority as the job began (10: beside pass 1)
    cameras: tuple[str, ...] = ()  # the cameras that drew the frames ("default": env.render())
    camera_hint: str | None = None  # a --camera track:BODY suggestion when the view lost the robot
    # What a re-simulation compared with pass 1: "observations" (each frame's digest, with
    # rewards and flags) or "rewards" (rewards and flags only: a tape without digests, or
    # a tolerance); None when nothing was re-simulated.
    checked: str | None = None

    def to_dict(self) -> dict[str, Any]:
        row = asdict(self)
        del row["rewards"]
        row["divergence"] = asdict(self.divergence) if self.divergence else None
        row["divergence_text"] = self.divergence.describe() if self.divergence else None
        from rolltape.tape import json_safe  # NaN (a replay of NaN rewards) is null in JSON

        return json_safe(json.loads(json.dumps(row, default=_plain)))


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


#: The --quality presets: MuJoCo visual settings a render worker applies before drawing.
QUALITY = {
    # full: exactly what Gymnasium's env.render() draws (the model's own settings).
    "full": None,
    # balanced: soft shadows from a small shadow map, no reflections, 2x multisampling.
    "balanced": {"shadow": True, "reflection": False, "shadowsize": 1024, "offsamples": 2},
    # fast: no shadows, no reflections, no multisampling; the robot stays plain to see.
    "fast": {"shadow": False, "reflection": False, "shadowsize": 0, "offsamples": 0},
}
