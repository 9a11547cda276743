"""Policy-side wrappers: the env the policy sees, over the base env the tape records.

A policy trained with wrappers (SB3's ``AtariWrapper`` + ``VecFrameStack``, an rl-zoo3
``env_wrapper``, ``--wrapper module:Class,key=value``) must be shown observations through
them, but a tape is the base env's episode: its actions, rewards, flags and observation
digests are what the base env took and gave, so pass 2 replays and verifies the base env
(which imports none of the wrappers). The chain, bottom up::

    base env (make_env)  ->  BaseTap (records)  ->  wrappers  ->  frame stack  ->  policy

Returns are the base env's whole episodes, unclipped: what SB3's ``Monitor`` placed under the
wrappers reports (``make_atari_env`` and rl-zoo3 place it there) and ``evaluate_policy``
returns. A wrapper that ends the policy's episode while the base env plays on (Atari's
life-loss termination) does not end the tape's: as a VecEnv does, the wrappers are reset
(without a seed) and the policy plays on until the base env ends, as ``evaluate_policy`` does
when it waits for Monitor's ``info["episode"]``.

``--frame-stack N`` stacks as SB3's ``VecFrameStack`` does (its own ``StackedObservations``:
zeros before the first frame, the last axis of images), reset with the wrappers.

May import: envs, errors, pass1.fields; gymnasium and SB3 lazily (the
orchestrator only parses and checks names). Never: the render side, executors, outputs.
"""

from __future__ import annotations

import importlib
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rolltape.errors import UsageError
from rolltape.limits import MAX_FRAME_STACK

# Named presets: what a user trained with, by the name they know it by.
PRESETS: dict[str, dict[str, Any]] = {
    # SB3's make_atari_env: noop reset, frame skip 4, life-loss termination, FIRE on reset,
    # 84x84 grayscale, clipped rewards (the policy's; the tape keeps the game's own).
    "atari": {"target": "stable_baselines3.common.atari_wrappers:AtariWrapper", "kwargs": {}},
}
FRAME_STACK = "rolltape:frame_stack"  # the entry --frame-stack N adds (SB3's stacking)
# VecNormalize statistics applied inside the chain (kwargs: path), where rl-zoo3 applies them
# when it also stacks frames: normalize, then stack (the stack's zeros stay zeros).
NORMALIZE = "rolltape:vecnormalize"
_KEY = re.compile(r",(?=\s*[A-Za-z_]\w*\s*=)")  # a comma that starts a key=value


def split_wrapper(text: str) -> tuple[str, list[str]]:
    """``'module:Class,a=1,b=(1, 2)'`` -> ``('module:Class', ['a=1', 'b=(1, 2)'])``: the
    target and its KEY=VALUE pairs (a comma inside a value stays in it).

    >>> split_wrapper("gymnasium.wrappers:FrameStackObservation,stack_size=4")
    ('gymnasium.wrappers:FrameStackObservation', ['stack_size=4'])
    """
    target, *pairs = _KEY.split(text.strip())
    return target.strip(), [p.strip() for p in pairs]


def check_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """A wrapper entry ``{"target", "kwargs"}`` with a preset expanded, checked for its form
    only (importing it here would import the policy framework into the orchestrator)."""
    target = str(entry.get("target", ""))
    kwargs = dict(entry.get("kwargs") or {})
    if target in PRESETS:
        return {"target": PRESETS[target]["target"],
                "kwargs": {**PRESETS[target]["kwargs"], **kwargs}, "preset": target}
    if target in (FRAME_STACK, NORMALIZE):
        return {"target": target, "kwargs": kwargs}
    if "flag" in entry:  # where it came from, for its refusals (a zoo folder's config.yml)
        return {"target": target, "kwargs": kwargs, "flag": str(entry["flag"])}
    module, sep, name = target.partition(":")
    if not sep or not name.isidentifier() or not all(p.isidentifier() for p in module.split(".")):
        raise UsageError(f"--wrapper '{target}' is neither a preset ({', '.join(PRESETS)}) nor "
                         "MODULE:CLASS; give e.g. --wrapper atari or --wrapper "
                         "gymnasium.wrappers:GrayscaleObservation.")
    return {"target": target, "kwargs": kwargs}


