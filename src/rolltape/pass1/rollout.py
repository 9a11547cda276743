"""Pass 1: run a policy with rendering off and record each episode as a tape.

:func:`record_episode` is the whole algorithm: reset with the episode's seed, then
act/step until the env says done, keeping what the env returned untouched (rewards stay
float64; actions stay the exact array passed to ``env.step``). :func:`run_policy_job` runs
it for one job; :mod:`rolltape.pass1.worker` is the process that runs them (the
orchestrator picks the executor that starts it).

May import: envs, tape, policies, pass1.fields, pass1.inflight, pass1.wrappers, errors. Never: an executor, the render side, outputs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain, islice
from pathlib import Path
from typing import Any

import numpy as np

from rolltape.envs.build import build_refusal, check_render_mode, make_env
from rolltape.envs.digests import DIGEST_BATCH
from rolltape.envs.state import AleLog, PhysicsLog
from rolltape.errors import EnvRaised, SessionReclaimed, UsageError
from rolltape.pass1.clock import with_clock
from rolltape.pass1.facts import env_facts
from rolltape.pass1.fields import (
    compact,
    image_facts,
    kept_obs,
    reset_forms,
    success_flag,
    tape_fields,
)
from rolltape.pass1.inflight import AskAhead, play_in_flight
from rolltape.pass1.wrappers import WrappedEnv, record_wrapped_episode
from rolltape.policies import Policy, SB3Policy, ServedPolicy, close_policy, load_policy
from rolltape.record import Episode, EpisodeKey
from rolltape.tape import Tape, finite_or_none

EPISODE_TIMEOUT = 600.0  # seconds a pass-1 worker may go without finishing an episode
UNITS = ("episode", "episode_failed")  # the messages that say one episode is over


@dataclass(frozen=True)
class EpisodeJob:
    """One episode of pass 1: which role, which index, which seed, where its tape goes."""

    role: str  # "policy" or "baseline"
    index: int
    seed: int
    tape_path: str


@dataclass(frozen=True)
class Episodes(Sequence[EpisodeJob]):
    """Episodes of one role, made on demand from their indices (a ``range`` unless some are
    done), so that even ``--episodes 10**12`` costs nothing before the first one plays.
    Slicing gives Episodes again: ``episodes[w::W]`` is worker w's share.

    >>> eps = Episodes("policy", range(10), seed=1000, tapes="runs/x/tapes")
    >>> eps[3].seed, len(eps[1::4])
    (1003, 3)
    """

    role: str
    indices: Sequence[int]
    seed: int  # episode i is reset with seed + i
    tapes: str  # the folder of the tapes

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return replace(self, indices=self.indices[k])
        i = self.indices[k]
        return EpisodeJob(self.role, i, self.seed + i, str(Path(self.tapes) / tape_name(self.role, i)))


@dataclass(frozen=True)
class PolicyJob:
    """Everything a pass-1 worker needs; plain data so it crosses a process boundary."""

    env: dict[str, Any]
    policy: str
    episodes: Sequence[EpisodeJob]
    vecnormalize: str | None = None
    algo: str | None = None
    deterministic: bool = True
    needs_rgb_array: bool = False  # a video was asked for: refuse an env that cannot draw
    extra_meta: dict[str, Any] = field(default_factory=dict)  # a suite's {"suite", "task"}
    success_key: str | None = "is_success"  # the info key that says success (None: none)
    wrappers: tuple[dict[str, Any], ...] = ()  # policy-side wrappers (pass1.wrappers entries)
    in_flight: int = 1  # a served env or policy: episodes played at once (pass1.inflight)
    clock: dict[str, Any] | None = None  # inference latency (pass1.clock.Clock.describe())
    simulator: str = "env"  # "mjwarp": every episode a world of one batch (pass1.mjwarp)

    def play(self, opened: Opened, ep: EpisodeJob) -> dict[str, Any]:
        """Play episode ``ep`` on ``opened``'s env and policy; return its tape's fields (a
        branch job continues a recorded episode instead: :mod:`rolltape.pass1.branches`)."""
        if opened.wrapped is not None:
            return record_wrapped_episode(opened.wrapped, opened.policy, ep.seed, None,
                                          self.success_key)
        return record_episode(opened.env, opened.policy, ep.seed, None, self.success_key)

    def episode_meta(self, ep: EpisodeJob) -> dict[str, Any]:
        """The ``meta`` of ``ep``'s tape: its role and index, and the job's extras."""
        return {"role": ep.role, "index": ep.index, **self.extra_meta}


def record_episode(env: Any, policy: Policy, seed: int | None,
                   options: dict[str, Any] | None = None,
                   success_key: str | None = "is_success") -> dict[str, Any]:
    """Play one episode and return the fields of its tape (all but env/policy/meta).

    ``success_at_end`` is ``info[success_key]`` on the last step (what LeRobot's own rollout
    counts) and ``success_once`` whether it was true at some step (ManiSkill's name); both
    None when the env never reported it.
    """
    episode = play_episode(env, policy, seed, options, success_key)
    try:
        action = next(episode)
        while True:
            action = episode.send(env.step(action))
    except StopIteration as finished:
        return finished.value


def play_episode(env: Any, policy: Policy, seed: int | None,
                 options: dict[str, Any] | None = None,
                 success_key: str | None = "is_success"
                 ) -> Generator[Any, tuple[Any, ...], dict[str, Any]]:
    """:func:`record_episode` without its ``env.step``: it yields each action and is sent
    what ``env.step`` returned for it; it returns the tape's fields. Whoever drives it
    chooses how the step is taken (:mod:`rolltape.pass1.inflight`: several episodes of a
    served env at once)."""
    start = time.perf_counter()
    obs, info = env.reset(seed=seed, options=options)
    policy.reset(seed)
    physics = PhysicsLog.for_env(env)
    if physics is not None:
        physics.record()
    ale = AleLog.for_env(env)  # Atari: the emulator state per frame, for --mode restore
    if ale is not None:
        ale.record()
    first = kept_obs(obs)
    images = image_facts(obs, env)  # which GL backend drew the images pass 2 checks
    forms = reset_forms(obs) or None  # what `rolltape diff` names a flip or a reorder by
    steps = []  # one tuple per step: fewer appends keep the loop as lean as a bare one
    done = False
    key = success_key or "\0"  # no key: a lookup that never finds anything
    reported = hit = False
    while not done:
        action = policy.act(obs)
        obs, reward, term, trunc, info = yield action
        steps.append((np.array(action, copy=True), reward, term, trunc, kept_obs(obs)))
        if not len(steps) % DIGEST_BATCH:
            compact(steps)  # screens: digested as they come, not all held
        if physics is not None:
            physics.record()
        if ale is not None:
            ale.record()
        done = term or trunc
        said = info.get(key)
        if said is not None:  # two tests a step; success_flag only on a truthy report
            reported = True
            if said and not hit:
                hit = bool(success_flag(said))
    fields = tape_fields(seed, options, first, steps,
                         physics.arrays() if physics is not None else (None, None, None),
                         info.get(key), info.get("metrics"), start)
    fields["success_once"] = hit if reported else None
    starts = policy.chunk_starts()
    if starts is not None:  # a served policy's chunks: when each was requested
        fields["chunk_starts"] = starts
    fields.update(policy.tape_fields())  # the clock's schedule, under a latency
    fields["obs_reset"] = forms
    fields["obs_images"] = images
    if ale is not None:
        fields["ale_state"], fields["ale_state_offsets"] = ale.arrays()
    return fields


def episode_row(tape: Tape, job: EpisodeJob) -> dict[str, Any]:
    """The per-episode line of ``episodes.jsonl`` (an :class:`rolltape.record.Episode`). A
    return that is not a finite number is None, with ``flags`` saying why (JSON has no
    NaN); a suite's episode is keyed by its ``suite`` and ``task`` too."""
    key = EpisodeKey(job.role, tape.meta.get("suite"), tape.meta.get("task"), job.index,
                     job.seed)
    return Episode(
        key, ret=finite_or_none(tape.total_return), length=tape.length,
        success_at_end=tape.success_at_end, success_once=tape.success_once,
        terminated=bool(tape.terminated[-1]), truncated=bool(tape.truncated[-1]),
        max_reward=finite_or_none(float(np.max(tape.rewards))) if tape.length else None,
        flags=tuple(episode_flags(tape)), metrics=tape.metrics, wall_s=tape.wall_s,
        tape=job.tape_path).to_json()


def episode_flags(tape: Tape) -> list[str]:
    """What was wrong with an episode's numbers: non-finite rewards, a return that is not a
    finite number (also when finite rewards overflow their sum), non-finite actions."""
    flags = []
    if not np.isfinite(tape.rewards).all():
        flags.append("nonfinite_reward")
    if not math.isfinite(tape.total_return):
        flags.append("nonfinite_return")
    actions = tape.actions
    if actions.dtype.kind in "fc" and not np.isfinite(actions).all():
        flags.append("nonfinite_action")
    return flags


def refuse_if_it_cannot_draw(job: PolicyJob, env: Any) -> None:
    """A video was asked for: refuse, before any episode, an env that cannot draw frames
    (or a user's factory that cannot be asked to: it takes no render_mode)."""
    if not job.needs_rgb_array:
        return
    if "rgb_array" not in env.metadata.get("render_modes", []):
        raise UsageError(f"Env '{job.env['id']}' cannot render 'rgb_array' frames, so it "
                         "cannot make a video; drop --video or choose an env that can.")
    if not job.env.get("served"):
        check_render_mode(job.env)


def open_env(spec: dict[str, Any]) -> Any:
    """The env a spec names: built here, or a session on the server of a served spec."""
    if spec.get("served"):
        from rolltape.server.client import RemoteEnv

        return RemoteEnv.connect(spec)
    return make_env(spec)


def save_episode(job: PolicyJob, ep: EpisodeJob, policy: dict[str, Any],
                 fields: dict[str, Any], send: Any) -> None:
    """Save one episode's tape and report its row. A served env's tape stores the local
    spec, so it renders and verifies here like any other."""
    env = {k: v for k, v in job.env.items() if k != "served"}
    tape = Tape(env=env, policy=policy,
                meta=job.episode_meta(ep), **fields)
    tape.save(ep.tape_path)
    send(("episode", episode_row(tape, ep)))


def open_policy_env(job: PolicyJob, first: bool = False) -> tuple[Any, WrappedEnv | None]:
    """(base env, the env through the job's wrappers or None when it has none). The
    ``first`` opening, before any of the job's episodes, is the check of the env's kwargs:
    an env they cannot build (ALE's ``frameskip=0``, ``mode=999``) is bad input, one
    sentence and exit 2 with the run discarded, not a pass 1 that failed."""
    try:
        env = open_env(job.env)
    except (UsageError, OSError, MemoryError):
        raise
    except Exception as exc:
        if not first:
            raise
        raise UsageError(build_refusal(job.env, exc)) from None
    try:
        return env, WrappedEnv.build(env, job.wrappers) if job.wrappers else None
    except BaseException:
        env.close()
        raise


@dataclass
class Opened:
    """A job's env and policy, kept open across pieces. ``wrapped``: the env through the
    job's wrappers (None when it has none); ``more``: ``[env, policy]`` of the further
    sessions of a served env, or of a served policy (each with an env of its own), whose
    episodes play several at once (:mod:`.inflight`)."""

    env: Any
    wrapped: WrappedEnv | None
    policy: Policy
    more: list[list[Any]] = field(default_factory=list)

    def close_more(self) -> None:
        """Close the further sessions (their server's --max-sessions counts them)."""
        while self.more:
            env, policy = self.more.pop()
            env.close()
            if isinstance(policy, ServedPolicy):  # a session of its own (a served env's row;
                policy.close()                    # an AskAhead has closed its own already)

    def close(self) -> None:
        self.close_more()
        (self.wrapped or self.env).close()
        close_policy(self.policy)  # a served policy's session: its server counts it


class OpenJobs:
    """The env and policy of each job a worker has played, kept open for its next piece of
    the same job (:mod:`rolltape.pass1.dealer`): loading a policy again costs 0.2 s or more.
    At most ``keep`` are kept (a suite's tasks come one after another)."""

    def __init__(self, keep: int = 2) -> None:
        self._keep = keep
        self._open: dict[str, Opened] = {}  # (role, job without episodes) -> its Opened

    def get(self, job: PolicyJob, send: Any) -> Opened:
        """``job``'s env and policy, opened (and its policy reported) the first time."""
        role = job.episodes[0].role if job.episodes else None
        key = repr((role, replace(job, episodes=())))  # each role's policy is reported
        for other, kept in self._open.items():
            if other != key:  # a worker holds one job's further sessions at a time
                kept.close_more()
        if key in self._open:
            return self._open[key]
        while len(self._open) >= self._keep:
            self._open.pop(next(iter(self._open))).close()
        env, wrapped = open_policy_env(job, first=True)
        try:
            refuse_if_it_cannot_draw(job, env)
            policy = load_policy(job.policy, wrapped.env if wrapped else env,
                                 vecnormalize=job.vecnormalize, algo=job.algo,
                                 deterministic=job.deterministic)
            if wrapped is not None and isinstance(policy, SB3Policy) and job.episodes:
                try_acting(job, wrapped, policy)
            policy = with_clock(policy, job.clock, wrapped.env if wrapped else env)
        except BaseException:
            (wrapped or env).close()
            raise
        if wrapped is not None:  # stored in every tape and the run's metadata
            policy.description["wrappers"] = wrapped.names
        send(("policy", {"role": role, **policy.description}))
        # What the env is (spaces, control rate, wrappers): the run's protocol card.
        send(("env_facts", {"role": role, **job.extra_meta,
                            **env_facts(env, wrapped.env if wrapped else None,
                                        served=bool(job.env.get("served")))}))
        self._open[key] = Opened(env, wrapped, policy)
        return self._open[key]

    def close(self) -> None:
        while self._open:
            self._open.popitem()[1].close()


def try_acting(job: PolicyJob, wrapped: WrappedEnv, policy: Policy) -> None:
    """Before any episode of a checkpoint behind wrappers: reset the chain once (with the
    first episode's seed, which that episode resets with again) and let the policy act on
    what it gives, so that a chain whose observations the network cannot take (a wrapper
    that declares one shape and returns another) is one sentence before pass 1, not every
    episode failing in it. The chain is built afresh for each episode, the tap restarted."""
    seed = job.episodes[0].seed
    try:
        obs, _ = wrapped.fresh().reset(seed=seed)
        policy.reset(seed)
        policy.act(obs)
    except (UsageError, OSError, MemoryError):
        raise
    except Exception as exc:
        text = (str(exc).strip().splitlines() or [""])[0][:300]
        raise UsageError(f"--policy {job.policy} cannot act on what its wrappers "
                         f"({', '.join(wrapped.names)}) make of env '{job.env['id']}' "
                         f"({type(exc).__name__}: {text}); use the wrappers it was trained "
                         "with.") from None
    finally:
        wrapped.tap.begin(None)


def run_policy_job(job: PolicyJob, send: Any, opened: OpenJobs | None = None) -> None:
    """Run every episode of ``job``; ``send(message)`` reports each finished episode.
    ``opened``: envs and policies kept from earlier pieces (left open); without it, the
    job's env is closed at the end."""
    mine = opened is None
    jobs = opened or OpenJobs()

    def failed(ep: EpisodeJob, exc: Exception) -> None:
        # A suite's indices repeat across tasks: the task says which episode.
        send(("episode_failed", {**job.extra_meta, "role": ep.role, "index": ep.index,
                                 "seed": ep.seed, "error": last_line(exc)}))

    try:
        slot = jobs.get(job, send)
        sessions = in_flight_sessions(job, slot)
        if len(sessions) > 1:
            _play_sessions(job, slot, sessions, send, failed)
            return
        for ep in job.episodes:
            try:
                fields = job.play(slot, ep)
            except (UsageError, OSError, MemoryError):
                raise  # bad input or a broken machine: not this episode's fault
            except Exception as exc:  # the env (or policy) failed this episode alone
                failed(ep, exc)
                (slot.wrapped or slot.env).close()
                # The failed env may be half-way through a call: a new one.
                slot.env, slot.wrapped = open_policy_env(job)
                continue
            save_episode(job, ep, slot.policy.description, fields, send)
    finally:
        if mine:
            jobs.close()


def _play_sessions(job: PolicyJob, opened: Opened, sessions: list[list[Any]], send: Any,
                   failed: Callable[[EpisodeJob, Exception], None]) -> None:
    """Every episode of ``job``, several at once on ``sessions`` (:mod:`.inflight`)."""

    def reopen(s: int, ep: EpisodeJob, exc: Exception) -> None:
        failed(ep, exc)
        slot = sessions[s][0]
        if isinstance(slot, AskAhead):  # a local env (a served policy's episode): a new env
            slot.env.close()  # (the policy opens a new session itself when its call failed)
            slot.env = open_env(job.env)
            if s == 0:
                opened.env = slot.env
            return
        slot.close()  # it may be half-way through a call: a new session
        if s == 0:  # the job's own session (the others are opened.more's rows)
            sessions[0][0] = opened.env = open_env(job.env)
            return
        try:  # a spare again: a client that has no session may need this room more
            sessions[s][0] = opened.env.another()
        except UsageError:  # the server is full now: play on without this slot
            raise SessionReclaimed("the server has no room for a spare session") from None

    def give_up(s: int) -> None:
        """The server gave spare session ``s`` to another client: close it, play on
        without it (a later piece opens spares again while the server has room)."""
        sessions[s][0].close()
        opened.more = [row for row in opened.more if row is not sessions[s]]

    play_in_flight(sessions, job.episodes,
                   lambda env, policy, ep: play_episode(
                       env.env if isinstance(env, AskAhead) else env, policy, ep.seed, None,
                       job.success_key),
                   lambda ep, fields: save_episode(job, ep, opened.policy.description,
                                                   fields, send), reopen, give_up)


def in_flight_sessions(job: PolicyJob, opened: Opened) -> list[list[Any]]:
    """``[env, policy]`` of each session a served job's episodes play on at once
    (:mod:`.inflight`): its first and up to ``job.in_flight - 1`` more, as many as the
    server opens and the policy allows (``Policy.fork``). A served policy on a local env:
    a local env and a policy session each, the env an :class:`AskAhead`. One when it
    cannot: a local env and a local policy, wrappers (they may step the base env several
    times per action), a policy that keeps state across episodes (a served one whose
    server does not say its sessions are independent), a clock."""
    wanted = min(job.in_flight, len(job.episodes))
    served_env = hasattr(opened.env, "another")
    asks = not served_env and hasattr(opened.policy, "ask")  # a ServedPolicy, no clock
    if opened.wrapped is not None or not (served_env or asks):
        wanted = 1
    while len(opened.more) < wanted - 1:
        policy = opened.policy.fork()
        if policy is None:
            break
        if asks:
            try:
                opened.more.append([AskAhead(open_env(job.env), policy), policy])
            except BaseException:
                close_policy(policy)
                raise
            continue
        try:  # a spare: only while the server has room; given up to a client with none
            env = opened.env.another()
        except UsageError:  # the server is busy: play on the sessions it gave
            if policy is not opened.policy:  # a served policy's spare session
                close_policy(policy)
            break
        opened.more.append([env, policy])
    more = opened.more[:wanted - 1]
    first = AskAhead(opened.env, opened.policy) if asks and more else opened.env
    return [[first, opened.policy]] + more


def last_line(exc: BaseException) -> str:
    """'ValueError: boom': the exception's type (an env server's env's own, for
    :class:`EnvRaised`) and the last line of its message."""
    name = exc.kind if isinstance(exc, EnvRaised) else type(exc).__name__
    lines = str(exc).strip().splitlines()
    return f"{name}: {lines[-1]}" if lines else name


def split_jobs(jobs: list[PolicyJob], workers: int) -> list[list[PolicyJob]]:
    """Deal episodes to ``workers`` workers in turn (episode i to worker i mod W), so each
    gets a similar mix of long and short episodes; the jobs of a suite (one per task) are
    dealt as one sequence, so no worker gets more than one episode more than another. Every episode is reset with its own seed
    and acted on alone, so its tape is the same whichever worker plays it."""
    chunks: list[list[PolicyJob]] = [[] for _ in range(workers)]
    dealt = 0  # episodes dealt so far: the next job goes on from the next worker in turn
    for job in jobs:
        for w in range(workers):
            mine = job.episodes[(w - dealt) % workers::workers]
            if mine:
                chunks[w].append(replace(job, episodes=mine))
        dealt += len(job.episodes)
    return [c for c in chunks if c]


def playing(chunk: list[PolicyJob], finished: int) -> str:
    """'policy episode 7 (seed 1007)': what a pass-1 worker that has reported ``finished``
    episodes of ``chunk`` is playing (for the executor's message when it dies or hangs)."""
    ep = next(islice(chain.from_iterable(job.episodes for job in chunk), finished, None), None)
    if ep is None:  # all of its piece reported: it died or hung between pieces
        return "its first episode" if not finished else f"the episode after the {finished} it finished"
    return f"{ep.role} episode {ep.index} (seed {ep.seed})"


def tape_name(role: str, index: int) -> str:
    """File name of an episode's tape inside ``tapes/``."""
    return f"{role}-{index:04d}.npz"
