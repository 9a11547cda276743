"""The record of a run: one typed description of what a run played, rendered and found.

Every output of a run (the CLI summary, ``report.html``, ``report.ipynb``, ``compare``,
suites, exports, the training timeline) reads a :class:`Run`; none rebuilds an episode's
identity from a dict. An episode is named by its :class:`EpisodeKey` (role, suite, task,
index, seed) everywhere it is matched: a policy episode and its baseline are the same key
with another role, and a video names the episode it shows by the same key.

``results.json`` and ``metadata.json`` are :meth:`Run.write`'s files; :meth:`Run.load`
reads them back and refuses, in one sentence, a folder that is not a run or a value of the
wrong type, so a damaged or hand-edited file never reaches a chart as a traceback.

Success has one vocabulary: ``success_at_end`` (the success key was true on the terminal
step: what LeRobot's own ``rollout`` + ``eval_policy`` count) and ``success_once`` (true at
some step: ManiSkill's name, Meta-World's metric). Both are kept for every episode (None
when the env never reported the key); a run's headline rate uses its ``success_rule``
(``at_end`` unless the user or the suite's manifest chose ``once``) and reports the other
rule beside it.

May import: stats, files, errors. Never: gymnasium, policies, pass 1, pass 2, executors,
outputs.

Example:
    >>> key = EpisodeKey("policy", "mazes", "umaze", 3, 1003)
    >>> key.label, key.counterpart("baseline").role
    ('mazes/umaze episode 3 (seed 1003)', 'baseline')
    >>> ep = Episode(key, ret=1.5, length=10, success_at_end=False, success_once=True)
    >>> ep.success("at_end"), ep.success("once")
    (False, True)
    >>> Episode.from_json(ep.to_json()) == ep
    True
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, overload

from rolltape.errors import UsageError
from rolltape.files import write_json
from rolltape.tape import finite_or_none

__all__ = ["SCHEMA_VERSION", "SUCCESS_RULES", "Episode", "EpisodeKey", "Metadata", "Results",
           "Run", "Summary", "Video", "check_success_rule"]

SCHEMA_VERSION = 2  # 2: success_at_end and success_once, one record of a run
SUCCESS_RULES = ("at_end", "once")
_HINT = "give the folder that `rolltape eval` wrote."


def check_success_rule(rule: Any, where: str = "--success") -> str:
    """``rule`` if it is one of :data:`SUCCESS_RULES`, else a UsageError naming them."""
    if rule not in SUCCESS_RULES:
        raise UsageError(f"{where} must be 'at_end' (the success key on the terminal step, "
                         f"LeRobot's rule) or 'once' (at some step), got {str(rule)[:80]!r}.")
    return str(rule)


class _Bad(Exception):
    """A value of a results file that is not what it must be (turned into a UsageError)."""


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise _Bad(what)


@overload  # a required integer is an int; an optional one may be None
def _int(v: Any, what: str) -> int: ...
@overload
def _int(v: Any, what: str, optional: bool) -> int | None: ...
def _int(v: Any, what: str, optional: bool = False) -> int | None:
    if v is None and optional:
        return None
    _need(isinstance(v, int) and not isinstance(v, bool), f"{what} must be an integer")
    return int(v)


def _num(v: Any, what: str) -> float | None:
    """A finite number or None (JSON has no NaN: rolltape writes a non-finite value as null)."""
    if v is None:
        return None
    _need(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
          f"{what} must be a finite number or null")
    return float(v)


def _flag(v: Any, what: str) -> bool | None:
    _need(v is None or isinstance(v, bool), f"{what} must be true, false or null")
    return v


def _text(v: Any, what: str, optional: bool = True) -> str | None:
    if v is None and optional:
        return None
    _need(isinstance(v, str), f"{what} must be a string")
    return str(v)


def _dict(v: Any, what: str) -> dict[str, Any] | None:
    _need(v is None or isinstance(v, dict), f"{what} must be an object or null")
    return v


def _list(v: Any, what: str) -> list[Any]:
    _need(isinstance(v, list), f"{what} must be a list")
    return v


@dataclass(frozen=True, order=True)
class EpisodeKey:
    """Which episode: the role that played it, its suite and task (None for one env), its
    index within the task and the seed its reset was given. Two runs' episodes, or a policy
    episode and its baseline, are paired by :attr:`pairing` (task and seed)."""

    role: str
    suite: str | None
    task: str | None
    index: int
    seed: int

    @property
    def task_key(self) -> tuple[str | None, str | None]:
        """(suite, task): the task the episode belongs to ((None, None) for one env)."""
        return (self.suite, self.task)

    @property
    def task_name(self) -> str | None:
        """'mazes/umaze', or None for one env."""
        return f"{self.suite}/{self.task}" if self.suite is not None else None

    @property
    def pairing(self) -> tuple[str | None, str | None, int]:
        """(suite, task, seed): what an episode of another run or role is matched by."""
        return (self.suite, self.task, self.seed)

    @property
    def label(self) -> str:
        """'episode 3 (seed 1003)', with the task first for a suite's episode."""
        where = f"{self.task_name} " if self.task_name else ""
        return f"{where}episode {self.index} (seed {self.seed})"

    @property
    def anchor(self) -> str:
        """A page id: '3' for one env's episode 3, 'mazes-umaze-3' for a suite's."""
        return "-".join(str(k) for k in (self.suite, self.task, self.index) if k is not None)

    def counterpart(self, role: str) -> EpisodeKey:
        """The same task, index and seed played by ``role`` (the baseline of an episode)."""
        return replace(self, role=role)

    def to_json(self) -> dict[str, Any]:
        row: dict[str, Any] = {"role": self.role, "index": self.index, "seed": self.seed}
        if self.suite is not None:
            row.update(suite=self.suite, task=self.task)
        return row

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> EpisodeKey:
        suite = _text(row.get("suite"), "suite")
        task = _text(row.get("task"), "task")
        _need((suite is None) == (task is None), "suite and task must be given together")
        index = _int(row.get("index"), "index")
        seed = _int(row.get("seed"), "seed")
        _need(index >= 0 and seed >= 0, "index and seed must be 0 or more")
        return cls(_text(row.get("role"), "role", optional=False) or "", suite, task,
                   index, seed)


