"""The tape: one episode, recorded in pass 1, self-contained enough to replay anywhere.

A tape holds what ``reset`` was called with, every action at full precision, what the env
returned for each step, a digest of each observation, and for MuJoCo envs the physics state
of each frame. It is one ``.npz`` file with a JSON header inside, so it can be rendered
later, elsewhere, many times.

May import: errors, files, numpy. Never: envs, policies, GL (a tape is data, loaded
anywhere).

Example (not run: it reads a run's tape):
    >>> tape = Tape.load("runs/cheetah/tapes/policy-0000.npz")
    >>> tape.length, tape.total_return
    (1000, 4391.2...)
"""

from __future__ import annotations

import io
import json
import math
import os
import struct
import tokenize
import zipfile
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

import numpy as np

from rolltape.errors import UsageError
from rolltape.files import atomic_file

SCHEMA_VERSION = 1
#: ``meta["backend"]`` of a tape MuJoCo Warp made (pass 1's ``--simulator mjwarp``): pass 2
#: re-simulates it on MJWarp, ``verify --flips`` compares it with CPU MuJoCo
MJWARP = "mjwarp"
_RECENT: OrderedDict[tuple[Any, ...], Tape] = OrderedDict()  # see Tape.load
_RECENT_TAPES = 16
_REQUIRED_ARRAYS = ("actions", "rewards", "terminated", "truncated")
# chunk_starts: a served policy's chunks (rolltape.policy_server.client)
_OPTIONAL_ARRAYS = ("chunk_starts", "chunk_index", "chunk_offset", "obs_digest", "obs_key_digest", "qpos", "qvel", "physics",
                    "ale_state", "ale_state_offsets")

# A tape is untrusted data. Real tapes barely compress (float64 physics states are most of
# the bytes: a 1000-step HalfCheetah tape is 0.4 MB on disk and 1.05x that expanded), but
# deflate can expand 1000x, so sizes are read from the zip directory before anything is
# expanded: past _FREE_BYTES a tape may expand at most _MAX_RATIO times its file size.
_MAX_BYTES = 2 * 1024**3
_FREE_BYTES = 64 * 1024**2
_MAX_RATIO = 100
_MAX_HEADER = 1024**2  # bytes of JSON header; real ones are a few kB
_MAX_DEPTH = 32  # nesting of the JSON header; real ones nest 4 deep
_FIX = "re-record it with `rolltape eval`"
# What zipfile, zlib, struct and numpy's .npy header parser (tokenize, then literal_eval)
# raise on a damaged file; RuntimeError covers "encrypted", an unknown compression method
# (NotImplementedError) and too deep a nesting (RecursionError).
_DAMAGED = (zipfile.BadZipFile, zlib.error, struct.error, tokenize.TokenError, EOFError,
            OSError, ValueError, KeyError, TypeError, RuntimeError, OverflowError)


