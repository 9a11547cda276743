"""The option groups several verbs share, each declared once with its defaults, help and
rules: a verb's record is composed from them (dataclass inheritance), so ``--seed`` means
the same, defaults the same and is checked the same wherever it appears.

- :class:`Episodes`: which episodes are played (eval, parity).
- :class:`EnvOptions`: how one env is built (eval, serve, parity).
- :class:`Suite`: a suite instead of one env (eval, serve, parity); :class:`SuiteOptions`
  adds ``tasks``, the tasks of it to play (eval, serve: parity's ``--task`` picks one).
- :class:`Served`: the env server a client steps its envs on (eval, parity; not serve).
- :class:`PolicyFiles`: what loads beside a policy (eval, serve-policy, parity, branch).
- :class:`Listener`: a server's socket and its limits (serve, serve-policy).
- :class:`Reference`: the policy that scores 1 among several (eval, compare).
- :class:`ExecutorChoice`: which executor runs the work (eval, branch); each executor's own
  options are its ``OPTIONS`` record (``rolltape.executors.base.option_records``).
- :class:`RunFolder`: where a verb writes (every verb that writes).
- :class:`RunArgument`: the run folder a verb reads, its argument RUN (export, branch,
  report, view); :class:`Pick`: which of its episodes (export, branch).

:func:`declared` gives a record another record's flag field as it is declared there (the
same names, help and rule), with the verb's own default where it differs.

The render side's groups (how tapes are replayed and drawn) are its own records,
``rolltape.pass2.request.RenderOptions`` and ``ReplayOptions``.

>>> from rolltape.flags import check_flags
>>> @dataclass(frozen=True, kw_only=True)
... class Example(Episodes, RunFolder):
...     def __post_init__(self) -> None:
...         check_flags(self)
>>> Example(episodes=3).seed
0
>>> Example(episodes=0)
Traceback (most recent call last):
rolltape.errors.UsageError: --episodes must be at least 1, got 0.

May import: flags, errors, limits, the standard library. Never: typer, the work.
"""

from __future__ import annotations

from dataclasses import MISSING, Field, dataclass, field, fields
from pathlib import Path
from typing import Any, List, Optional

from rolltape.errors import UsageError
from rolltape.flags import (
    EPISODES,
    OUTPUT,
    POLICY,
    SCALE,
    SERVER,
    at_least,
    flag,
    not_empty,
    parse_kwargs,
)

__all__ = ["Episodes", "EnvOptions", "Suite", "SuiteOptions", "Served", "PolicyFiles", "PolicySource", "Sampling", "Workers",
           "Listener", "Reference", "ExecutorChoice", "RunFolder", "RunArgument", "Pick",
           "declared"]


@dataclass(frozen=True, kw_only=True)
class Episodes:
    """Which episodes are played: ``episodes`` of them, episode i reset with ``seed + i``."""

    episodes: int = flag(10, "Number of episodes.", panel=EPISODES, names=("-n",),
                         rule=at_least(1))
    seed: int = flag(0, "Episode i is reset with seed + i.", panel=EPISODES,
                     rule=at_least(0, why="Gymnasium seeds are unsigned"))


@dataclass(frozen=True, kw_only=True)
class EnvOptions:
    """How one env is built beyond its id."""

    env_kwargs: dict[str, Any] = flag(None, "KEY=VALUE, repeatable.", panel=EPISODES,
                                      factory=dict, cli_type=Optional[List[str]],
                                      cli_default=None, parse=parse_kwargs)
    max_episode_steps: int | None = flag(None, "Override the env's time limit.",
                                         panel=EPISODES, rule=at_least(1))


@dataclass(frozen=True, kw_only=True)
class Suite:
    """A suite of tasks instead of one env (``rolltape.suites``)."""

    suite: str | None = flag(  # a built-in suite's name or a manifest.yaml (rolltape.suites)
        None, "A built-in suite (see `rolltape suites`) or a manifest.yaml, instead of one "
        "env (eval: its manifest's episodes win over --episodes).", panel=EPISODES)


@dataclass(frozen=True, kw_only=True)
class SuiteOptions(Suite):
    """A suite and which of its tasks are played or served."""

    tasks: str | None = flag(None, "With --suite: only these tasks (a,b).", panel=EPISODES)


@dataclass(frozen=True, kw_only=True)
class Served:
    """The env server a client steps its envs on (``serve`` itself has none: it is one)."""

    served: str | None = flag(None, "The env server (`rolltape serve`) at tcp://HOST:PORT: "
                                    "eval steps a --suite's tasks there, parity compares it "
                                    "with the local env.", panel=EPISODES)


@dataclass(frozen=True, kw_only=True)
class PolicyFiles:
    """What loads beside a policy, and how a served policy's chunks are executed."""

    vecnormalize: str | None = flag(None, "VecNormalize statistics (.pkl).", panel=POLICY,
                                    cli_type=Optional[Path], parse=str)
    algo: str | None = flag(None, "SB3 algorithm (detected when omitted).", panel=POLICY)
    execute_steps: int | None = flag(  # folded into a ws:// source (policy_server.wire)
        None, "A served policy (--policy ws://HOST:PORT): execute the first K actions of "
        "each chunk open loop, then ask again (default: the server's metadata, else the "
        "whole chunk).", panel=POLICY, rule=at_least(1))


