"""The vector envs batched pass 1 (:mod:`rolltape.pass1.batched`) steps: sub-env processes
here (Gymnasium's ``AsyncVectorEnv``, autoreset off), or vector sessions of a
``rolltape serve --num-envs N`` server (one request and one reply per step for N sub-envs).

Both answer ``reset(seeds, mask)`` and ``step(actions)`` with the stacked observations of
every sub-env (a reset keeps the rows it did not reset, as ``AsyncVectorEnv`` does) and, per
sub-env, the :class:`Facts` a tape keeps that the batched loop cannot read from the
observation: the MuJoCo state row (an Atari game's emulator state), ``info``'s success and
metrics, and the error of a sub-env that raised (a served sub-env fails alone; the server
rebuilds it).

With policy-side wrappers (``--wrapper``, ``--frame-stack``) each sub-env is a process that
plays through them as :func:`rolltape.pass1.wrappers.record_wrapped_episode` does and
hands over its base env's finished tape (:attr:`Facts.fields`); a served env is then
stepped one session per sub-env, because a wrapper may step the base env several times per
policy step (frame skip, no-op resets), which one request for all sub-envs cannot carry.

May import: envs, errors, pass1.rollout, pass1.wrappers, server.client (a served spec).
Never: policies, the render side, executors, outputs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from rolltape.envs.state import mujoco_data, physics_spec
from rolltape.pass1.rollout import last_line

INFO_KEY = "rolltape"  # what each local sub-env adds to its info: its Facts


@dataclass(frozen=True)
class Facts:
    """What one sub-env's reset or step gave that a tape keeps, beside the observation."""

    state: Any = None  # the MuJoCo state row (None: no MuJoCo physics)
    success: Any = None  # info["is_success"] (the success key), None when not said
    metrics: Any = None  # info["metrics"]
    error: str | None = None  # the sub-env raised: its episode fails, it must be reset
    fields: dict[str, Any] | None = None  # through wrappers: the finished tape's fields
    ale: bytes | None = None  # an Atari game's emulator state, RNG included (else None)


def open_vector(spec: dict[str, Any], num_envs: int, entries: tuple[dict[str, Any], ...],
                success_key: str | None) -> Any:
    """The vector env of a batched job: ``num_envs`` local sub-envs, or for a served spec
    without wrappers ``num_envs`` vector sessions of the server's ``--num-envs`` each."""
    if spec.get("served") and not entries:
        return ServedVector(spec, num_envs, success_key)
    return LocalVector(spec, num_envs, entries, success_key)


class LocalVector:
    """Sub-env processes (``AsyncVectorEnv``, spawned, autoreset off)."""

    def __init__(self, spec: dict[str, Any], num_envs: int,
                 entries: tuple[dict[str, Any], ...], success_key: str | None) -> None:
        from gymnasium.vector import AsyncVectorEnv, AutoresetMode

        make = functools.partial(_recording_env, spec, entries, success_key)
        self.envs = AsyncVectorEnv([make] * num_envs, autoreset_mode=AutoresetMode.DISABLED,
                                   context="spawn")
        self.num_envs = num_envs
        self.single_observation_space = self.envs.single_observation_space

    def reset(self, seeds: list[int | None], mask: np.ndarray) -> tuple[Any, list[Any]]:
        obs, infos = self.envs.reset(seed=seeds, options={"reset_mask": mask})
        facts = infos[INFO_KEY]
        return obs, [facts[s] if mask[s] else None for s in range(self.num_envs)]

    def step(self, actions: np.ndarray) -> tuple[Any, ...]:
        obs, rewards, terminated, truncated, infos = self.envs.step(actions)
        return obs, rewards, terminated, truncated, list(infos[INFO_KEY])

    def close(self) -> None:
        self.envs.close()


class ServedVector:
    """Vector sessions on a server (:class:`rolltape.server.client.RemoteVectorEnv`), with
    the observation buffer ``AsyncVectorEnv`` keeps (a reset replaces only its rows)."""

    def __init__(self, spec: dict[str, Any], sessions: int, success_key: str | None) -> None:
        from gymnasium.vector.utils import create_empty_array

        from rolltape.server.client import RemoteVectorEnv

        self.remote = RemoteVectorEnv.connect(spec, sessions)
        self.num_envs = self.remote.num_envs
        self.single_observation_space = self.remote.single_observation_space
        self.key = success_key or "\0"
        self.obs = create_empty_array(self.single_observation_space, self.num_envs, np.zeros)

    def _facts(self, reply: dict[str, Any]) -> list[Facts]:
        physics = reply.get("physics")
        return [Facts(None if physics is None else physics[k], info.get(self.key),
                      info.get("metrics"), _said(error, self.remote.address),
                      ale=None if ale is None else bytes(ale))
                for k, (info, error, ale) in enumerate(
                    zip(reply["info"], reply["errors"], reply["ale_states"]))]

    def reset(self, seeds: list[int | None], mask: np.ndarray) -> tuple[Any, list[Any]]:
        reply = self.remote.reset(seeds, mask)
        rows = reply["rows"]
        _set_rows(self.obs, rows, reply["obs"])
        facts: list[Any] = [None] * self.num_envs
        for s, fact in zip(rows, self._facts(reply)):
            facts[s] = fact
        return _copy(self.obs), facts

    def step(self, actions: np.ndarray) -> tuple[Any, ...]:
        reply = self.remote.step(actions)
        self.obs = reply["obs"]
        return (_copy(self.obs), reply["reward"], reply["terminated"], reply["truncated"],
                self._facts(reply))

    def close(self) -> None:
        self.remote.close()


