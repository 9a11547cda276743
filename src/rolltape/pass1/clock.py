"""Inference latency on a simulated clock: the world keeps running while a policy thinks.

Every simulated benchmark freezes the world while the policy computes; a robot does not.
Here latency is counted in control steps (``--latency D``), never wall time, so a latency
run is reproducible, and its tapes replay and verify like any other: the clock only
decides which action each step plays, and the tape records that action.

A policy answers an observation with a *chunk* of H actions (a plain policy: H = 1) and
its first K are executed open loop (``--execute-steps``; default: the whole chunk). With
the clock, a chunk requested at step r takes over at step r + D:

- ``sync``: the next chunk is requested when the current one has played its K actions;
  while it is computed (D steps) the current chunk's tail plays on, then the hold action
  (``--hold last``: the last action played; ``zero``: zeros). The new chunk starts at its
  first action, planned for a world D steps younger.
- ``async``: the next chunk is requested while the current one plays, D steps before its
  K actions run out (at once when D >= K), and takes over at its own action D, the one it
  planned for the step it starts at (as real-time chunking executes). ``--blend linear``
  mixes the old chunk's remaining actions into the new one's over their overlap, with a
  weight on the new that grows linearly.

The schedule is a pure function of the step index, D, K and H, so two runs agree. With
D = 0 both modes are today's chunk execution, and rolltape then does not wrap the policy
at all (tapes byte-identical). Each step's chunk and index in it are recorded in the tape
(``chunk_index``, ``chunk_offset``; -1 for a hold), and ``chunk_starts`` holds the step at
which each chunk was requested.

>>> import numpy as np
>>> from rolltape.policies import Policy
>>> class Count(Policy):  # a chunk of 4 actions: the step of the observation, 4 times
...     description = {"kind": "example"}
...     def chunk(self, obs):
...         return np.full((4, 1), float(obs))
>>> from gymnasium.spaces import Box
>>> space = Box(-10, 10, (1,))
>>> clocked = ClockedPolicy(Count(), Clock(latency=2, execution="sync"), space, execute_steps=2)
>>> clocked.reset(0)
>>> [float(clocked.act(t)[0]) for t in range(8)]   # obs at 0 plays from 2, obs at 4 from 6
[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 4.0, 4.0]
>>> clocked.tape_fields()["chunk_index"].tolist()   # -1: the hold before the first chunk
[-1, -1, 0, 0, 0, 0, 1, 1]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from rolltape.errors import UsageError
from rolltape.flags import check_field
from rolltape.groups import PolicyFiles
from rolltape.policies import Policy, close_policy

EXECUTIONS = ("sync", "async")
HOLDS = ("last", "zero")
BLENDS = ("none", "linear")
MAX_LATENCY = 100_000  # steps; far beyond any episode, and small enough to stay exact


@dataclass(frozen=True)
class Clock:
    """How long a policy thinks, in control steps, and how its chunks are executed."""

    latency: int
    execution: str = "sync"
    hold: str = "last"
    blend: str = "none"

    def __post_init__(self) -> None:
        if type(self.latency) is not int or not 0 <= self.latency <= MAX_LATENCY:
            raise UsageError(f"--latency must be a whole number of steps from 0 to "
                             f"{MAX_LATENCY} (or milliseconds, as '40ms'); got {self.latency!r}.")
        for flag, value, allowed in (("--execution", self.execution, EXECUTIONS),
                                     ("--hold", self.hold, HOLDS),
                                     ("--blend", self.blend, BLENDS)):
            if value not in allowed:
                raise UsageError(f"{flag} must be one of {', '.join(allowed)}; got '{value}'.")
        if self.blend != "none" and self.execution != "async":
            raise UsageError("--blend mixes overlapping chunks, which only --execution async "
                             "has; drop --blend or use --execution async.")

    @property
    def changes_nothing(self) -> bool:
        """D = 0 and sync: exactly today's execution, so the policy is not wrapped."""
        return self.latency == 0 and self.execution == "sync"

    def describe(self) -> dict[str, Any]:
        return {"latency_steps": self.latency, "execution": self.execution,
                "hold": self.hold, "blend": self.blend}


def latency_steps(text: str, control_period_s: float | None) -> int:
    """``--latency``'s value in steps: ``D`` as is, ``Dms`` rounded up to whole control
    periods (``control_period_s``: the env's ``dt``, None when it has none).

    >>> latency_steps("3", None), latency_steps("45ms", 0.02), latency_steps("40ms", 0.02)
    (3, 3, 2)
    """
    text = text.strip()
    if text.endswith("ms"):
        try:
            ms = float(text[:-2])
        except ValueError:
            ms = math.nan
        if not math.isfinite(ms) or ms < 0:
            raise UsageError(f"--latency '{text}' is not a number of milliseconds; give e.g. "
                             "'40ms' or a number of steps.")
        if not control_period_s:
            raise UsageError(f"--latency '{text}' needs the env's control period, which this "
                             "env does not give (no dt); give the latency in steps.")
        steps = ms / 1000.0 / control_period_s
        # 40 ms at dt = 0.02 s is 2 steps, not 3: round off the float error of the division
        return min(MAX_LATENCY + 1, math.ceil(round(steps, 9)))
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"--latency '{text}' is not a number of steps or milliseconds; give "
                         "e.g. 3 or '40ms'.") from None