@dataclass(frozen=True)
class Episode:
    """One episode as pass 1 played it (a line of ``episodes.jsonl``). ``ret`` is its
    return (None when not a finite number; ``flags`` says why), ``tape`` its tape's path
    relative to the run folder."""

    key: EpisodeKey
    ret: float | None
    length: int
    success_at_end: bool | None = None
    success_once: bool | None = None
    terminated: bool = False
    truncated: bool = False
    max_reward: float | None = None
    flags: tuple[str, ...] = ()
    metrics: Mapping[str, Any] | None = None
    wall_s: float = 0.0
    tape: str = ""

    def success(self, rule: str) -> bool | None:
        """Whether the episode succeeded by ``rule`` ('at_end' or 'once')."""
        return self.success_at_end if rule == "at_end" else self.success_once

    def to_json(self) -> dict[str, Any]:
        return {**self.key.to_json(), "return": self.ret, "length": self.length,
                "success_at_end": self.success_at_end, "success_once": self.success_once,
                "terminated": self.terminated, "truncated": self.truncated,
                "max_reward": self.max_reward, "flags": list(self.flags),
                "metrics": self.metrics, "wall_s": self.wall_s, "tape": self.tape}

    @classmethod
    def from_json(cls, row: Any) -> Episode:
        _need(isinstance(row, dict), "an episode must be an object")
        flags = _list(row.get("flags", []), "flags")
        _need(all(isinstance(f, str) for f in flags), "flags must be strings")
        length = _int(row.get("length"), "length")
        _need(length >= 0, "length must be 0 or more")
        return cls(
            key=EpisodeKey.from_json(row), ret=_num(row.get("return"), "return"),
            length=length,
            success_at_end=_flag(row.get("success_at_end"), "success_at_end"),
            success_once=_flag(row.get("success_once"), "success_once"),
            terminated=bool(_flag(row.get("terminated", False), "terminated")),
            truncated=bool(_flag(row.get("truncated", False), "truncated")),
            max_reward=_num(row.get("max_reward"), "max_reward"), flags=tuple(flags),
            metrics=_dict(row.get("metrics"), "metrics"),
            wall_s=_num(row.get("wall_s", 0.0), "wall_s") or 0.0,
            tape=_text(row.get("tape", ""), "tape", optional=False) or "")