@dataclass(frozen=True, kw_only=True)
class PolicySource:
    """The policy a verb plays (eval takes several to compare them; parity and branch one).

    >>> PolicySource(policy=("sb3:a.zip",)).one_policy("random")
    'sb3:a.zip'
    """

    policy: tuple[str, ...] = flag(
        (), "random | sb3:PATH.zip | zoo:FOLDER (rl-zoo3) | MODULE:ATTR | FILE.py:ATTR | "
        "ws://HOST:PORT | tape:PATH.npz (its actions); default random (branch: the run's "
        "own). eval: repeat, or a quoted glob of SB3 checkpoints, to compare several on the "
        "same seeds.", panel=POLICY, names=("--policy", "-p"), cli_type=Optional[List[str]],
        cli_default=None, parse=tuple)

    def one_policy(self, default: str | None) -> str | None:
        """The one policy of a verb that plays one (``default`` when none was given)."""
        given = (self.policy,) if isinstance(self.policy, str) else tuple(self.policy)
        if len(given) > 1:
            raise UsageError(f"--policy names one policy here, not {len(given)}; compare "
                             "several with `rolltape eval --policy A --policy B`.")
        return given[0] if given else default


@dataclass(frozen=True, kw_only=True)
class Sampling:
    """Whether a policy takes its deterministic actions or samples them (eval,
    serve-policy); unset: deterministic, but for a zoo: Atari folder (rl-zoo3's enjoy.py
    samples those)."""

    deterministic: bool | None = flag(
        None, "Deterministic (--deterministic) or sampled (--stochastic) actions; default "
        "deterministic, but a zoo: Atari folder's are sampled as rl-zoo3's enjoy.py samples "
        "them.", panel=POLICY, names=("--deterministic/--stochastic",))


@dataclass(frozen=True, kw_only=True)
class Listener:
    """A server's socket and the limits it keeps for every client."""

    bind: str | None = flag(  # each server's own port: openpi's clients knock on 8000
        None, "HOST:PORT to listen on (port 0: any free port; default 127.0.0.1:7450 for "
        "serve, :8000 for serve-policy as openpi's clients expect); anything but loopback "
        "needs --token-file.", panel=SERVER)
    token_file: str | None = flag(None, "File holding the token clients must send (they set "
                                  "ROLLTAPE_TOKEN_FILE).", panel=SERVER,
                                  cli_type=Optional[Path], parse=str)
    max_sessions: int = flag(8, "Sessions (connections) served at once.", panel=SERVER,
                             rule=at_least(1))
    max_payload: int = flag(64 * 2**20, "Largest message accepted, in bytes.", panel=SERVER,
                            rule=at_least(1024, "bytes"))


@dataclass(frozen=True, kw_only=True)
class Reference:
    """Which of several policies compared on the same seeds scores 1 (eval, compare)."""

    reference: str | None = flag(None, "Of several policies (runs): the one, by folder name, "
                                 "that scores 1 in the normalized aggregates; random scores "
                                 "0.", panel=POLICY)


@dataclass(frozen=True, kw_only=True)
class ExecutorChoice:
    """Which registered executor plays the work (``rolltape.executors``)."""

    executor: str = flag("local", "local (process pool) or ray.", panel=SCALE)


@dataclass(frozen=True, kw_only=True)
class Workers:
    """How many worker processes a verb starts. Unset: one per CPU core (render, verify,
    export, branch); eval's pass 1 takes 1 unless given (each process loads the policy)."""

    workers: int | None = flag(
        None, "Worker processes: one per CPU core unless given (eval's pass 1: 1, each loads "
        "the policy; its replays: --render-workers). Tapes are the same for any count; a "
        "long video is split across render processes.", panel=SCALE, names=("-w",))


@dataclass(frozen=True, kw_only=True)
class RunFolder:
    """Where a verb writes, and how it behaves there. ``out`` is unset by default: each
    verb's help says where it writes then."""

    out: str | None = flag(None, "Where to write (the default is in the verb's help).",
                           panel=OUTPUT, names=("--out", "-o"), rule=not_empty())
    overwrite: bool = flag(False, "Replace what is already there.", panel=OUTPUT)
    quiet: bool = flag(False, "No progress bars.", panel=OUTPUT, names=("--quiet", "-q"))


@dataclass(frozen=True, kw_only=True)
class RunArgument:
    """The run folder a verb reads: its first argument, RUN (the Python API may give a
    loaded ``rolltape.record.Run`` where a verb's work takes one, as export's does)."""

    run: Any = flag(MISSING, "A run folder (what `rolltape eval` wrote).", panel=OUTPUT,
                    argument=True, cli_type=Path, parse=str)


@dataclass(frozen=True, kw_only=True)
class Pick:
    """Which of a run's episodes a verb takes: what ``--video`` takes
    (``rolltape.video_pick.VideoPick``), here under its own name (``--episodes`` is a
    count)."""

    pick: Any = flag("all", "Which episodes: N (the first N), all, best, worst, median "
                     "(best:3: several) or indices 0,3,7.", panel=EPISODES, cli_type=str)


def declared(record: type, name: str, default: Any = MISSING) -> Any:
    """``record``'s flag field ``name``, for another record: the flag declared once, where
    ``record`` declares it; ``default``: this verb's own, where it differs (branch picks
    worst:3 where export picks all)."""
    spec: Field[Any] = next(f for f in fields(record) if f.name == name)
    if default is MISSING:
        default = spec.default
    if default is MISSING and spec.default_factory is not MISSING:
        return field(default_factory=spec.default_factory, metadata=spec.metadata)
    return field(default=default, metadata=spec.metadata)
