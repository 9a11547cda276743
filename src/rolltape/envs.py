"""Building envs from a spec, and reading what a replay must reproduce from them.

An env spec is a small JSON-safe dict: ``{"id", "kwargs", "max_episode_steps", "versions"}``.
Pass 1 builds it with ``render_mode=None``; pass 2 builds the same spec with
``render_mode="rgb_array"``. Gymnasium is imported lazily so the orchestrator stays light.

May import: errors, gymnasium and mujoco lazily. Never: policies, pass 1, pass 2, executors,
outputs.

Example:
    >>> spec = env_spec("HalfCheetah-v5", {"forward_reward_weight": 1.0})
    >>> env = make_env(spec)
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rolltape.errors import UsageError
from rolltape.tape import finite_or_none


def env_spec(
    env_id: str, kwargs: dict[str, Any] | None = None, max_episode_steps: int | None = None
) -> dict[str, Any]:
    """Check that ``env_id`` is registered and return the spec a tape stores.

    Besides registered ids, ``module:EnvId`` (the module registers the env; a module in
    the current folder counts) and ``path/file.py:ATTR`` (a class or factory in that file,
    executed in the pass-1 worker) name the user's own envs; their spec records the file
    they came from, for provenance and for the hint a render of the tape gives.
    ``tcp://HOST:PORT/ENV_ID`` is ENV_ID served by ``rolltape serve``: the local spec plus
    ``served`` (address, token file, reply timeout); pass 1 steps it there."""
    import gymnasium as gym

    if env_id.startswith("tcp://"):  # an env of `rolltape serve`: the local spec + its server
        from rolltape.address import parse_served, served_fields

        address, local_id = parse_served(env_id)
        try:
            local = env_spec(local_id, kwargs, max_episode_steps)
        except UsageError:
            if "/" not in local_id:
                raise
            suite, _, task = local_id.partition("/")  # not an id here: a suite server's task?
            raise UsageError(f"'{local_id}' is not an env id here; a task of `rolltape serve "
                             f"--suite` is evaluated with --suite MANIFEST --tasks {task} "
                             f"--served {address} (the manifest of suite '{suite}').") from None
        return {**local, "served": served_fields(address)}
    source = None
    file = user_env_file(env_id)
    if file is not None:
        if not file[0].is_file():
            raise UsageError(f"Env file '{file[0]}' does not exist; give FILE.py:CLASS with the "
                             "path of a Python file.")
        name, source = None, str(file[0].resolve())
    elif ":" in env_id:  # "module:EnvId", as gym.make accepts: the module registers the env
        module, _, name = env_id.partition(":")
        # The user named it, so the current folder counts even when `rolltape` (a console
        # script) does not have it on sys.path; pass-1 workers do.
        sys.path.insert(0, os.getcwd())
        try:
            imported = import_env_module(module, name)
        except ImportError as exc:
            raise UsageError(f"Cannot import '{module}' for env '{env_id}' ({exc}); run "
                             "from the folder that holds it.") from None
        finally:
            sys.path.remove(os.getcwd())
        source = getattr(imported, "__file__", None)
        if name not in gym.registry and callable(getattr(imported, name, None)):
            name = None  # "module:factory": a class or factory of that module
    else:
        name = env_id
        register_atari(name)
    if name is not None and name not in gym.registry:
        close = difflib.get_close_matches(name, list(gym.registry), n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(close)}?" if close else "see `gymnasium.pprint_registry()`."
        raise UsageError(f"Unknown env id '{env_id}'; {hint}")
    spec = {
        "id": env_id,
        "kwargs": encode_kwargs(dict(kwargs or {})),
        "max_episode_steps": max_episode_steps,
        # Read from package metadata: importing mujoco here would fix its GL backend.
        "versions": {"gymnasium": gym.__version__, "mujoco": package_version("mujoco")},
    }
    if source is not None:
        spec["source"] = source  # a record only: a render imports what its user names
    return spec


def user_env_file(env_id: str) -> tuple[Path, str] | None:
    """(file, ATTR) for an env id of the form ``path/file.py:ATTR``, else None."""
    target, sep, attr = env_id.rpartition(":")
    return (Path(target), attr) if sep and target.endswith(".py") and attr else None


def _load_user_env(env_id: str) -> str:
    """Import what ``env_id`` needs and return the id to give ``gym.make``: a file's class
    or factory is registered under ``rolltape-file/ATTR`` (unless the file registers an
    id named ATTR itself)."""
    import gymnasium as gym

    file = user_env_file(env_id)
    if file is None:
        return _module_factory(env_id)
    path, attr = file
    if not path.is_file():
        raise UsageError(f"Env file '{path}' does not exist; name it with --env "
                         "FILE.py:CLASS from the folder that holds it.")
    name = f"rolltape_env_{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]}"
    module = sys.modules.get(name)
    if module is None:  # executed once per process: registering twice would warn
        loader_spec = importlib.util.spec_from_file_location(name, path)
        assert loader_spec is not None and loader_spec.loader is not None
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[name] = module
        try:
            loader_spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    if attr in gym.registry:
        return attr
    creator = getattr(module, attr, None)
    if not callable(creator):
        raise UsageError(f"'{path}' has no class or factory '{attr}' (nor does it register "
                         f"an env id '{attr}').")
    gym_id = f"rolltape-file/{attr}"
    if gym_id not in gym.registry or gym.registry[gym_id].entry_point is not creator:
        gym.register(id=gym_id, entry_point=creator)
    return gym_id


def is_atari(env_id: str) -> bool:
    """An id of ale-py's Atari games (``ALE/Pong-v5``, ``PongNoFrameskip-v4``)."""
    return env_id.startswith("ALE/") or "NoFrameskip" in env_id or \
        env_id.endswith("Deterministic-v4")