def wrapper_entries(wrappers: Any, frame_stack: int = 0) -> tuple[dict[str, Any], ...]:
    """The checked entries of ``wrappers`` (each a preset name, ``MODULE:CLASS`` or a dict
    ``{"target", "kwargs"}``) followed, when ``frame_stack`` > 1, by SB3-style stacking."""
    out = []
    for w in wrappers or ():
        out.append(check_entry({"target": w} if isinstance(w, str) else dict(w)))
    if frame_stack < 0:
        raise UsageError(f"--frame-stack must be 0 (none) or more, got {frame_stack}.")
    if frame_stack > MAX_FRAME_STACK:  # each frame is kept: refused before it allocates
        raise UsageError(f"--frame-stack {frame_stack} is more frames than a policy stacks; "
                         f"give at most {MAX_FRAME_STACK:,}.")
    if frame_stack > 1:
        out.append({"target": FRAME_STACK, "kwargs": {"n_stack": int(frame_stack)}})
    return tuple(out)


def describe(entries: Any) -> list[str]:
    """What the policy saw, as the report and metadata say it: ``['atari', 'frame_stack=4']``."""
    names = []
    for e in entries:
        if e["target"] == FRAME_STACK:
            names.append(f"frame_stack={e['kwargs']['n_stack']}")
            continue
        if e["target"] == NORMALIZE:
            names.append(f"vecnormalize={e['kwargs']['path']}")
            continue
        args = ",".join(f"{k}={v!r}" for k, v in e["kwargs"].items())
        names.append((e.get("preset") or e["target"]) + (f",{args}" if args else ""))
    return names


def import_wrapper(target: str, flag: str | None = None) -> Any:
    """The class (or callable) ``MODULE:CLASS`` names; one sentence when it cannot be had."""
    module, _, name = target.partition(":")
    what = flag or f"--wrapper '{target}'"
    try:
        imported = importlib.import_module(module)
    except ImportError as exc:
        raise UsageError(f"{what}: cannot import '{module}' ({exc}); install it or fix the "
                         "name.") from None
    cls = getattr(imported, name, None)
    if not callable(cls):
        raise UsageError(f"{what}: module '{module}' has no class '{name}'.")
    if flag is not None and not _is_wrapper(cls):
        # A zoo folder's entry (data, not the user's command line) names only a Wrapper
        # class: a function such as pydoc.pipepager would run what its arguments say.
        raise UsageError(f"{what} is not a gymnasium.Wrapper class, and a zoo folder may name "
                         "only wrappers; remove the entry (or wrap the env yourself with "
                         "--wrapper).")
    return cls


def _is_wrapper(obj: Any) -> bool:
    import gymnasium as gym

    return isinstance(obj, type) and issubclass(obj, gym.Wrapper)


