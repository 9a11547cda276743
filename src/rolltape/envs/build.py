"""Building the env a spec describes, and refusing in one sentence one that cannot be built.

Pass 1 builds a spec (:func:`rolltape.envs.ids.env_spec`) with ``render_mode=None``; pass 2
builds the same spec with ``render_mode="rgb_array"``. A video of an env that cannot draw
rgb_array frames, a size for one that draws at its own, or kwargs it refuses are refused
before any episode. MuJoCo's warnings are kept (:func:`mujoco_warnings`) instead of printed.
Gymnasium and MuJoCo are imported lazily so the orchestrator stays light.

May import: errors, envs.ids, gymnasium and mujoco lazily. Never: policies, pass 1, pass 2,
executors, outputs.

Example:
    >>> from rolltape.envs.ids import env_spec
    >>> env = make_env(env_spec("HalfCheetah-v5", {"forward_reward_weight": 1.0}))
    >>> env.reset(seed=0)[0].shape
    (17,)
    >>> env.close()
"""

from __future__ import annotations

import inspect
from typing import Any

from rolltape.envs.ids import (
    decode_kwargs,
    import_env_module,
    is_atari,
    load_user_env,
    register_atari,
    user_env_file,
)
from rolltape.errors import UsageError


def make_env(
    spec: dict[str, Any],
    render_mode: str | None = None,
    width: int | None = None,
    height: int | None = None,
) -> Any:
    """Build the env a spec describes; rendering options only apply when rendering."""
    import gymnasium as gym

    if may_load_mujoco(spec["id"]):  # importing MuJoCo costs ~0.35 s that others never use
        _collect_mujoco_warnings()
    gym_id = load_user_env(spec["id"])
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
    gym_id = load_user_env(spec["id"])
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
    if not _accepts(gym_id or load_user_env(env_id), "width"):
        raise UsageError(f"Env '{env_id}' draws its frames at its own size and ignores "
                         "--width/--height; drop them.")


_MUJOCO_WARNINGS: list[str] = []
# Gymnasium's own families that never load a MuJoCo model (ALE's games are told by their id).
_NO_MUJOCO = ("gymnasium.envs.classic_control", "gymnasium.envs.box2d", "gymnasium.envs.toy_text")


def may_load_mujoco(env_id: str) -> bool:
    """False for an env known not to use MuJoCo (an Atari game, Gymnasium's classic
    control, Box2D and toy text); True for any other, a user's module or file included.

    >>> [may_load_mujoco(i) for i in ("CartPole-v1", "ALE/Pong-v5", "Hopper-v5")]
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