def register_atari(env_id: str) -> None:
    """Register ale-py's games when ``env_id`` is one of them and not yet known (Gymnasium 1
    loads no plugins by itself); one sentence naming the extra when ale-py is missing."""
    import gymnasium as gym

    if env_id in gym.registry or not is_atari(env_id):
        return
    try:
        import ale_py
    except ImportError:
        raise UsageError(f"Env '{env_id}' is an Atari game; install ale-py with `pip install "
                         "'rolltape[atari]'` (its wheel ships the ROMs).") from None
    gym.register_envs(ale_py)


def _module_factory(env_id: str) -> str:
    """The id to give ``gym.make`` for ``module:EnvId`` (itself: gym.make imports the
    module, which registers the env) or ``module:factory`` (a class or function of an
    importable module, registered here under ``rolltape-module/module.factory``)."""
    import gymnasium as gym

    module, colon, attr = env_id.partition(":")
    if not colon or attr in gym.registry:
        return env_id
    creator = getattr(import_env_module(module, attr), attr, None)
    if attr in gym.registry or not callable(creator):  # the import registered it after all
        return env_id
    gym_id = f"rolltape-module/{module}.{attr}"
    if gym_id not in gym.registry or gym.registry[gym_id].entry_point is not creator:
        gym.register(id=gym_id, entry_point=creator)
    return gym_id


_TUPLE = "__tuple__"  # JSON has no tuples: (0.5, 2.0) is stored as {"__tuple__": [0.5, 2.0]}


def encode_kwargs(value: Any) -> Any:
    """Env kwargs as a tape's JSON can hold them, tuples kept apart from lists, so that
    pass 2 (and a resumed run) builds the env with exactly the values pass 1 used."""
    if isinstance(value, tuple):
        return {_TUPLE: [encode_kwargs(v) for v in value]}
    if isinstance(value, list):
        return [encode_kwargs(v) for v in value]
    if isinstance(value, dict):
        return {k: encode_kwargs(v) for k, v in value.items()}
    return value