def recording_tap(base: Any) -> Any:
    """A ``gymnasium.Wrapper`` right over ``base`` that keeps one tape episode of it."""
    import gymnasium as gym

    from rolltape.envs.digests import DIGEST_BATCH
    from rolltape.envs.state import AleLog, PhysicsLog
    from rolltape.pass1.fields import compact, kept_obs, reset_forms, success_flag, tape_fields

    class Tap(gym.Wrapper):
        """Right over the base env: keeps one tape episode of it (begin, then fields)."""

        def __init__(self, env: Any) -> None:
            super().__init__(env)
            self.begin(None)

        def begin(self, success_key: str | None) -> None:
            """Start a tape: the next reset is its first frame."""
            self.key = success_key or "\0"
            self.first: Any = None
            self.forms: dict[str, dict[str, str]] = {}
            self.steps: list[tuple[Any, ...]] = []
            self.physics: Any = None
            self.ale: Any = None
            self.done = False
            self.info: dict[str, Any] = {}
            self.reported = self.hit = False
            self.started = time.perf_counter()

        def reset(self, **kwargs: Any) -> Any:
            obs, info = self.env.reset(**kwargs)
            if self.done:  # a wrapper reset after the game ended: not the tape's
                return obs, info
            if self.first is not None:
                raise UsageError("A --wrapper reset the base env in the middle of an episode "
                                 "(it ended the policy's episode without handling it as "
                                 "Atari's life loss does); a tape records whole base "
                                 "episodes, so drop that wrapper.")
            self.first = kept_obs(obs)
            self.forms = reset_forms(obs)
            self.physics = PhysicsLog.for_env(self.env)
            if self.physics is not None:
                self.physics.record()
            self.ale = AleLog.for_env(self.env)
            if self.ale is not None:
                self.ale.record()
            return obs, info

        def step(self, action: Any) -> Any:
            obs, reward, term, trunc, info = self.env.step(action)
            if self.done:
                return obs, reward, term, trunc, info
            self.steps.append((np.array(action, copy=True), reward, term, trunc, kept_obs(obs)))
            if not len(self.steps) % DIGEST_BATCH:
                compact(self.steps)
            if self.physics is not None:
                self.physics.record()
            if self.ale is not None:
                self.ale.record()
            self.done = bool(term or trunc)
            self.info = info
            said = info.get(self.key)
            if said is not None:
                self.reported = True
                if said and not self.hit:
                    self.hit = bool(success_flag(said))
            return obs, reward, term, trunc, info

        def fields(self, seed: int | None, options: dict[str, Any] | None) -> dict[str, Any]:
            physics = self.physics.arrays() if self.physics is not None else (None, None, None)
            out = tape_fields(seed, options, self.first, self.steps, physics,
                              self.info.get(self.key), self.info.get("metrics"), self.started)
            out["success_once"] = self.hit if self.reported else None
            out["obs_reset"] = self.forms or None
            if self.ale is not None:
                out["ale_state"], out["ale_state_offsets"] = self.ale.arrays()
            return out

    if not isinstance(base, gym.Env):
        raise UsageError("--wrapper and --frame-stack need an env built here; a served env "
                         "(tcp://...) is stepped remotely, so drop them or evaluate locally.")
    return Tap(base)


def wrap(tap: Any, entries: Any) -> Any:
    """The env the policy sees: ``entries`` wrapped, in order, over ``tap``."""
    env: Any = tap
    for e in entries:
        if e["target"] == FRAME_STACK:
            env = SB3FrameStack(env, **e["kwargs"])
            continue
        if e["target"] == NORMALIZE:
            env = VecNormalizeObs(env, **e["kwargs"])
            continue
        cls = import_wrapper(e["target"], e.get("flag"))
        try:
            env = cls(env, **e["kwargs"])
        except Exception as exc:  # the user's wrapper refused its arguments or this env
            raise UsageError(f"{e.get('flag') or '--wrapper ' + repr(e['target'])} could not wrap env "
                             f"'{tap.spec.id if tap.spec else tap}' "
                             f"({type(exc).__name__}: {exc}); check its arguments.") from None
    return env


_FROZEN_STATS: dict[str, Any] = {}  # path -> VecNormalize statistics frozen for evaluation


def VecNormalizeObs(env: Any, path: str) -> Any:  # noqa: N802 (a wrapper, named as one)
    """``env`` with its observations normalized by the VecNormalize statistics at ``path``,
    frozen as for evaluation (its ``normalize_obs``, as VecNormalize applies it to a batch)."""
    import gymnasium as gym

    from rolltape.policies import load_vecnormalize

    # Unpickled once per process: the chain is rebuilt for every episode (WrappedEnv.fresh).
    if path not in _FROZEN_STATS:
        _FROZEN_STATS[path] = load_vecnormalize(Path(path), env)
    stats = _FROZEN_STATS[path]

    class Normalize(gym.ObservationWrapper):
        # observation_space stays the raw one, as VecNormalize keeps it: a stack over this
        # stores the normalized values in the env's dtype, as VecFrameStack does.
        def observation(self, observation: Any) -> Any:
            return stats.normalize_obs(observation)

    return Normalize(env)


