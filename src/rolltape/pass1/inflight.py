"""Several episodes of a served env at once, one per session: while one episode's step is
on the server, the worker chooses the next action of another.

A one-env session answers one step per round trip, and on a small machine a round trip
costs more than the step and the policy together (zmq wakes six threads for it). With K
sessions the worker's wait becomes another episode's forward pass, and server and worker
stop taking turns. Each episode is still played alone in everything that reaches its
tape: reset with its own seed, acted on by a policy of its own (``Policy.fork``), stepped
in order on its own session; so its tape is bitwise the one a worker playing episodes one
after another records.

May import: errors. Never: the render side, executors, outputs (pass1.rollout drives it
with its episode generator).

>>> class Echo:  # an env whose steps return the action as the observation
...     def step_async(self, action): self.sent = action
...     def step_wait(self): return self.sent, 0.0, self.sent >= 3, False, {}
>>> def play(env, policy, ep):  # counts up from the episode's number; returns its last obs
...     obs = ep
...     while True:
...         obs, _, done, _, _ = yield obs + 1
...         if done:
...             return obs
>>> out = []
>>> play_in_flight([[Echo(), None], [Echo(), None]], [0, 1, 2], play,
...                finished=lambda ep, fields: out.append((ep, fields)), failed=None)
>>> sorted(out)
[(0, 3), (1, 3), (2, 3)]
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from typing import Any

from rolltape.errors import SessionReclaimed, UsageError

#: Sessions a worker plays at once: measured on 2 cores (HalfCheetah, PPO MLP, one
#: worker), a served step cost 390 us alone, 210 us with 2 sessions, 150 us with 4 and
#: 140 us with 8 (a local step and forward pass: 100 us).
IN_FLIGHT = 4

def sessions_per_worker(max_sessions: int, workers: int) -> int:
    """Episodes each of ``workers`` workers plays at once on a server that serves
    ``max_sessions`` sessions: at most :data:`IN_FLIGHT`, leaving each worker one more
    session for the job it played before (a worker keeps that job's first session open).

    >>> sessions_per_worker(8, 1), sessions_per_worker(8, 2), sessions_per_worker(8, 4)
    (4, 3, 1)
    """
    return max(1, min(IN_FLIGHT, max_sessions // max(1, workers) - 1))


Episode = Generator[Any, tuple[Any, ...], dict[str, Any]]
_END = object()  # no episode is left


def play_in_flight(slots: list[list[Any]], episodes: Iterable[Any],
                   play: Callable[[Any, Any, Any], Episode],
                   finished: Callable[[Any, dict[str, Any]], None],
                   failed: Callable[[int, Any, Exception], None] | None,
                   reclaimed: Callable[[int], None] | None = None) -> None:
    """Play ``episodes`` on ``slots`` (``[env, policy]`` each, the env with
    ``step_async``/``step_wait``); a slot whose episode ends takes the next one.

    ``play(env, policy, episode)`` is the episode's generator
    (:func:`rolltape.pass1.rollout.play_episode`: it yields actions, is sent step results
    and returns the tape's fields); ``finished(episode, fields)`` takes each finished
    episode; ``failed(slot, episode, exc)`` is told of an episode whose env or policy raised,
    and must put a fresh env in ``slots[slot]`` (the old one may be half-way through a
    call), or raise SessionReclaimed when the server has no room for one. A slot whose spare session the server gave to another client
    (:class:`SessionReclaimed`) plays no more: its episode is played again from its reset
    on another slot (the same tape: it is reset with its own seed), and
    ``reclaimed(slot)`` is told, to close it. Bad input, a gone server (OSError) and
    interrupts stop it.
    """
    todo = iter(episodes)
    again: list[Any] = []  # episodes of reclaimed slots, played again before the others
    retired: set[int] = set()
    playing: dict[int, tuple[Any, Episode]] = {}

    def take() -> tuple[bool, Any]:
        """(True, the next episode), or (False, None) when none is left."""
        if again:
            return True, again.pop()
        episode = next(todo, _END)
        return episode is not _END, episode

    def fail(s: int, episode: Any, exc: Exception) -> None:
        if isinstance(exc, SessionReclaimed) and len(retired) + 1 < len(slots):
            retire(s, episode)
            return
        if isinstance(exc, (UsageError, OSError, MemoryError)) or failed is None:
            raise exc  # not this episode's fault
        try:
            failed(s, episode, exc)
        except SessionReclaimed:  # no spare session to replace the failed one: play on
            if len(retired) + 1 >= len(slots):
                raise
            retire(s, None)

    def retire(s: int, episode: Any) -> None:
        """Slot ``s`` plays no more; ``episode`` (unless None) is played again elsewhere."""
        retired.add(s)
        if reclaimed is not None:
            reclaimed(s)
        if episode is None:
            return
        again.append(episode)
        for idle in range(len(slots)):  # a slot with nothing left to play takes it
            if idle not in playing and idle not in retired:
                begin(idle)
                break

    def begin(s: int) -> None:
        while s not in playing and s not in retired:
            more, episode = take()
            if not more:
                return
            env, policy = slots[s]
            steps = play(env, policy, episode)
            try:
                env.step_async(next(steps))  # its reset is a round trip of its own
            except Exception as exc:  # an episode has a first step: never StopIteration
                fail(s, episode, exc)
                continue
            playing[s] = (episode, steps)

    for s in range(len(slots)):
        begin(s)
    while playing:
        for s in list(playing):  # the server answers in the order the steps were sent
            episode, steps = playing[s]
            env = slots[s][0]
            try:
                env.step_async(steps.send(env.step_wait()))
            except StopIteration as done:
                del playing[s]
                finished(episode, done.value)
                begin(s)
            except Exception as exc:
                del playing[s]
                fail(s, episode, exc)
                begin(s)
