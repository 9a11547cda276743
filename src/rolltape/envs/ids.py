"""What an env id names, the spec a tape keeps of it, and whether a tape's id may run code.

An env id is a Gymnasium id (``HalfCheetah-v5``; an Atari game's ``ALE/Pong-v5`` registers
ale-py's games), ``module:EnvId`` (the module registers the env) or ``module:factory``,
``path/file.py:ATTR`` (a class or factory in that file) or ``tcp://HOST:PORT/ENV_ID`` (an
env of ``rolltape serve``). An env spec is a small JSON-safe dict: ``{"id", "kwargs",
"max_episode_steps", "versions"}``. A tape is data: the code its id names is imported only
when it is an installed package of Gymnasium envs (judged from metadata, never by importing
it) or one the user trusts. Building the env a spec describes is :mod:`rolltape.envs.build`.

May import: errors, address, gymnasium lazily. Never: mujoco (importing it fixes its GL
backend: versions are read from metadata), policies, pass 1, pass 2, executors, outputs.

Example:
    >>> spec = env_spec("HalfCheetah-v5", {"forward_reward_weight": 1.0})
    >>> spec["id"], spec["kwargs"], spec["max_episode_steps"]
    ('HalfCheetah-v5', {'forward_reward_weight': 1.0}, None)
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from rolltape.errors import UsageError


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


def load_user_env(env_id: str) -> str:
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