@dataclass(frozen=True)
class Video:
    """A rendered episode: the episode it shows (``key``), its files (``paths``, relative to
    the run folder; empty when it could not be rendered, with ``error`` saying why),
    whether its replay earned exactly what pass 1 earned (``verified``: None when it was
    drawn from recorded states), and what pass 2 reported (``detail``: backend, frames,
    divergence, cameras, ...)."""

    key: EpisodeKey
    tape: str
    paths: tuple[str, ...] = ()
    verified: bool | None = None
    error: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)

    @property
    def path(self) -> str | None:
        """The first file (what the report plays), or None when nothing was rendered."""
        return self.paths[0] if self.paths else None

    def get(self, name: str, default: Any = None) -> Any:
        """One of pass 2's facts about the video (``frames``, ``backend``, ``mode``, ...)."""
        return self.detail.get(name, default)

    def to_json(self) -> dict[str, Any]:
        return {**self.detail, **self.key.to_json(), "tape": self.tape, "path": self.path,
                "paths": list(self.paths), "verified": self.verified, "error": self.error}

    @classmethod
    def from_json(cls, row: Any) -> Video:
        _need(isinstance(row, dict), "a video must be an object")
        paths = _list(row.get("paths") or ([row["path"]] if row.get("path") else []), "paths")
        _need(all(isinstance(p, str) for p in paths), "a video's paths must be strings")
        own = {"role", "index", "seed", "suite", "task", "tape", "path", "paths", "verified",
               "error"}
        return cls(EpisodeKey.from_json({"role": "policy", **row}),
                   _text(row.get("tape", ""), "tape", optional=False) or "", tuple(paths),
                   _flag(row.get("verified"), "verified"), _text(row.get("error"), "error"),
                   {k: v for k, v in row.items() if k not in own})


_STATS = ("n", "mean", "std", "min", "max", "median", "iqm", "iqm_ci", "mean_ci")


@dataclass(frozen=True)
class Summary:
    """One role's numbers over its episodes with a finite return (``n`` of ``episodes``):
    return statistics (IQM with its bootstrap 95% interval), the headline success count,
    rate and 95% Wilson interval by ``success_rule`` ('at_end', 'once', or 'per task' when a
    suite's tasks chose differently), and both rules' numbers named beside it
    (``success_at_end``, ``success_once``: ``{"count", "known", "rate", "ci"}``)."""

    n: int
    episodes: int
    nonfinite_returns: int = 0
    mean: float | None = None
    std: float | None = None
    min: float | None = None
    max: float | None = None
    median: float | None = None
    iqm: float | None = None
    iqm_ci: tuple[float, float] | None = None
    mean_ci: tuple[float, float] | None = None
    mean_length: float | None = None
    success_rule: str = "at_end"
    success_count: int | None = None
    success_known: int = 0
    success_rate: float | None = None
    success_ci: tuple[float, float] | None = None
    success_at_end: Mapping[str, Any] | None = None
    success_once: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, episodes: Sequence[Episode],
           rules: str | Mapping[tuple[str | None, str | None], str] = "at_end") -> Summary:
        """The summary of ``episodes``, success counted by ``rules`` (one rule, or one per
        task: (suite, task) to rule)."""

        def rule_of(e: Episode) -> str:
            return rules if isinstance(rules, str) else rules.get(e.key.task_key, "at_end")

        finite = [e for e in episodes if e.ret is not None]
        numbers: dict[str, Any] = {"n": 0}
        if finite:
            numbers = return_stats([r for e in finite if (r := e.ret) is not None])
            numbers["iqm_ci"] = tuple(numbers["iqm_ci"]) if numbers["iqm_ci"] else None
            numbers["mean_ci"] = tuple(numbers["mean_ci"]) if numbers["mean_ci"] else None
        used = {rule_of(e) for e in episodes} or {rules if isinstance(rules, str) else "at_end"}
        head = _success([e.success(rule_of(e)) for e in finite])
        return cls(episodes=len(episodes), nonfinite_returns=len(episodes) - len(finite),
                   mean_length=(sum(e.length for e in episodes) / len(episodes)
                                if episodes else None),
                   success_rule=used.pop() if len(used) == 1 else "per task",
                   success_count=head["count"], success_known=head["known"],
                   success_rate=head["rate"],
                   success_ci=tuple(head["ci"]) if head["ci"] else None,
                   success_at_end=_success([e.success_at_end for e in finite]),
                   success_once=_success([e.success_once for e in finite]), **numbers)

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("iqm_ci", "mean_ci", "success_ci"):
            out[name] = list(out[name]) if out[name] is not None else None
        for name in ("success_at_end", "success_once"):
            out[name] = dict(out[name]) if out[name] is not None else None
        return out

    @classmethod
    def from_json(cls, row: Any) -> Summary:
        _need(isinstance(row, dict), "a summary must be an object")
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            value = row.get(f.name)
            if f.name in ("iqm_ci", "mean_ci", "success_ci"):
                _need(value is None or (isinstance(value, list) and len(value) == 2),
                      f"{f.name} must be a pair of numbers or null")
                value = tuple(_num(v, f.name) for v in value) if value else None
            elif f.name in ("n", "episodes", "nonfinite_returns", "success_known"):
                value = _int(value if value is not None else 0, f.name)
            elif f.name == "success_count":
                value = _int(value, f.name, optional=True)
            elif f.name == "success_rule":
                value = value or "at_end"
                _need(value in (*SUCCESS_RULES, "per task"),
                      "success_rule must be at_end, once or per task")
            elif f.name in ("success_at_end", "success_once"):
                value = _dict(value, f.name)
            else:
                value = _num(value, f.name)
            kwargs[f.name] = value
        return cls(**kwargs)