def _set_rows(buffer: Any, rows: list[int], values: Any) -> None:
    if isinstance(buffer, dict):
        for key in buffer:
            _set_rows(buffer[key], rows, values[key])
    else:
        buffer[rows] = values


def _copy(obs: Any) -> Any:
    return {k: _copy(v) for k, v in obs.items()} if isinstance(obs, dict) else obs.copy()


def _recording_env(spec: dict[str, Any], entries: tuple[dict[str, Any], ...],
                   success_key: str | None) -> Any:
    """A local sub-env that reports its :class:`Facts` in ``info[INFO_KEY]``: the env lives
    in another process, so nothing else can read them. With wrappers it plays through them
    (:class:`_ThroughWrappers`)."""
    import gymnasium as gym

    from rolltape.envs.state import ale_state
    from rolltape.pass1.rollout import open_env

    env = open_env(spec)
    if entries:
        return _through_wrappers(env, entries, success_key)
    state = _state_reader(env)
    key = success_key or "\0"

    class ReportState(gym.Wrapper):
        def reset(self, **kwargs: Any) -> Any:
            obs, info = self.env.reset(**kwargs)
            return obs, {**info, INFO_KEY: Facts(state(), ale=ale_state(env))}

        def step(self, action: Any) -> Any:
            obs, reward, term, trunc, info = self.env.step(action)
            facts = Facts(state(), info.get(key), info.get("metrics"), ale=ale_state(env))
            return obs, reward, term, trunc, {**info, INFO_KEY: facts}

    return ReportState(env)


def _through_wrappers(base: Any, entries: tuple[dict[str, Any], ...],
                      success_key: str | None) -> Any:
    """A sub-env whose observations are the wrapped env's and whose episodes are the base
    env's: a wrapper's early end (a lost life) resets the wrappers and plays on, as
    :func:`rolltape.pass1.wrappers.record_wrapped_episode` does; the step that ends the base
    episode hands over its tape's fields."""
    import gymnasium as gym

    from rolltape.pass1.wrappers import WrappedEnv

    wrapped = WrappedEnv.build(base, entries)

    class ThroughWrappers(gym.Env):
        def __init__(self) -> None:
            self.observation_space = wrapped.env.observation_space
            self.action_space = wrapped.env.action_space
            self.metadata = wrapped.env.metadata
            self.episode_seed: int | None = None

        def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
                  ) -> Any:
            env = wrapped.fresh()
            wrapped.tap.begin(success_key)
            self.episode_seed = seed
            obs, _ = env.reset(seed=seed, options=options)
            return obs, {INFO_KEY: Facts()}

        def step(self, action: Any) -> Any:
            obs, reward, term, trunc, _ = wrapped.env.step(action)
            tap = wrapped.tap
            if (term or trunc) and not tap.done:
                obs, _ = wrapped.env.reset()
            fields = tap.fields(self.episode_seed, None) if tap.done else None
            return obs, reward, tap.done, False, {INFO_KEY: Facts(fields=fields)}

        def close(self) -> None:
            wrapped.close()

    return ThroughWrappers()


def _state_reader(env: Any) -> Callable[[], np.ndarray | None]:
    """A function returning the MuJoCo state a tape keeps per frame (None for other envs)."""
    data = mujoco_data(env)
    if data is None:
        return lambda: None
    import mujoco

    model, what = env.unwrapped.model, physics_spec()
    size = mujoco.mj_stateSize(model, what)

    def state() -> np.ndarray:
        out = np.empty(size)
        mujoco.mj_getState(model, data, out, what)
        return out

    return state


def _said(error: str | None, address: str) -> str | None:
    """A row's error as a failed episode says it, 'ValueError: boom', as a local env's
    (a hung sub-env's: 'TimeoutError: the env served at ADDRESS hung: ...')."""
    if error is None:
        return None
    from rolltape.server.client import row_error

    return last_line(row_error(error, address))