def decode_kwargs(value: Any) -> Any:
    """The inverse of :func:`encode_kwargs`."""
    if isinstance(value, dict):
        if set(value) == {_TUPLE}:
            return tuple(decode_kwargs(v) for v in value[_TUPLE])
        return {k: decode_kwargs(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode_kwargs(v) for v in value]
    return value


def check_tape_env_module(env_id: str, tape: str) -> None:
    """Refuse a tape whose env id names code that is not a package of Gymnasium envs: a
    file ("path/file.py:ATTR", which pass 1 executes), or a module ("module:EnvId", which
    ``gym.make`` imports) that is not :func:`env_package`. ``antigravity:X-v0`` would open
    a browser, ``evilmod:X-v0`` import a file put beside the tape. A tape is data; the user
    may name such code with ``--env`` (or ``--trust-module``). Finds the module without
    importing it."""
    if ":" not in env_id:
        return
    module = env_id.partition(":")[0]
    if user_env_file(env_id) is None and all(p.isidentifier() for p in module.split(".")) \
            and env_package(module.partition(".")[0]):
        return
    top = module.partition(".")[0]
    trust = f" (or --trust-module {top})" if top.isidentifier() else ""
    raise UsageError(
        f"Tape '{tape}' names the env code '{module[:100]}', which is not an installed package "
        f"of Gymnasium envs, and a tape may not run code; if you trust it, name it yourself "
        f"with --env {env_id[:200]}{trust}."
    )


def trusted_env_id(env_id: str, trusted: Sequence[str] | None) -> str | None:
    """``env_id`` when its module's top-level name is one the user trusts
    (``--trust-module``), so that a tape naming it may be replayed on it; else None.

    >>> trusted_env_id("mine.envs:Toy-v0", ["mine"]), trusted_env_id("mine.envs:Toy-v0", [])
    ('mine.envs:Toy-v0', None)
    """
    module = env_id.partition(":")[0] if ":" in env_id else ""
    return env_id if module and trusted and module.partition(".")[0] in trusted else None


@functools.lru_cache(maxsize=None)
def env_package(top: str) -> bool:
    """True when ``top`` is an installed (not current-folder) package that exists to
    provide Gymnasium envs, judged from installed metadata, never by importing it:
    Gymnasium itself; a module named in the ``gymnasium.envs`` entry points (Gymnasium
    0.26-0.29 imported those plugins itself; 1.x reads none); or the top-level module of a
    distribution that requires ``gymnasium`` (gymnasium-robotics, gym-pusht, ale-py...).
    The standard library's ``antigravity`` or an unrelated library is none of these."""
    from importlib.machinery import PathFinder
    from importlib.metadata import (
        PackageNotFoundError,
        entry_points,
        packages_distributions,
        requires,
    )

    here = os.path.realpath(os.getcwd())
    path = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    if PathFinder.find_spec(top, path) is None:
        return False  # not installed: a file in the current folder, or nothing
    if top == "gymnasium" or any(ep.module.partition(".")[0] == top
                                 for ep in entry_points(group="gymnasium.envs")):
        return True
    if top in getattr(sys, "stdlib_module_names", ()):
        return False
    try:  # the distribution is nearly always named as its module (gym_pusht: gym-pusht)
        needs = requires(top) or []
    except PackageNotFoundError:  # else look it up among all (slower: every RECORD is read)
        needs = [r for d in packages_distributions().get(top, []) for r in requires(d) or []]
    for line in needs:
        name, _, marker = line.partition(";")
        if "extra" not in marker and _requirement_name(name) == "gymnasium":
            return True
    return False


def _requirement_name(requirement: str) -> str:
    """'gymnasium' of 'Gymnasium[mujoco] (>=1.0)' (PEP 503: case and -_. folded)."""
    import re

    name = re.split(r"[\s\[(<>=!~;@]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def package_version(name: str) -> str | None:
    """Installed version of a distribution, without importing it (None when absent)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def make_env(
    spec: dict[str, Any],
    render_mode: str | None = None,
    width: int | None = None,
    height: int | None = None,
) -> Any:
    """Build the env a spec describes; rendering options only apply when rendering."""
    import gymnasium as gym

    if _may_load_mujoco(spec["id"]):  # importing MuJoCo costs ~0.35 s that others never use
        _collect_mujoco_warnings()
    gym_id = _load_user_env(spec["id"])
    if ":" in gym_id:
        import_env_module(*gym_id.split(":", 1))
    else:
        register_atari(gym_id)
    kwargs = decode_kwargs(dict(spec.get("kwargs") or {}))
    if spec.get("max_episode_steps") is not None:
        kwargs["max_episode_steps"] = int(spec["max_episode_steps"])
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
        if render_mode == "rgb_array":
            if render_mode not in _declared_render_modes(gym_id):
                raise UsageError(
                    f"Env '{spec['id']}' cannot render 'rgb_array' frames, so it cannot make "
                    "a video; drop --video or choose an env that renders rgb_array."
                )
            sizing = {k: v for k, v in {"width": width, "height": height}.items() if v is not None}
            if sizing:
                check_sizing(spec["id"], gym_id)
                kwargs.update(sizing)
    try:
        return gym.make(gym_id, **kwargs)
    except TypeError as exc:
        if render_mode is not None and "render_mode" in str(exc):
            raise UsageError(no_render_mode(spec["id"])) from None
        raise UsageError(build_refusal(spec, exc)) from None


def no_render_mode(env_id: str) -> str:
    """The sentence for an env (a user's factory, mostly) that does not take render_mode."""
    return (f"Env '{env_id}' does not accept a render_mode argument, so its frames cannot be "
            "drawn for a video; give its factory a `render_mode=None` parameter passed on to "
            "the env it builds (see the README's 'Your own env'), or drop --video.")


def build_refusal(spec: dict[str, Any], exc: BaseException) -> str:
    """One sentence for an env that its spec cannot build (``exc`` is what building it
    raised), naming the kwargs it was given, or saying it was given none."""
    kwargs = decode_kwargs(dict(spec.get("kwargs") or {}))
    text = (str(exc).strip().splitlines() or [""])[0][:300]
    why = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    if kwargs:
        return (f"Env '{spec['id']}' cannot be built with kwargs {kwargs} ({why}); fix them "
                "(--env-kwargs, a suite task's kwargs or a zoo folder's env_kwargs.yml).")
    return (f"Env '{spec['id']}' cannot be built ({why}); check that the env builds with "
            "gymnasium.make on its own.")


def check_render_mode(spec: dict[str, Any]) -> None:
    """Refuse, before any episode, a video of a user's own env (``FILE.py:ATTR`` or
    ``module:factory``) whose class or factory takes no render_mode: pass 2 builds it with
    ``render_mode='rgb_array'`` and would find out only after pass 1."""
    if user_env_file(spec["id"]) is None and ":" not in spec["id"]:
        return  # a registered env: Gymnasium's API has every env take render_mode
    gym_id = _load_user_env(spec["id"])
    if gym_id.startswith(("rolltape-file/", "rolltape-module/")) and \
            not _accepts(gym_id, "render_mode"):
        raise UsageError(no_render_mode(spec["id"]))


def build_problem(specs: list[dict[str, Any]]) -> str | None:
    """Build (and close) each env of ``specs`` once; the sentence for the first that cannot
    be built, else None. Run in a fresh interpreter before a suite's pass 1
    (:func:`rolltape.config.BuildCheck`), where importing a simulator costs nothing here."""
    for spec in specs:
        try:
            make_env(spec).close()
        except UsageError as exc:
            return str(exc)
        except Exception as exc:
            return build_refusal(spec, exc)
    return None


def check_sizing(env_id: str, gym_id: str | None = None) -> None:
    """Refuse --width/--height for an env that draws at its own size (they would be ignored)."""
    if not _accepts(gym_id or _load_user_env(env_id), "width"):
        raise UsageError(f"Env '{env_id}' draws its frames at its own size and ignores "
                         "--width/--height; drop them.")


_MUJOCO_WARNINGS: list[str] = []
# Gymnasium's own families that never load a MuJoCo model (ALE's games are told by their id).
_NO_MUJOCO = ("gymnasium.envs.classic_control", "gymnasium.envs.box2d", "gymnasium.envs.toy_text")


def _may_load_mujoco(env_id: str) -> bool:
    """False for an env known not to use MuJoCo (an Atari game, Gymnasium's classic
    control, Box2D and toy text); True for any other, a user's module or file included.

    >>> [_may_load_mujoco(i) for i in ("CartPole-v1", "ALE/Pong-v5", "Hopper-v5")]
    [False, False, True]
    """
    import gymnasium as gym

    if is_atari(env_id):
        return False
    spec = gym.registry.get(env_id)
    entry = spec.entry_point if spec is not None else None
    return not (isinstance(entry, str) and entry.startswith(_NO_MUJOCO))


def _collect_mujoco_warnings() -> None:
    """Keep MuJoCo's warnings (e.g. deprecated XML attributes) instead of letting it print
    them and write MUJOCO_LOG.TXT into the user's folder; :func:`mujoco_warnings` returns them."""
    import mujoco

    if mujoco.get_mju_user_warning() is None:
        def keep(message: str) -> None:
            if message not in _MUJOCO_WARNINGS:
                _MUJOCO_WARNINGS.append(message)

        mujoco.set_mju_user_warning(keep)


def mujoco_warnings() -> list[str]:
    """MuJoCo warnings raised in this process so far (each once)."""
    return list(_MUJOCO_WARNINGS)


def forget_mujoco_warnings() -> None:
    """Start a new list: a reused worker (Ray's) reports each task's own warnings."""
    _MUJOCO_WARNINGS.clear()


def _env_creator(env_id: str) -> Any:
    """The class (or function) registered for an env id ("module:EnvId" ids included)."""
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    entry = gym.spec(env_id.rpartition(":")[2]).entry_point
    return load_env_creator(entry) if isinstance(entry, str) else entry


def _declared_render_modes(env_id: str) -> list[str]:
    creator = _env_creator(env_id)
    if not hasattr(creator, "metadata"):  # a factory function: only building it would tell
        return ["rgb_array"]
    return list(getattr(creator, "metadata", {}).get("render_modes", []))


def _accepts(env_id: str, name: str) -> bool:
    """True when the env's constructor takes ``name`` (MuJoCo envs take width/height)."""
    creator = _env_creator(env_id)
    try:
        params = inspect.signature(creator).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is p.VAR_KEYWORD for p in params)


def import_env_module(module: str, env_name: str) -> Any:
    """Import the module that registers ``module:env_name``. Gymnasium-Robotics prints a
    notice about its Dense Adroit envs at import, in every process (the orchestrator, each
    worker); it is kept for the envs it concerns (AdroitHandDoor-v1, ...) and left out for
    the others (a maze suite printed it 4 times)."""
    if module == "gymnasium_robotics" and "gymnasium_robotics" not in sys.modules:
        try:
            from farama_notifications import notifications  # type: ignore[import-untyped]
        except ImportError:
            notifications = {}
        notes = notifications.get("gymnasium_robotics")
        # It names the Dense variants, whose rewards AdroitHandDoor-v1 (etc.) now are.
        names = (env_name, env_name.replace("-v", "Dense-v"))
        if isinstance(notes, dict) and not any(
                name in str(text) for text in notes.values() for name in names):
            notifications.pop("gymnasium_robotics", None)
    return importlib.import_module(module)


def mujoco_data(env: Any) -> Any | None:
    """The ``mujoco.MjData`` behind a Gymnasium MuJoCo env, or None for other envs."""
    data = getattr(env.unwrapped, "data", None)
    return data if data is not None and hasattr(data, "qpos") else None


@functools.cache  # called per step by the server and per frame by replays
def physics_spec() -> int:
    """The parts of MuJoCo's state a tape keeps per frame: time, qpos, qvel, act (plus
    plugin/history state), the solver's warm start, and mocap/equality state. With the
    action of the next step (which sets ctrl) that continues the simulation bit for bit.
    Applied forces (xfrc/qfrc_applied) are left out: Gymnasium envs never set them, and
    they are most of the size; a replay that needed them is caught by verification."""
    import mujoco

    S = mujoco.mjtState
    return int(S.mjSTATE_FULLPHYSICS | S.mjSTATE_WARMSTART | S.mjSTATE_MOCAP_POS
               | S.mjSTATE_MOCAP_QUAT | S.mjSTATE_EQ_ACTIVE)


class PhysicsLog:
    """Records a MuJoCo env's state (:func:`physics_spec`) once per frame into a
    preallocated buffer; qpos/qvel for drawing come out of it for free."""

    def __init__(self, env: Any, expected_frames: int = 1001) -> None:
        import mujoco

        self._get = mujoco.mj_getState
        self._model, self._data = env.unwrapped.model, env.unwrapped.data
        self._spec = physics_spec()
        size = mujoco.mj_stateSize(self._model, self._spec)
        # Layout: [time, qpos, qvel, act, ...] (the mjtState bit order).
        self._nq, self._nv = self._model.nq, self._model.nv
        self._buf = np.empty((max(2, expected_frames), size))
        self._rows = list(self._buf)  # row views made once, not one per step
        self.frames = 0

    @classmethod
    def for_env(cls, env: Any) -> Any:
        """A log for a MuJoCo env (a served env brings its own: states come in its replies)."""
        if hasattr(env, "physics_log"):
            return env.physics_log()
        if mujoco_data(env) is None:
            return None
        limit = getattr(env.spec, "max_episode_steps", None) if env.spec else None
        return cls(env, (limit or 1000) + 1)

    def record(self) -> None:
        if self.frames == len(self._rows):
            self._buf = np.concatenate([self._buf, np.empty_like(self._buf)])
            self._rows = list(self._buf)
        self._get(self._model, self._data, self._rows[self.frames], self._spec)
        self.frames += 1

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(physics, qpos, qvel), one row per recorded frame."""
        return split_physics(self._buf[:self.frames].copy(), self._nq, self._nv)


ALE_STATE_CAP = 64 * 1024**2  # bytes of emulator states one tape keeps (~4,500 frames)


class AleLog:
    """Records an Atari (ale-py) env's emulator state, RNG included, once per frame, as
    ALE serializes it (``cloneState(include_rng=True)``); ``restore`` draws from them. Past
    :data:`ALE_STATE_CAP` bytes it keeps none (the tape then replays by re-simulation only)."""

    def __init__(self, ale: Any) -> None:
        self._ale = ale
        self._states: list[bytes] = []
        self._bytes = 0
        self.dropped = False

    @classmethod
    def for_env(cls, env: Any) -> AleLog | None:
        ale = getattr(getattr(env, "unwrapped", None), "ale", None)
        return cls(ale) if ale is not None and hasattr(ale, "cloneState") else None

    def record(self) -> None:
        if not self.dropped:
            self.add(self._ale.cloneState(include_rng=True).serialize())

    def add(self, state: bytes) -> None:
        """Keep one serialized state that another process cloned (a served or vector
        sub-env's: :func:`ale_state`), under the same cap."""
        if self.dropped:
            return
        self._bytes += len(state)
        if self._bytes > ALE_STATE_CAP:
            self.dropped, self._states = True, []
            return
        self._states.append(state)

    def arrays(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(every state's bytes end to end as uint8, offsets: state t is [o[t], o[t+1]))."""
        if self.dropped or not self._states:
            return None, None
        offsets = np.zeros(len(self._states) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in self._states], out=offsets[1:])
        return np.frombuffer(b"".join(self._states), dtype=np.uint8).copy(), offsets


def ale_state(env: Any) -> bytes | None:
    """An Atari game's emulator state, its RNG included, serialized as :class:`AleLog`
    stores it; None for any other env. A served session and a vector sub-env send it with
    each reset and step, so their tapes hold the states a local game's do."""
    ale = getattr(getattr(env, "unwrapped", None), "ale", None)
    if ale is None or not hasattr(ale, "cloneState"):
        return None
    return bytes(ale.cloneState(include_rng=True).serialize())


def restore_ale_state(env: Any, blob: bytes) -> None:
    """Put an Atari env into a recorded emulator state (its screen is drawn by the next step)."""
    import ale_py

    try:
        env.unwrapped.ale.restoreState(ale_py.ALEState(blob))
    except Exception as exc:  # ALE's deserializer refuses a damaged state
        raise UsageError(f"A recorded ALE state could not be restored ({type(exc).__name__}); "
                         "re-record the tape with `rolltape eval`.") from None


# Steps taken again before a recorded Atari state is continued from: ALE's saved state does
# not hold the last action it applied, which sticky actions repeat (ALE/*-v5: p = 0.25 a
# frame). After a step that register holds the step's own action unless all of its frames
# stuck (4 frames: p = 0.4%), so each step taken again makes a wrong register 250x less likely.
ALE_STEPS_AGAIN = 4


def continue_atari(env: Any, tape: Any, t: int, again: int = ALE_STEPS_AGAIN) -> None:
    """Put an Atari env into ``tape``'s recorded emulator state after ``t`` steps, having
    first taken the ``again`` steps before it from their own states (a replay's segment, a
    branch of :mod:`rolltape.pass1.branches`)."""
    for s in range(max(0, t - again), t):
        restore_ale_state(env, tape.ale_state_at(s))
        env.step(tape.actions[s])
    restore_ale_state(env, tape.ale_state_at(t))


def split_physics(physics: np.ndarray, nq: int, nv: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(physics, qpos, qvel) from state rows laid out as [time, qpos, qvel, ...]."""
    return physics, physics[:, 1:1 + nq].copy(), physics[:, 1 + nq:1 + nq + nv].copy()


def continue_from(env: Any, physics: np.ndarray) -> None:
    """Put a MuJoCo env back into a recorded integration state, so stepping goes on exactly
    as it went in pass 1 (used to render segments of one episode in parallel)."""
    import mujoco

    base = env.unwrapped
    mujoco.mj_setState(base.model, base.data, physics, physics_spec())
    # An env whose steps assume more than the state (dm_control's step begins with the
    # second half of MuJoCo's, mj_step1's results taken as computed) brings them up to date.
    settle = getattr(base, "after_set_state", None)
    if callable(settle):
        settle()


_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")


def rng_state(env: Any) -> dict[str, Any]:
    """The env's ``np_random`` bit-generator state, JSON-safe (what a reset draws from)."""
    return json_safe(env.unwrapped.np_random.bit_generator.state)


def set_rng_state(env: Any, state: dict[str, Any]) -> None:
    """Give the env a generator in a recorded state (:func:`rng_state`), so that an
    unseeded ``reset`` draws exactly what it drew when the state was recorded."""
    name = state.get("bit_generator")
    if name not in _BIT_GENERATORS:
        raise UsageError(f"The tape's reset_rng names the bit generator {name!r:.40}, which "
                         f"is not one of numpy's ({', '.join(_BIT_GENERATORS)}).")
    generator = np.random.Generator(getattr(np.random, name)())
    try:
        generator.bit_generator.state = state
    except (TypeError, ValueError, KeyError, OverflowError) as exc:
        raise UsageError(f"The tape's reset_rng is not a valid {name} state ({exc}).") from None
    env.unwrapped.np_random = generator


def set_elapsed_steps(env: Any, steps: int) -> None:
    """Tell the env's TimeLimit that ``steps`` steps have passed (a replay that begins
    mid-episode must truncate where the recorded episode did)."""
    from gymnasium.wrappers import TimeLimit

    while env is not None:
        if isinstance(env, TimeLimit):
            env._elapsed_steps = steps  # type: ignore[assignment]  # gymnasium types it None
            return
        env = getattr(env, "env", None)


def restore_state(env: Any, qpos: np.ndarray, qvel: np.ndarray) -> None:
    """Put a MuJoCo env into a recorded state so it can be drawn (``restore`` mode)."""
    import mujoco

    base = env.unwrapped
    base.data.qpos[:] = qpos
    base.data.qvel[:] = qvel
    mujoco.mj_forward(base.model, base.data)


_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


#: Array observations of more bytes than this (screens) are digested in batches of
#: :data:`DIGEST_BATCH` as they come, in pass 1 and in replay, not all at the episode's end.
BIG_OBS = 16384
#: A digest pass is a numpy call per 8 bytes of an observation, each across every row, so
#: it costs about as much for 1 row as for 256: Atari screens 0.19 ms each in batches of 64,
#: 0.07 ms in batches of 256 (digests were a fifth of a PPO CnnPolicy's Atari pass 1), for
#: 25 MB of screens held at most.
DIGEST_BATCH = 256


def obs_digests(rows: np.ndarray) -> np.ndarray:
    """64-bit digests of many same-shaped array observations at once (one per row).

    FNV-1a over the 64-bit words of each row's exact bytes, vectorised across rows: each
    step (xor, then multiply by an odd prime) is a bijection, so two observations that
    differ in a single word always get different digests. Cheap enough to keep pass 1 as
    fast as a bare loop.
    """
    rows = np.ascontiguousarray(rows)
    flat = rows.reshape(rows.shape[0], -1).view(np.uint8)
    pad = (-flat.shape[1]) % 8
    if pad:
        flat = np.concatenate([flat, np.zeros((flat.shape[0], pad), np.uint8)], axis=1)
    words = flat.view("<u8")
    h = np.full(words.shape[0], _FNV_OFFSET, dtype=np.uint64)
    xor, multiply = np.bitwise_xor, np.multiply
    with np.errstate(over="ignore"):
        for j in range(words.shape[1]):  # in place: no new arrays per word (~12% faster)
            xor(h, words[:, j], out=h)
            multiply(h, _FNV_PRIME, out=h)
        h ^= h >> np.uint64(29)  # final mix so that low bits depend on every word
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(32)
    return h


def flat_items(obs: dict[Any, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """A dict observation's leaves by sorted key, a nested dict's named ``outer/inner`` (as
    LeRobot names gym-aloha's ``pixels/top``): a dict's own bytes are not its contents.

    >>> [k for k, _ in flat_items({"pixels": {"top": 1, "angle": 2}, "agent_pos": 3})]
    ['agent_pos', 'pixels/angle', 'pixels/top']
    """
    items: list[tuple[str, Any]] = []
    for key in sorted(obs):
        if isinstance(obs[key], dict):
            items.extend(flat_items(obs[key], f"{prefix}{key}/"))
        else:
            items.append((f"{prefix}{key}", obs[key]))
    return items


def array_digest(value: Any) -> int:
    """64-bit blake2b of an array's dtype, shape and bytes: a key's digest (the tape's
    ``obs_key_digest``), and the digest of the flipped, transposed or reordered forms of a
    reset observation."""
    arr = np.ascontiguousarray(value)
    h = hashlib.blake2b(digest_size=8)
    h.update(f"{arr.dtype.str}{arr.shape}".encode())
    h.update(arr.tobytes())
    return int.from_bytes(h.digest(), "little")


def obs_digest(obs: Any) -> int:
    """The digest of one observation: :func:`obs_digests` for arrays, blake2b of the sorted
    keys' bytes for dict observations (a nested dict's leaves, :func:`flat_items`)."""
    if isinstance(obs, dict):
        h = hashlib.blake2b(digest_size=8)
        for key, value in flat_items(obs):
            h.update(key.encode())
            h.update(np.ascontiguousarray(value).tobytes())
        return int.from_bytes(h.digest(), "little")
    return int(obs_digests(np.asarray(obs)[None])[0])


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