@dataclass(frozen=True, eq=False)
class Tape:
    """One recorded episode.

    Attributes:
        env: how to rebuild the env: ``{"id", "kwargs", "max_episode_steps", "versions"}``.
        seed: the seed ``reset`` was called with.
        options: the ``options`` given to ``reset`` (or None).
        actions: (T, ...) array exactly as passed to ``env.step`` (ints for Discrete).
        rewards: (T,) float64, exactly as the env returned them.
        terminated, truncated: (T,) bool flags as the env returned them.
        obs_digest: (T+1,) uint64 digests of the reset observation and each step's, or None.
        obs_keys, obs_key_digest: a dict observation's key names and (T+1, keys) uint64
            digests of each key per frame, so a diff can name the key that differs; None
            for other observations (obs_digest names the whole one).
        obs_reset: per key ("obs" for an array), hex digests of the reset observation
            as it is ("value"), in flipped, transposed, reordered forms, and as the policy
            saw it through its wrappers ("seen"), or None: what ``rolltape diff`` reads to
            name a flip or a channel order.
        obs_images: for a dict observation holding images (uint8 arrays of rank 3),
            ``{"keys": [their key names], "backend": the GL backend (MUJOCO_GL) of the
            process that stepped the env, or null}``, else None: pass 2 compares the
            images' digests only when it draws with the same backend.
        qpos, qvel: (T+1, nq) and (T+1, nv) MuJoCo state per frame, or None.
        physics: (T+1, n) MuJoCo state per frame (:func:`rolltape.envs.state.physics_spec`), from
            which stepping continues bit for bit; lets one episode render in segments.
        ale_state, ale_state_offsets: Atari (ale-py) only: each frame's emulator state as ALE
            serializes it, end to end (uint8), and the T+2 offsets where state t is
            ``ale_state[offsets[t]:offsets[t+1]]``; ``restore`` draws from them. Data only:
            ALE's own deserializer reads them, in a render worker.
        success_at_end: ``info["is_success"]`` (or the run's success key) on the last step,
            None when the env does not say (what LeRobot's own rollout counts).
        success_once: whether that key was true at some step, None when never reported.
        metrics: ``info["metrics"]`` at the last step (JSON-safe), or None.
        policy: what produced the actions: kind, source, sha256, deterministic.
        wall_s: wall-clock seconds the episode took in pass 1.
        meta: free-form extras (run role, episode index, ...).
        reset_rng: the env's ``np_random`` bit-generator state just before ``reset`` (a
            dict of names and integers, as numpy gives it), or None. Training resets are
            unseeded; a replay sets this state, then resets, and gets the same episode.
        start_step: steps the episode had run before the tape begins (0: it begins at
            ``reset``). A tape that begins later (a step-triggered recording) starts from
            ``physics[0]`` and needs a MuJoCo env.
        window: the frames to draw, (first, last) inclusive, when not all of them (a
            training recording that began mid-episode on an env whose state cannot be
            set: the tape begins at the reset, pass 2 re-simulates from there and draws
            frames first..last only), or None for every frame.
    """

    env: dict[str, Any]
    seed: int | None
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    options: dict[str, Any] | None = None
    obs_digest: np.ndarray | None = None
    obs_key_digest: np.ndarray | None = None
    obs_keys: tuple[str, ...] | None = None
    obs_reset: dict[str, dict[str, str]] | None = None
    obs_images: dict[str, Any] | None = None
    qpos: np.ndarray | None = None
    qvel: np.ndarray | None = None
    physics: np.ndarray | None = None
    ale_state: np.ndarray | None = None
    ale_state_offsets: np.ndarray | None = None
    success_at_end: bool | None = None
    success_once: bool | None = None
    metrics: dict[str, Any] | None = None
    policy: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)
    reset_rng: dict[str, Any] | None = None
    start_step: int = 0
    window: tuple[int, int] | None = None
    # A served policy's action chunks: the step at which each was requested (ascending,
    # from 0), when some chunk ran more than one action open loop; None otherwise.
    chunk_starts: np.ndarray | None = None
    # Under a simulated clock (rolltape.pass1.clock): per step, which chunk (in the order
    # they took over) and which action of it played; -1 for a hold.
    chunk_index: np.ndarray | None = None
    chunk_offset: np.ndarray | None = None

    def __post_init__(self) -> None:
        _check_shapes(self, where="tape")

    # -- derived numbers -------------------------------------------------------------
    @property
    def length(self) -> int:
        """Number of steps (frames of a render are ``length + 1``)."""
        return int(self.rewards.shape[0])

    @cached_property  # computed once: the header, the row and its flags all ask
    def total_return(self) -> float:
        """Sum of rewards, correctly rounded so it does not depend on order (NaN or
        infinite when the env returned such rewards: see :func:`sum_rewards`)."""
        return sum_rewards(self.rewards.tolist())

    @property
    def frame_range(self) -> tuple[int, int]:
        """The frames a render draws, [first, stop): the window, else all ``length + 1``."""
        if self.window is None:
            return 0, self.length + 1
        return self.window[0], self.window[1] + 1

    @property
    def has_ale_state(self) -> bool:
        """True when the tape holds an Atari emulator state per frame."""
        return self.ale_state is not None and self.ale_state_offsets is not None

    def ale_state_at(self, t: int) -> bytes:
        """Frame ``t``'s serialized ALE state."""
        assert self.ale_state is not None and self.ale_state_offsets is not None
        return self.ale_state[self.ale_state_offsets[t]:self.ale_state_offsets[t + 1]].tobytes()

    @property
    def can_continue(self) -> bool:
        """True when a replay can begin mid-episode from a recorded state (MuJoCo physics or
        ALE emulator states), so one long episode can be replayed in segments."""
        return self.physics is not None or self.has_ale_state

    @property
    def can_restore(self) -> bool:
        """True when ``restore`` mode can draw the tape (MuJoCo or ALE states)."""
        return self.has_state or self.has_ale_state

    @property
    def has_state(self) -> bool:
        """True when the tape holds MuJoCo physics states (``restore`` mode can draw it)."""
        return self.qpos is not None and self.qvel is not None

    @property
    def env_id(self) -> str:
        return str(self.env["id"])

    # -- file format -----------------------------------------------------------------
    def header(self) -> dict[str, Any]:
        """The JSON header stored inside the ``.npz`` (``reset_rng``, ``start_step`` and
        ``window`` only when set, so that tapes without them are byte for byte as before)."""
        extra: dict[str, Any] = {}
        if self.reset_rng is not None:
            extra["reset_rng"] = self.reset_rng
        if self.start_step:
            extra["start_step"] = self.start_step
        if self.window is not None:
            extra["window"] = list(self.window)
        if self.obs_keys is not None:
            extra["obs_keys"] = list(self.obs_keys)
        if self.obs_reset is not None:
            extra["obs_reset"] = self.obs_reset
        if self.obs_images is not None:
            extra["obs_images"] = self.obs_images
        return {
            "schema_version": SCHEMA_VERSION,
            "env": self.env,
            "seed": self.seed,
            "options": self.options,
            "success_at_end": self.success_at_end,
            "success_once": self.success_once,
            "metrics": self.metrics,
            "policy": self.policy,
            "wall_s": self.wall_s,
            "meta": self.meta,
            "length": self.length,
            "return": finite_or_none(self.total_return),
            **extra,
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the tape atomically (temporary file, then rename) and return its path."""
        path = Path(path)
        if path.suffix != ".npz":
            raise UsageError(f"A tape file must end in .npz, got '{path}'; rename it.")
        arrays = {name: getattr(self, name) for name in _REQUIRED_ARRAYS}
        for name in _OPTIONAL_ARRAYS:
            if getattr(self, name) is not None:
                arrays[name] = getattr(self, name)
        header = json.dumps(self.header(), allow_nan=False).encode()
        arrays["header"] = np.frombuffer(header, dtype=np.uint8)
        staged = io.BytesIO()  # zipfile seeks back over each member: in memory, not on disk
        _write_npz(staged, arrays)
        with atomic_file(path) as f:
            f.write(staged.getbuffer())
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Tape:
        """Read and validate a tape; any problem is one clear :class:`UsageError`.

        Nothing in the file is executed or trusted: no pickles, sizes capped before
        anything is expanded, every header field and array checked for its type.

        A process reads each tape once: the last few loaded are kept (their arrays made
        read-only) and given again while the file is unchanged (same size, inode and
        modification time), since checking, planning, recording and reporting a render
        all look at the same tapes.
        """
        path = Path(path)
        if not path.is_file():
            raise UsageError(f"Tape '{path}' does not exist; give the path of a .npz tape.")
        st = path.stat()
        key = (os.path.realpath(path), st.st_ino, st.st_size, st.st_mtime_ns)
        tape = _RECENT.pop(key, None) or cls._read(path)
        _RECENT[key] = tape  # most recent last
        while len(_RECENT) > _RECENT_TAPES:
            _RECENT.popitem(last=False)
        return tape

    @classmethod
    def _read(cls, path: Path) -> Tape:
        try:
            contents = _read_npz(path)
        except _DAMAGED as exc:
            raise UsageError(
                f"Tape '{path}' is corrupt or truncated ({type(exc).__name__}); {_FIX}."
            ) from None
        if "header" not in contents:
            raise UsageError(f"'{path}' is an .npz file but not a rolltape tape (no header).")
        header = _parse_header(contents.pop("header"), path)
        version = header.get("schema_version")
        if version != SCHEMA_VERSION or isinstance(version, bool):
            raise UsageError(
                f"Tape '{path}' has schema version {version!r} but this rolltape reads "
                f"version {SCHEMA_VERSION}; use the rolltape release that wrote it."
            )
        missing = [name for name in _REQUIRED_ARRAYS if name not in contents]
        if missing:
            raise UsageError(f"Tape '{path}' lacks the arrays {missing}; {_FIX}.")
        _check_header(header, path)
        try:
            tape = cls(
                env=header["env"],
                seed=header["seed"],
                options=header.get("options"),
                # Tapes written before the two names were settled say success/success_any.
                success_at_end=header.get("success_at_end", header.get("success")),
                success_once=header.get("success_once", header.get("success_any")),
                metrics=header.get("metrics"),
                policy=header.get("policy", {}),
                wall_s=float(header.get("wall_s", 0.0)),
                meta=header.get("meta", {}),
                reset_rng=header.get("reset_rng"),
                start_step=header.get("start_step", 0),
                window=tuple(header["window"]) if "window" in header else None,
                obs_keys=tuple(header["obs_keys"]) if "obs_keys" in header else None,
                obs_reset=header.get("obs_reset"),
                obs_images=header.get("obs_images"),
                **{name: contents[name] for name in _REQUIRED_ARRAYS},
                **{name: contents[name] for name in _OPTIONAL_ARRAYS if name in contents},
            )
            for value in vars(tape).values():
                if isinstance(value, np.ndarray):
                    value.flags.writeable = False  # shared by every caller that loads it
            return tape
        except UsageError as exc:
            raise UsageError(f"Tape '{path}': {str(exc).rstrip('.')}; {_FIX}.") from None


def _write_npz(f: Any, arrays: dict[str, np.ndarray]) -> None:
    """``np.savez_compressed``'s file (what ``np.load`` and :func:`_read_npz` read), but
    float arrays stored, not deflated: MuJoCo states, actions and rewards barely shrink
    (a 1000-step HalfCheetah tape by 4%, for 20 ms of zlib; a 60-step branch's by a third
    of 30 KB, for 1 ms, most of what saving it cost). Emulator states, flags, digests
    and the header are deflated."""
    with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED, allowZip64=True) as archive:
        for name, array in arrays.items():
            array = np.asanyarray(array)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_NPZ_TIME)
            info.compress_type = (zipfile.ZIP_STORED if array.dtype.kind in "fc"
                                  else zipfile.ZIP_DEFLATED)
            with archive.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, array, allow_pickle=False)


_NPZ_TIME = (1980, 1, 1, 0, 0, 0)  # the members' date, fixed (not the clock's, as numpy stamps)


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    """The tape's arrays, read with zipfile and numpy's .npy header parser only: sizes
    are checked against the caps first, and only plain numeric arrays are read (an
    object array would need pickle)."""
    file_size = path.stat().st_size
    with zipfile.ZipFile(path) as archive:
        members = archive.infolist()
        expanded = sum(info.file_size for info in members)
        if expanded > _MAX_BYTES or (expanded > _FREE_BYTES
                                     and expanded > _MAX_RATIO * file_size):
            raise UsageError(
                f"Tape '{path}' would expand from {file_size:,} to {expanded:,} bytes, more "
                f"than any real tape; refusing to read it ({_FIX})."
            )
        by_name = {info.filename: info for info in members}  # the last one wins, as in numpy
        arrays = {}
        for name in ("header", *_REQUIRED_ARRAYS, *_OPTIONAL_ARRAYS):
            info = by_name.get(f"{name}.npy")
            if info is not None:
                with archive.open(info) as f:
                    assert isinstance(f, zipfile.ZipExtFile)  # what open() reads with
                    arrays[name] = _read_npy(f, info.file_size, path, name)
    return arrays


def _read_npy(f: zipfile.ZipExtFile, size: int, path: Path, name: str) -> np.ndarray:
    """One .npy member of ``size`` bytes; its header must describe exactly those bytes."""
    fmt = np.lib.format
    version = fmt.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = fmt.read_array_header_1_0(f)
    elif version == (2, 0):
        shape, fortran, dtype = fmt.read_array_header_2_0(f)
    else:
        raise ValueError(f"unsupported .npy version {version}")
    if dtype.kind not in "biuf" or dtype.fields is not None:
        raise UsageError(f"Tape '{path}' array {name} holds {dtype}, not plain numbers; {_FIX}.")
    if any(n < 0 for n in shape):
        raise ValueError(f"negative shape {shape}")
    nbytes = math.prod(shape) * dtype.itemsize
    if f.tell() + nbytes != size:
        raise ValueError(f"{name} has shape {shape} but {size} bytes")
    data = bytearray(nbytes)  # writable, as np.load's arrays are
    if f.readinto(data) != nbytes or f.read(1):  # reading to the end checks the CRC
        raise EOFError(f"{name} is short")
    return np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C")


def _parse_header(array: np.ndarray, path: Path) -> dict[str, Any]:
    """The JSON header: an object, finite numbers only, not too big or deep."""
    def finite(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(f"{text} is not a finite number")
        return value

    def refuse(text: str) -> None:
        raise ValueError(f"{text} is not a number")

    header: Any = None
    if array.dtype == np.uint8 and array.ndim == 1 and array.size <= _MAX_HEADER:
        try:
            header = json.loads(array.tobytes().decode(), parse_float=finite,
                                parse_constant=refuse)
        except (UnicodeDecodeError, ValueError, RecursionError):
            pass  # JSONDecodeError and too many digits are ValueErrors
    if not isinstance(header, dict) or _deeper_than(header, _MAX_DEPTH):
        raise UsageError(f"Tape '{path}' has a corrupt header; {_FIX}.")
    return header


def _deeper_than(value: Any, depth: int) -> bool:
    """True when JSON ``value`` nests more than ``depth`` levels (code that walks the
    header recursively, such as json.dumps, must not run out of stack)."""
    if depth < 0:
        return True
    if isinstance(value, dict):
        value = list(value.values())
    return isinstance(value, list) and any(_deeper_than(v, depth - 1) for v in value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _optional(test: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or test(value)


def _is_dict(value: Any) -> bool:
    return isinstance(value, dict)


# Header fields as Tape.header() writes them: (check, what it must be). env and seed are
# required, the others may be absent (then their defaults apply).
_HEADER_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "env": (_is_dict, "an object"),
    "seed": (_optional(lambda v: _is_int(v) and v >= 0), "null or a non-negative integer"),
    "options": (_optional(_is_dict), "null or an object"),
    "success_at_end": (_optional(lambda v: isinstance(v, bool)), "null, true or false"),
    "success_once": (_optional(lambda v: isinstance(v, bool)), "null, true or false"),
    "success": (_optional(lambda v: isinstance(v, bool)), "null, true or false"),  # older
    "success_any": (_optional(lambda v: isinstance(v, bool)), "null, true or false"),
    "metrics": (_optional(_is_dict), "null or an object"),
    "policy": (_is_dict, "an object"),
    "wall_s": (lambda v: _is_number(v) and v >= 0, "a non-negative number"),
    "meta": (_is_dict, "an object"),
    "length": (lambda v: _is_int(v) and v >= 0, "a non-negative integer"),
    "return": (_optional(_is_number), "null or a number"),  # null: NaN or infinite
    "reset_rng": (_optional(lambda v: is_rng_state(v)),
                  "null or a numpy bit-generator state (names and integers)"),
    "start_step": (lambda v: _is_int(v) and v >= 0, "a non-negative integer"),
    "window": (lambda v: isinstance(v, list) and len(v) == 2 and all(_is_int(x) for x in v),
               "a list of two frame indices"),  # their range is checked with the arrays
    "obs_keys": (lambda v: isinstance(v, list) and len(v) <= 256
                 and all(isinstance(x, str) for x in v), "a list of key names"),
    "obs_reset": (lambda v: is_obs_reset(v),
                  "an object of keys, each an object of form names and hex digests"),
    "obs_images": (lambda v: is_obs_images(v),
                   'an object {"keys": [key names], "backend": null or a backend name}'),
}
_ENV_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "id": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "kwargs": (_optional(_is_dict), "null or an object"),
    "max_episode_steps": (_optional(lambda v: _is_int(v) and v > 0),
                          "null or a positive integer"),
    "versions": (_optional(_is_dict), "null or an object"),
}


def is_obs_images(value: Any) -> bool:
    """True for :attr:`Tape.obs_images`'s form: at most 256 key names and a backend name
    (or null) of at most 32 characters."""
    if not isinstance(value, dict) or set(value) != {"keys", "backend"}:
        return False
    keys, backend = value["keys"], value["backend"]
    return (isinstance(keys, list) and len(keys) <= 256 and all(isinstance(k, str) for k in keys)
            and (backend is None or (isinstance(backend, str) and len(backend) <= 32)))


def is_obs_reset(value: Any) -> bool:
    """True for :attr:`Tape.obs_reset`'s form: at most 256 keys, each at most 32 named hex
    digests (strings of at most 32 characters)."""
    return isinstance(value, dict) and len(value) <= 256 and all(
        isinstance(k, str) and isinstance(forms, dict) and len(forms) <= 32 and all(
            isinstance(f, str) and isinstance(d, str) and len(d) <= 32 for f, d in forms.items())
        for k, forms in value.items())


def is_rng_state(value: Any) -> bool:
    """True for a numpy bit-generator state as ``bit_generator.state`` gives it: an object
    with a ``bit_generator`` name and a ``state`` of integers (nested objects of integers,
    strings or lists of integers allowed, shallow). Data only: the name is checked against
    numpy's own bit generators when the state is set, never imported."""
    def plain(v: Any, depth: int) -> bool:
        if _is_int(v) or isinstance(v, str):
            return True
        if isinstance(v, list):
            return len(v) <= 1024 and all(_is_int(x) for x in v)
        return depth > 0 and isinstance(v, dict) and all(
            isinstance(k, str) and plain(x, depth - 1) for k, x in v.items())

    return (isinstance(value, dict) and isinstance(value.get("bit_generator"), str)
            and isinstance(value.get("state"), dict) and plain(value, 3))


def _check_header(header: dict[str, Any], path: Path) -> None:
    """Refuse header fields of the wrong type before anything uses them."""
    def check(name: str, value: Any, rule: tuple[Callable[[Any], bool], str]) -> None:
        ok, must_be = rule
        if not ok(value):
            raise UsageError(f"Tape '{path}' header field {name} must be {must_be}, "
                             f"got {value!r:.60}; {_FIX}.")

    for required in ("env", "seed"):
        if required not in header:
            raise UsageError(f"Tape '{path}' header lacks '{required}'; {_FIX}.")
    for name, rule in _HEADER_FIELDS.items():
        if name in header:
            check(name, header[name], rule)
    env = header["env"]  # an object: checked above
    check("env.id", env.get("id"), _ENV_FIELDS["id"])
    for name, rule in _ENV_FIELDS.items():
        if name in env:
            check(f"env.{name}", env[name], rule)


def _check_shapes(tape: Tape, where: str) -> None:
    """Refuse arrays that disagree in length or type: a replay of them would be wrong."""
    n = tape.rewards.shape[0] if tape.rewards.ndim == 1 else -1
    if n < 0:
        raise UsageError(f"{where} rewards must be one value per step.")
    if tape.rewards.dtype != np.float64:
        raise UsageError(f"{where} rewards must be float64, got {tape.rewards.dtype}.")
    for name in ("terminated", "truncated"):
        arr = getattr(tape, name)
        if arr.dtype != np.bool_ or arr.shape != (n,):
            raise UsageError(f"{where} {name} must be {n} booleans, got {arr.dtype}{arr.shape}.")
    if tape.actions.ndim == 0 or tape.actions.dtype.kind not in "biuf":
        raise UsageError(f"{where} actions must be numbers, one row per step, got "
                         f"{tape.actions.dtype}{tape.actions.shape}.")
    if tape.actions.shape[0] != n:
        raise UsageError(
            f"{where} has {tape.actions.shape[0]} actions but {n} rewards; "
            "the arrays must agree in length."
        )
    starts = tape.chunk_starts
    if starts is not None and (starts.dtype != np.int64 or starts.ndim != 1 or (
            len(starts) and (starts[0] != 0 or np.any(np.diff(starts) < 1)
                             or starts[-1] >= max(n, 1)))):
        raise UsageError(f"{where} chunk_starts must be ascending int64 steps from 0 below "
                         f"{n}, got {starts.dtype}{starts.shape}.")
    for name in ("chunk_index", "chunk_offset"):
        arr = getattr(tape, name)
        if arr is not None and (arr.dtype != np.int32 or arr.shape != (n,) or (
                n and int(arr.min()) < -1)):
            raise UsageError(f"{where} {name} must be {n} int32 values of -1 or more, got "
                             f"{arr.dtype}{arr.shape}.")
    digest = tape.obs_digest
    if digest is not None and (digest.dtype != np.uint64 or digest.shape != (n + 1,)):
        raise UsageError(f"{where} obs_digest must be {n + 1} uint64 digests, got "
                         f"{digest.dtype}{digest.shape}.")
    keyed, keys = tape.obs_key_digest, tape.obs_keys
    if (keyed is None) != (keys is None):
        raise UsageError(f"{where} must have both obs_keys and obs_key_digest, or neither.")
    if keyed is not None and keys is not None and (
            keyed.dtype != np.uint64 or keyed.shape != (n + 1, len(keys))):
        raise UsageError(f"{where} obs_key_digest must be {n + 1} rows of {len(keys)} uint64 "
                         f"digests (one per key), got {keyed.dtype}{keyed.shape}.")
    if tape.obs_reset is not None and not is_obs_reset(tape.obs_reset):
        raise UsageError(f"{where} obs_reset must be an object of keys, each an object of "
                         "form names and hex digests.")
    for name in ("qpos", "qvel", "physics"):
        arr = getattr(tape, name)
        if arr is not None and (arr.dtype != np.float64 or arr.ndim != 2
                                or arr.shape[0] != n + 1):
            raise UsageError(f"{where} {name} must have {n + 1} rows of float64, got "
                             f"{arr.dtype}{arr.shape}.")
    blob, offsets = tape.ale_state, tape.ale_state_offsets
    if (blob is None) != (offsets is None):
        raise UsageError(f"{where} must have both ale_state and ale_state_offsets, or neither.")
    if blob is not None and offsets is not None and not (
            blob.dtype == np.uint8 and blob.ndim == 1 and offsets.dtype == np.int64
            and offsets.shape == (n + 2,) and offsets[0] == 0 and offsets[-1] == blob.shape[0]
            and (np.diff(offsets) > 0).all()):
        raise UsageError(f"{where} ale_state must be uint8 bytes with {n + 2} increasing int64 "
                         "offsets from 0 to its length (one state per frame).")
    if tape.start_step and tape.physics is None:
        raise UsageError(f"{where} begins at step {tape.start_step} of its episode but has no "
                         "physics state to begin from.")
    if tape.window is not None and not (len(tape.window) == 2
                                        and 0 <= tape.window[0] <= tape.window[1] <= n):
        raise UsageError(f"{where} window must be two frame indices 0 <= first <= last <= {n}, "
                         f"got {tape.window!r:.60}.")
    if tape.reset_rng is not None and not is_rng_state(tape.reset_rng):
        raise UsageError(f"{where} reset_rng must be a numpy bit-generator state.")
    if n and (tape.terminated[:-1].any() or tape.truncated[:-1].any()):
        raise UsageError(f"{where} ends before its last step; only the last step may be done.")


def sum_rewards(rewards: list[float]) -> float:
    """The exact sum of an episode's rewards (math.fsum), also when an env misbehaves: NaN
    when a reward is NaN (None reads as NaN) or infinities of both signs meet, and the
    signed infinity when a reward is infinite or the sum overflows a float."""
    values = [math.nan if r is None else float(r) for r in rewards]
    try:
        return math.fsum(values)
    except ValueError:  # inf + -inf
        return math.nan
    except OverflowError:  # finite rewards whose running sum exceeds a float
        exact = sum(Fraction(v) for v in values)  # rare: exact, then rounded once
        try:
            return float(exact)
        except OverflowError:
            return math.inf if exact > 0 else -math.inf


def finite_or_none(value: float) -> float | None:
    """``value`` when it is finite, else None: JSON has no NaN or infinity."""
    return value if math.isfinite(value) else None


def json_safe(value: Any) -> Any:
    """Turn numpy scalars/arrays and non-finite floats into plain JSON (NaN becomes None)."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return json_safe(value.tolist())
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer, int)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return finite_or_none(float(value))
    if value is None or isinstance(value, str):
        return value
    return str(value)