MEASURE_CALLS = 5  # inference calls timed for --latency measured (their median counts)


def measure_latency(spec: dict[str, Any], source: str) -> tuple[int, str]:
    """``--latency measured``: the median of the inference times a policy server reports
    (``server_timing.infer_ms``, as openpi's server and ``serve-policy`` send) over
    :data:`MEASURE_CALLS` calls on the env's first observation, in steps of its control
    period (rounded up), and a sentence saying so. Run once, before pass 1 (in a fresh
    interpreter: it builds the env), so every episode plays on the same clock."""
    from rolltape.envs.build import make_env
    from rolltape.policy_server import wire
    from rolltape.policy_server.client import PolicySession

    env = make_env(spec)
    session = PolicySession(wire.parse_source(source))
    try:
        obs, _ = env.reset(seed=0)
        times = []
        for _ in range(MEASURE_CALLS):
            reply = session.call({"observation": obs}, "an observation, to time it")
            timing = reply.get("server_timing") if isinstance(reply, dict) else None
            ms = timing.get("infer_ms") if isinstance(timing, dict) else None
            if not isinstance(ms, (int, float)) or not math.isfinite(ms) or ms < 0:
                raise UsageError(f"The policy server at {source} does not report its "
                                 "inference time (server_timing.infer_ms); give --latency in "
                                 "steps or milliseconds.")
            times.append(float(ms))
        period = control_period(env)
    finally:
        session.close()
        env.close()
    ms = float(np.median(times))
    steps = latency_steps(f"{ms}ms", period)
    return steps, (f"--latency measured: the server's median inference time over "
                   f"{MEASURE_CALLS} calls was {ms:.3g} ms, {steps} step(s) of "
                   f"{1000 * period:.3g} ms")  # type: ignore[operator]


def control_period(env: Any) -> float | None:
    """Seconds between two actions: ``1 / control_hz`` where the env declares it (gym-pusht,
    whose ``dt`` is its physics substep), else Gymnasium MuJoCo's ``dt`` (timestep × frame
    skip), else one frame at the env's ``render_fps``; None when the env says none of them."""
    base = getattr(env, "unwrapped", env)
    hz = getattr(base, "control_hz", None)
    if isinstance(hz, (int, float)) and hz > 0:
        return 1.0 / hz
    dt = getattr(base, "dt", None)
    if isinstance(dt, (int, float)) and dt > 0:
        return float(dt)
    fps = (getattr(env, "metadata", None) or {}).get("render_fps")
    return 1.0 / fps if isinstance(fps, (int, float)) and fps > 0 else None