def return_stats(returns: Sequence[float]) -> dict[str, Any]:
    """n, mean, std, min, max, median, IQM and the bootstrap 95% intervals of finite
    returns (:func:`rolltape.stats.summarize`). Returns near the float limit, whose mean
    overflows, keep what can be said (n, min, max, median); the rest is None."""
    import numpy as np

    from rolltape import stats

    with np.errstate(over="ignore", invalid="ignore"):
        try:
            return finite_numbers({k: v for k, v in stats.summarize(returns).to_dict().items()
                                   if k in _STATS})
        except ValueError:  # a statistic overflowed on the data or on a resample
            arr = np.asarray(returns, dtype=float)
            return {**dict.fromkeys(_STATS), "n": int(arr.size), "min": float(arr.min()),
                    "max": float(arr.max()), "median": finite_or_none(float(np.median(arr)))}


def finite_numbers(numbers: Mapping[str, Any]) -> dict[str, Any]:
    """``numbers`` with a statistic that is not finite (the mean of returns near the float
    limit overflows) as None, and an interval with such an end as None: JSON has neither."""
    out: dict[str, Any] = {}
    for name, value in numbers.items():
        if isinstance(value, float):
            value = finite_or_none(value)
        elif isinstance(value, (list, tuple)) and any(
                isinstance(v, float) and not math.isfinite(v) for v in value):
            value = None
        out[name] = value
    return out


def _success(flags: Sequence[bool | None]) -> dict[str, Any]:
    """Count, known, rate and Wilson 95% interval of some success flags (an episode whose
    env did not say, None, is left out of the rate, not counted as a failure)."""
    from rolltape import stats

    known = [f for f in flags if f is not None]
    if not known:
        return {"count": None, "known": 0, "rate": None, "ci": None}
    count = sum(known)
    return {"count": count, "known": len(known), "rate": count / len(known),
            "ci": list(stats.wilson_interval(count, len(known)))}


