"""The simulator state a tape records and a replay puts back into an env.

MuJoCo: the physics state of each frame (:func:`physics_spec`, recorded by
:class:`PhysicsLog`), continued from bit for bit (:func:`continue_from`, which lets an env
whose step assumes more than the state settle through its ``after_set_state`` hook) or
drawn as it was (:func:`restore_state`). Atari: the emulator's state, its RNG included
(:class:`AleLog`, :func:`continue_atari`). Any env: the reset's RNG (:func:`rng_state`) and
the TimeLimit's count (:func:`set_elapsed_steps`). Pass 1 and the server record these; pass
2 and branches put them back.

May import: errors, tape, numpy; mujoco, ale_py and gymnasium lazily (only with an env of
theirs in hand). Never: policies, pass 1, pass 2, executors, outputs.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from rolltape.errors import UsageError
from rolltape.tape import json_safe


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
