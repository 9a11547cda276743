"""Several episodes of a served env, or of a served policy, at once, one per session: while
one episode's step (or its next action) is on the server, the worker plays another.

A one-env session answers one step per round trip, and on a small machine a round trip
costs more than the step and the policy together (zmq wakes six threads for it). With K
sessions the worker's wait becomes another episode's forward pass, and server and worker
stop taking turns. Each episode is still played alone in everything that reaches its
tape: reset with its own seed, acted on by a policy of its own (``Policy.fork``), stepped
in order on its own session; so its tape is bitwise the one a worker playing episodes one
after another records.

A served policy (``--policy ws://``) on a local env is played the same way (:class:`AskAhead`):
each episode's observation goes to the policy server as soon as its step is taken, and the
worker steps the other episodes until the answer is read, so that the round trip and the
server's forward pass overlap the worker's steps instead of adding to them.

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


class AskAhead:
    """A local env whose episodes' policy is served (:class:`rolltape.policies.ServedPolicy`),
    with a served env's ``step_async``/``step_wait``: ``step_async`` steps the env here and,
    unless the episode ended, sends the new observation to the policy server at once
    (``policy.ask``), so that the server chooses this episode's next action while the worker
    steps the other episodes; the episode's ``policy.act`` then only reads the answer. The
    policy sees the observations and gives the actions it would one episode at a time.

    >>> class Env:
    ...     def step(self, action): return action + 1, 0.0, action >= 2, False, {}
    >>> class Policy:
    ...     def ask(self, obs): print("asked about", obs)
    >>> env = AskAhead(Env(), Policy())
    >>> env.step_async(1); env.step_wait()[0]
    asked about 2
    2
    >>> env.step_async(2); env.step_wait()[2]  # the episode is over: nothing to ask
    True
    """

    def __init__(self, env: Any, policy: Any) -> None:
        self.env = env
        self.policy = policy
        self._result: tuple[Any, ...] = ()

    def step_async(self, action: Any) -> None:
        self._result = result = self.env.step(action)
        if not (result[2] or result[3]):
            self.policy.ask(result[0])

    def step_wait(self) -> tuple[Any, ...]:
        return self._result

    def close(self) -> None:
        """Close the env and the policy's session (a spare's: its server counts it)."""
        self.env.close()
        self.policy.close()


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