class ClockedPolicy(Policy):
    """``inner`` played on a simulated clock (see the module's docstring).

    ``action_space`` gives the hold action's shape before the first chunk arrives;
    ``execute_steps`` is K (None: the whole chunk; a served policy's own setting wins)."""

    def __init__(self, inner: Policy, clock: Clock, action_space: Any,
                 execute_steps: int | None = None) -> None:
        if execute_steps is not None and type(execute_steps) is not int:
            raise UsageError(f"--execute-steps must be a whole number; got {execute_steps!r}.")
        check_field(PolicyFiles, "execute_steps", execute_steps)  # its rule, declared once
        self.inner, self.clock, self.action_space = inner, clock, action_space
        self.execute_steps = getattr(inner, "execute_steps", None) or execute_steps
        self.description = {**inner.description, "clock": clock.describe(),
                            "execute_steps": self.execute_steps}
        self._clear()

    def reset(self, seed: int | None) -> None:
        self.inner.reset(seed)
        self._clear()

    def _clear(self) -> None:
        self.t = 0
        self.current: np.ndarray | None = None  # the chunk playing, its start step and base
        self.started = self.base = 0
        self.previous: tuple[np.ndarray, int, int] | None = None  # blend: old chunk, index, m
        self.pending: tuple[np.ndarray, int] | None = None  # requested chunk, takeover step
        self.next_request = self.taken = 0
        self.requests: list[int] = []
        self.index: list[int] = []
        self.offset: list[int] = []
        self.last: Any = None

    def _request(self, obs: Any) -> None:
        if self.pending is None and self.t >= self.next_request:
            chunk = np.asarray(self.inner.chunk(obs))
            if chunk.ndim < 1 or len(chunk) < 1:
                raise UsageError("The policy returned an empty chunk of actions.")
            self.requests.append(self.t)
            self.pending = (chunk, self.t + self.clock.latency)

    def _take_over(self) -> None:
        chunk, _ = self.pending  # type: ignore[misc]
        self.pending = None
        d, k = self.clock.latency, self.execute_steps or len(chunk)
        base = d if self.clock.execution == "async" else 0
        if base >= len(chunk):
            raise UsageError(f"--latency {d} with --execution async needs chunks longer than "
                             f"{d} actions, and this policy returns {len(chunk)}; lower "
                             "--latency or use --execution sync.")
        old = self._planned()
        if self.clock.blend == "linear" and old is not None:
            overlap = min(len(self.current) - old, len(chunk) - base)  # type: ignore[arg-type]
            self.previous = (self.current, old, overlap)  # type: ignore[assignment]
        else:
            self.previous = None
        self.current, self.started, self.base = chunk, self.t, base
        self.taken += 1
        # sync: ask again once K actions have played; async: D steps before they run out
        ahead = d if self.clock.execution == "async" else 0
        self.next_request = self.t + max(min(k, len(chunk) - base) - ahead, 0)

    def _planned(self) -> int | None:
        """The index of the current chunk that plays at this step, None when it is used up."""
        if self.current is None:
            return None
        i = self.base + self.t - self.started
        return i if i < len(self.current) else None

    def act(self, obs: Any) -> Any:
        self._request(obs)
        if self.pending is not None and self.pending[1] == self.t:
            self._take_over()
            self._request(obs)  # async with D >= K, or D = 0: the next request is now
        i = self._planned()
        if i is None:
            action = self._hold()
            self.index.append(-1)
            self.offset.append(-1)
        else:
            action = self._blended(i)
            self.index.append(self.taken - 1)
            self.offset.append(i)
        self.last = action
        self.t += 1
        return action

    def _blended(self, i: int) -> Any:
        new = self.current[i]  # type: ignore[index]
        if self.previous is None:
            return new
        old, start, overlap = self.previous
        j = self.t - self.started
        if j >= overlap:
            self.previous = None
            return new
        w = (j + 1) / (overlap + 1)
        mixed = (1.0 - w) * np.asarray(old[start + j], np.float64) + w * np.asarray(new, np.float64)
        return mixed.astype(np.asarray(new).dtype)

    def _hold(self) -> Any:
        if self.clock.hold == "last" and self.last is not None:
            return np.array(self.last, copy=True)
        if self.current is not None:
            return np.zeros_like(self.current[0])
        return np.zeros(self.action_space.shape, self.action_space.dtype)

    def chunk_starts(self) -> np.ndarray | None:
        return np.asarray(self.requests, dtype=np.int64)

    def tape_fields(self) -> dict[str, np.ndarray]:
        """What the tape records of this episode's schedule, beside ``chunk_starts``."""
        return {"chunk_index": np.asarray(self.index, dtype=np.int32),
                "chunk_offset": np.asarray(self.offset, dtype=np.int32)}

    def close(self) -> None:
        close_policy(self.inner)

    def fork(self) -> ClockedPolicy | None:
        inner = self.inner.fork()
        if inner is None:
            return None
        return ClockedPolicy(inner, self.clock, self.action_space, self.execute_steps)


def with_clock(policy: Policy, clock: dict[str, Any] | None, env: Any) -> Policy:
    """``policy`` as pass 1 plays it on ``env``: on the clock ``clock`` asks for
    (:meth:`rolltape.config.EvalConfig.clock_request`; milliseconds become steps of this
    env's control period here), and a local policy that acts in chunks (a callable whose
    object declares ``action_horizon``) on a clock of D = 0, which executes its chunks open
    loop. A served policy executes its own chunks when there is no clock."""
    if clock is None:
        if getattr(policy, "action_horizon", None) is None:
            return policy
        return ClockedPolicy(policy, Clock(0), env.action_space,
                             getattr(getattr(policy, "owner", None), "execute_steps", None))
    steps = latency_steps(clock["latency"], control_period(env))
    # A chunk's length as the policy declares it (a served one in its metadata); else 1.
    horizon = (getattr(policy, "action_horizon", None)
               or policy.description.get("action_horizon") or 1)
    if clock["execution"] == "async" and steps >= horizon:
        raise UsageError(f"--latency {steps} with --execution async needs chunks longer than "
                         f"{steps} actions, and this policy returns {horizon}; lower "
                         "--latency or use --execution sync.")
    if clock["blend"] != "none" and np.dtype(env.action_space.dtype).kind != "f":
        raise UsageError(f"--blend {clock['blend']} mixes actions, and this env's actions are "
                         f"{env.action_space}; drop --blend.")
    owner = getattr(policy, "owner", None)
    return ClockedPolicy(policy, Clock(steps, clock["execution"], clock["hold"], clock["blend"]),
                         env.action_space, getattr(owner, "execute_steps", None))