@dataclass(frozen=True)
class Results:
    """``results.json``: what the run measured. Every number comes from pass 1's episodes;
    ``videos`` are pass 2's. A suite run also has its resolved ``manifest`` and ``suite``
    (per task, per suite and overall, as :mod:`rolltape.suites.results` computes them)."""

    env_id: str
    env: Mapping[str, Any] | None
    policy: Mapping[str, Any] | None
    n_episodes: int
    seed: int
    summary: Mapping[str, Summary]
    episodes: tuple[Episode, ...]
    baseline: tuple[Episode, ...] = ()
    improvement_over_baseline: Mapping[str, Any] | None = None
    failed: tuple[Mapping[str, Any], ...] = ()
    videos: tuple[Video, ...] = ()
    warnings: tuple[str, ...] = ()
    success_rule: str = "at_end"  # 'per task' when a suite's tasks chose differently
    manifest: Mapping[str, Any] | None = None
    suite: Mapping[str, Any] | None = None

    @property
    def roles(self) -> list[str]:
        return list(self.summary)

    def of_role(self, role: str) -> tuple[Episode, ...]:
        return self.episodes if role == "policy" else self.baseline if role == "baseline" \
            else ()

    @property
    def all_episodes(self) -> tuple[Episode, ...]:
        return self.episodes + self.baseline

    @cached_property  # read per task and per chart: built once
    def by_key(self) -> dict[EpisodeKey, Episode]:
        return {e.key: e for e in self.all_episodes}

    def rule_of(self, task: tuple[str | None, str | None]) -> str:
        """The headline success rule of ``task``: the run's, or for a suite whose tasks
        chose differently ('per task'), that task's own (its resolved manifest's)."""
        if self.success_rule != "per task":
            return self.success_rule
        for t in (self.manifest or {}).get("tasks") or []:
            if (t.get("suite"), t.get("name")) == task:
                return str(t.get("success") or "at_end")
        return "at_end"

    @property
    def tasks(self) -> list[tuple[str | None, str | None]]:
        """The tasks of the run in the order their episodes come ([(None, None)] for one env)."""
        return list(dict.fromkeys(e.key.task_key for e in self.all_episodes)) or [(None, None)]

    @property
    def is_suite(self) -> bool:
        return self.suite is not None

    @property
    def diverged(self) -> list[Video]:
        return [v for v in self.videos if v.verified is False]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION, "env_id": self.env_id, "env": self.env,
            "policy": self.policy, "episodes": self.n_episodes, "seed": self.seed,
            "success_rule": self.success_rule,
            "summary": {role: s.to_json() for role, s in self.summary.items()},
            "improvement_over_baseline": self.improvement_over_baseline,
            "episodes_rows": [e.to_json() for e in self.episodes],
            "baseline_rows": [e.to_json() for e in self.baseline],
            "failed_episodes": [dict(f) for f in self.failed],
            "videos": [v.to_json() for v in self.videos], "warnings": list(self.warnings)}
        if self.suite is not None:
            out.update(manifest=self.manifest, suite=self.suite)
        return out

    @classmethod
    def from_json(cls, data: Any) -> Results:
        _need(isinstance(data, dict), "it is not a JSON object")
        episodes = tuple(Episode.from_json(r) for r in _list(data.get("episodes_rows"),
                                                                 "episodes_rows"))
        _need(bool(episodes), "episodes_rows must hold at least one episode")
        baseline = tuple(Episode.from_json(r) for r in _list(data.get("baseline_rows") or [],
                                                                 "baseline_rows"))
        for role, eps in (("policy", episodes), ("baseline", baseline)):
            _need(all(e.key.role == role for e in eps), f"every {role} row must say role "
                                                        f"'{role}'")
            keys = [e.key.pairing for e in eps]
            _need(len(set(keys)) == len(keys), f"two {role} episodes have the same task and "
                                               "seed")
        summary = data.get("summary")
        _need(isinstance(summary, dict) and "policy" in summary,
              "summary must be an object with the policy's numbers")
        failed = _list(data.get("failed_episodes") or [], "failed_episodes")
        _need(all(isinstance(f, dict) for f in failed), "failed_episodes must be objects")
        warnings = _list(data.get("warnings") or [], "warnings")
        rule = data.get("success_rule", "at_end")
        _need(rule in (*SUCCESS_RULES, "per task"), "success_rule must be at_end, once or "
                                                    "per task")
        manifest = _dict(data.get("manifest"), "manifest")
        _need(manifest is None or (isinstance(manifest.get("tasks"), list) and all(
            isinstance(t, dict) and isinstance(t.get("suite"), str)
            and isinstance(t.get("name"), str) for t in manifest["tasks"])),
            "manifest must list its tasks, each with a suite and a name")
        suite = _dict(data.get("suite"), "suite")
        _need(suite is None or all(isinstance(suite.get(k), t) for k, t in
                                   (("per_task", list), ("per_suite", dict),
                                    ("overall", dict))),
              "suite must hold per_task, per_suite and overall")
        return cls(
            env_id=_text(data.get("env_id"), "env_id", optional=False) or "",
            env=_dict(data.get("env"), "env"), policy=_dict(data.get("policy"), "policy"),
            n_episodes=_int(data.get("episodes", len(episodes)), "episodes") or 0,
            seed=_int(data.get("seed", 0), "seed") or 0,
            summary={str(role): Summary.from_json(s) for role, s in summary.items()},
            episodes=episodes, baseline=baseline,
            improvement_over_baseline=_dict(data.get("improvement_over_baseline"),
                                            "improvement_over_baseline"),
            failed=tuple(failed), videos=tuple(Video.from_json(v) for v in _list(
                data.get("videos") or [], "videos")),
            warnings=tuple(str(w) for w in warnings), success_rule=rule,
            manifest=manifest, suite=suite)