def SB3FrameStack(env: Any, n_stack: int) -> Any:  # noqa: N802 (a wrapper, named as one)
    """``env`` with its observations stacked as SB3's ``VecFrameStack`` stacks one sub-env's."""
    import gymnasium as gym
    from stable_baselines3.common.vec_env.stacked_observations import StackedObservations

    class FrameStack(gym.Wrapper):
        def __init__(self, inner: Any) -> None:
            super().__init__(inner)
            self.stack = StackedObservations(1, n_stack, inner.observation_space)
            self.observation_space = self.stack.stacked_observation_space

        def reset(self, **kwargs: Any) -> Any:
            obs, info = self.env.reset(**kwargs)
            return self.stack.reset(np.asarray(obs)[None])[0].copy(), info

        def step(self, action: Any) -> Any:
            obs, reward, term, trunc, info = self.env.step(action)
            # Never "done" here: the driver resets the chain (and so this stack) on an end,
            # as VecFrameStack restarts a sub-env's stack with its reset observation.
            stacked, _ = self.stack.update(np.asarray(obs)[None], np.zeros(1, bool), [{}])
            return stacked[0].copy(), reward, term, trunc, info

    return FrameStack(env)


@dataclass
class WrappedEnv:
    """The env a policy with wrappers plays: ``env`` (what it sees) and ``tap`` (the base)."""

    env: Any
    tap: Any
    entries: tuple[dict[str, Any], ...]
    names: list[str]

    @classmethod
    def build(cls, base: Any, entries: Any) -> WrappedEnv:
        tap = recording_tap(base)
        return cls(wrap(tap, entries), tap, tuple(entries), describe(entries))

    def fresh(self) -> Any:
        """New wrappers over the same base env, for a new episode: a wrapper's state must not
        carry over (SB3's EpisodicLifeEnv ignores a seeded reset while it thinks a game goes
        on, so a reused chain could start an episode from the last one's game)."""
        self.env = wrap(self.tap, self.entries)
        return self.env

    def close(self) -> None:
        self.env.close()


def record_wrapped_episode(wrapped: WrappedEnv, policy: Any, seed: int | None,
                           options: dict[str, Any] | None = None,
                           success_key: str | None = "is_success") -> dict[str, Any]:
    """:func:`rolltape.pass1.rollout.record_episode` through wrappers: the policy acts on the
    wrapped observations, the tape is the base env's whole episode."""
    env, tap = wrapped.fresh(), wrapped.tap
    tap.begin(success_key)
    obs, _ = env.reset(seed=seed, options=options)
    seen = _seen(obs, tap.forms)
    policy.reset(seed)
    while not tap.done:
        obs, _, term, trunc, _ = env.step(policy.act(obs))
        if (term or trunc) and not tap.done:
            # The wrappers' episode ended, the game did not (a lost life): a VecEnv resets
            # the sub-env (no seed) and evaluate_policy plays on until Monitor's episode ends.
            obs, _ = env.reset()
    fields = tap.fields(seed, options)
    if seen:
        fields["obs_reset"] = seen
    return fields


def _seen(obs: Any, forms: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """The base env's reset forms (:func:`rolltape.pass1.fields.reset_forms`) with, per
    key, the digest of what the policy saw through the wrappers ("seen"): a flip wrapper's
    digest equals one of the forms, so ``rolltape diff`` can name it. A key the policy saw
    but the env did not give (a wrapper's own) is added with "seen" only."""
    from rolltape.pass1.fields import reset_forms

    out = {k: dict(v) for k, v in forms.items()}
    for key, its in reset_forms(obs).items():
        out.setdefault(key, {})["seen"] = its["value"]
    return out