@dataclass(frozen=True)
class Metadata(Mapping[str, Any]):
    """``metadata.json``: provenance of the run (command, versions, platform, the config,
    checkpoint sha256, seeds, render backends, timings, warnings), read-only. Its facts
    are free-form by nature (versions and platform differ per machine), so it reads as a
    mapping, with the facts outputs rely on as properties. Read leniently: a run whose
    metadata is missing or damaged still has its numbers."""

    facts: Mapping[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        return self.facts[name]

    def __iter__(self) -> Any:
        return iter(self.facts)

    def __len__(self) -> int:
        return len(self.facts)

    @property
    def config(self) -> Mapping[str, Any]:
        value = self.facts.get("config")
        return value if isinstance(value, dict) else {}

    @property
    def timings(self) -> Mapping[str, float]:
        value = self.facts.get("timings")
        return value if isinstance(value, dict) else {}

    def to_json(self) -> dict[str, Any]:
        return dict(self.facts)

    @classmethod
    def from_json(cls, data: Any) -> Metadata:
        return cls(data if isinstance(data, dict) else {})


@dataclass(frozen=True)
class Run:
    """A run: its folder, its :class:`Results` and its :class:`Metadata` (``metadata`` is
    None when ``metadata.json`` is missing or unreadable: the numbers stand on their own)."""

    path: Path
    results: Results
    metadata: Metadata | None = None

    @property
    def diverged(self) -> list[Video]:
        return self.results.diverged

    def tape_path(self, episode: Episode | Video) -> Path:
        """Where an episode's tape is (``tape`` is relative to the run folder)."""
        return self.path / episode.tape

    def write(self, path: str | os.PathLike[str] | None = None) -> Run:
        """Write ``results.json`` and ``metadata.json`` (atomically) into ``path`` (default:
        the run's folder); return the run as it lives there."""
        root = Path(path) if path is not None else self.path
        write_json(root / "results.json", self.results.to_json())
        if self.metadata is not None:
            write_json(root / "metadata.json", self.metadata.to_json())
        return replace(self, path=root)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Run:
        """The run in folder ``path`` (or the folder of a ``results.json``); a folder that
        is not a run, or a value of the wrong type, is one UsageError."""
        root = Path(path)
        if root.is_file() and root.name == "results.json":
            root = root.parent
        if not root.is_dir():
            raise UsageError(f"'{root}' is not a rolltape run (no such folder); {_HINT}")
        data = _read_json(root / "results.json", root)
        version = data.get("schema_version") if isinstance(data, dict) else None
        if version is None:
            raise UsageError(f"'{root}' is not a rolltape run (results.json has no "
                             f"schema_version); {_HINT}")
        if version != SCHEMA_VERSION:
            raise UsageError(f"'{root}' is not a rolltape run this version can read (results.json "
                             f"schema {str(version)[:20]!r}, this rolltape reads schema "
                             f"{SCHEMA_VERSION}); report it with the rolltape that wrote it.")
        try:
            results = Results.from_json(data)
        except (_Bad, UsageError) as exc:
            raise UsageError(f"'{root}' is not a complete rolltape run (results.json: "
                             f"{exc}); {_HINT}") from None
        metadata = None
        try:
            metadata = Metadata.from_json(json.loads((root / "metadata.json").read_text()))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            pass
        return cls(root, results, metadata)


def _read_json(path: Path, root: Path) -> Any:
    if not path.is_file():
        raise UsageError(f"'{root}' is not a rolltape run (no {path.name}); {_HINT}")
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "it is not valid JSON"
        raise UsageError(f"'{root}' is not a rolltape run ({path.name} cannot be read: "
                         f"{why}); {_HINT}") from None


def episodes_of(rows: Iterable[Any], what: str) -> list[Episode]:
    """Rows (as ``episodes.jsonl`` holds them) as episodes; a bad row is a UsageError
    naming ``what`` it came from."""
    try:
        return [Episode.from_json(r) for r in rows]
    except _Bad as exc:
        raise UsageError(f"{what}: an episode row is damaged ({exc}); rerun the eval.") \
            from None


def group_by(episodes: Iterable[Episode], key: Callable[[Episode], Any]) -> dict[Any, list[Episode]]:
    """Episodes grouped by ``key`` (first appearance order)."""
    out: dict[Any, list[Episode]] = {}
    for e in episodes:
        out.setdefault(key(e), []).append(e)
    return out
