"""Suite manifests: a YAML file of suites, each a set of named tasks, each an env.

```yaml
mazes:                       # a suite
  episodes: 20               # optional: the default of its tasks (else --episodes)
  success_key: success       # optional: the info key that says success (is_success)
  success: at_end            # optional: the headline rule, at_end (LeRobot's) or once
  tasks:
    umaze:                   # a task: an env and how to run it
      env: gymnasium_robotics:PointMaze_UMaze-v3   # a Gymnasium id, MODULE:EnvId,
      kwargs: {continuing_task: false}             # MODULE:factory or FILE.py:factory
      max_episode_steps: 100
      reward_atol: 0.0       # replays verify rewards exactly unless the env is not exact
    medium: gymnasium_robotics:PointMaze_Medium-v3  # shorthand: just the env
```

Episode *i* of every task is reset with seed ``seed + i`` (the same seeds across tasks),
so any episode replays alone. A manifest is data: reading it imports nothing and runs
nothing; its env code runs only when the user evaluates the suite they named. A
``FILE.py:factory`` path is relative to the manifest's folder. Names of suites and tasks
become folders (``tapes/<suite>/<task>/``), so they are plain words.

May import: errors, PyYAML. Never: gymnasium, policies, pass 1, pass 2, executors, outputs.

Example:
    >>> m = parse_manifest({"nav": {"tasks": {"a": "CartPole-v1"}}}, "inline")
    >>> [(t.suite, t.name, t.env, t.success_key) for t in m.tasks]
    [('nav', 'a', 'CartPole-v1', 'is_success')]
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from rolltape.errors import UsageError

SUITE_KEYS = ("tasks", "episodes", "success_key", "success", "max_episode_steps",
              "reward_atol", "description")
TASK_KEYS = ("env", "kwargs", "episodes", "success_key", "success", "max_episode_steps",
             "reward_atol", "description")
DEFAULT_SUCCESS_KEY = "is_success"  # LeRobot's; Gymnasium-Robotics reports "success"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Task:
    """One task of a suite, resolved: suite defaults applied, a file path made absolute."""

    suite: str
    name: str
    env: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    max_episode_steps: int | None = None
    success_key: str | None = DEFAULT_SUCCESS_KEY  # None: the env reports no success
    # The headline rule: "at_end" (the key on the terminal step, LeRobot's) or "once" (at
    # some step); None: the run's --success. Both are always reported.
    success: str | None = None
    episodes: int | None = None  # None: the run's --episodes
    reward_atol: float = 0.0  # replays verify rewards to this (an env not exact to the bit)
    description: str | None = None

    @property
    def key(self) -> str:
        """'suite/task', how results and --tasks name it."""
        return f"{self.suite}/{self.name}"


@dataclass(frozen=True)
class Manifest:
    """The suites of one manifest, as tasks in the manifest's order."""

    source: str  # the file, or 'built-in suite NAME'
    tasks: tuple[Task, ...]

    @property
    def suites(self) -> list[str]:
        return list(dict.fromkeys(t.suite for t in self.tasks))

    def to_dict(self) -> dict[str, Any]:
        """The resolved manifest, as a run records it (manifest.json, config.json)."""
        return {"source": self.source, "tasks": [asdict(t) for t in self.tasks]}


class _Mapping(dict[Any, Any]):  # YAML keys may be any scalar: checked later
    """A YAML mapping that remembers the keys it saw twice (YAML itself keeps the last)."""

    duplicates: tuple[str, ...] = ()


MAX_BYTES = 1 << 20  # a manifest of a thousand tasks is ~100 KB
MAX_NODES = 100_000  # values in the document with every alias expanded (a bomb: 9**9)


class YAMLTooLarge(Exception):
    """The document is over a cap; the message ends the sentence 'Suite manifest X ...'
    (or a zoo folder's 'FILE ...': rolltape.zoo reads its YAML with the same caps)."""


def capped_loader() -> type:
    import yaml

    class Loader(yaml.SafeLoader):
        """SafeLoader that counts, while composing (before anything is built or walked),
        the values the document holds with its aliases expanded, and refuses more than
        MAX_NODES or an alias of a value inside itself (a structure with no end)."""

        def __init__(self, stream: Any) -> None:
            super().__init__(stream)
            self.expanded = 0
            self.sizes: dict[int, int] = {}  # id(node): its values, aliases expanded

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                anchor = self.peek_event().anchor
                node = super().compose_node(parent, index)
                if id(node) not in self.sizes:
                    raise YAMLTooLarge(f"uses the alias *{_cut(str(anchor))} inside the value it "
                                    "names (a structure without end); write the value out.")
                self.expanded += self.sizes[id(node)]
            else:
                start = self.expanded
                node = super().compose_node(parent, index)
                self.expanded += 1
                self.sizes[id(node)] = self.expanded - start
            if self.expanded > MAX_NODES:
                raise YAMLTooLarge(f"expands its aliases to more than {MAX_NODES:,} values; "
                                "write the values out, or use fewer aliases of aliases.")
            return node

        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            mapping = _Mapping(super().construct_mapping(node, deep=deep))
            keys = [self.construct_object(k, deep=deep) for k, _ in node.value]
            mapping.duplicates = tuple(str(k) for i, k in enumerate(keys) if k in keys[:i])
            return mapping

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                           Loader.construct_mapping)
    return Loader


def _cut(text: str, limit: int = 100) -> str:
    """At most a line's worth of user data for a message (a name can be megabytes).

    >>> _cut("x" * 500)[-4:], len(_cut("x" * 500))
    ('xxx…', 100)
    """
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _shown(value: Any) -> str:
    """``repr`` of user data, bounded however deep or long it is (reprlib stops early)."""
    import reprlib

    return _cut(reprlib.repr(value))


def load_manifest(path: str | Path) -> Manifest:
    """Read and check a manifest file; every problem is one sentence (UsageError)."""
    import yaml

    file = Path(path)
    if not file.is_file():
        raise UsageError(f"Suite manifest '{path}' does not exist; give the path of a YAML "
                         "file or a built-in suite name (see `rolltape suites`).")
    try:
        size = file.stat().st_size
        if size > MAX_BYTES:
            raise YAMLTooLarge(f"is {size:,} bytes, more than a manifest needs "
                            f"({MAX_BYTES:,} at most); split it into several.")
        text = file.read_text(encoding="utf-8")
        data = yaml.load(text, Loader=capped_loader())  # noqa: S506 (a SafeLoader subclass)
    except YAMLTooLarge as exc:
        raise UsageError(f"Suite manifest '{path}' {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"Cannot read suite manifest '{path}' ({_cut(str(exc))}).") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        if isinstance(exc, yaml.constructor.ConstructorError) and "tag" in str(exc.problem):
            found = re.search(r"'([^']*)'", str(exc.problem))
            tag = (found.group(1) if found else "?").replace("tag:yaml.org,2002:", "!!")
            raise UsageError(f"Suite manifest '{path}' uses the YAML tag '{_cut(tag)}'{line}; "
                             "a manifest holds plain data only (no Python objects): remove "
                             "the tag.") from None
        raise UsageError(f"Suite manifest '{path}' is not valid YAML{line}; check its "
                         "indentation and quoting.") from None
    return parse_manifest(data, str(path), base=file.resolve().parent)


def parse_manifest(data: Any, source: str, base: Path | None = None) -> Manifest:
    """Check a manifest already read (a mapping of suites) and resolve its tasks."""
    if not isinstance(data, dict) or not data:
        raise UsageError(f"Suite manifest '{source}' must be a mapping of suite names to "
                         "suites (suite: {tasks: {task: {env: ...}}}).")
    _no_duplicates(data, f"Suite manifest '{source}' names the suite", "")
    tasks: list[Task] = []
    for suite, body in data.items():
        where = f"{source}: suite '{_cut(str(suite))}'"
        _check_name(suite, where, "suite")
        if not isinstance(body, dict):
            raise UsageError(f"{where} must be a mapping with 'tasks'.")
        _known_keys(body, SUITE_KEYS, where)
        if not isinstance(body.get("tasks"), dict) or not body["tasks"]:
            raise UsageError(f"{where} needs 'tasks': a mapping of task names to envs.")
        _no_duplicates(body["tasks"], f"{where} has the task", "; task names must be unique")
        defaults = {k: _value(k, body[k], where) for k in SUITE_KEYS[1:6] if k in body}
        for name, spec in body["tasks"].items():
            tasks.append(_task(str(suite), name, spec, defaults,
                               f"{where}, task '{_cut(str(name))}'", base))
    return Manifest(source, tuple(tasks))


def _task(suite: str, name: Any, spec: Any, defaults: dict[str, Any], where: str,
          base: Path | None) -> Task:
    _check_name(name, where, "task")
    if isinstance(spec, str):
        spec = {"env": spec}
    if not isinstance(spec, dict):
        raise UsageError(f"{where} must be an env id or a mapping with 'env'.")
    _known_keys(spec, TASK_KEYS, where)
    env = spec.get("env")
    if not isinstance(env, str) or not env.strip():
        raise UsageError(f"{where} has no env; give 'env: ENV_ID' (a Gymnasium id, "
                         "MODULE:EnvId, MODULE:factory or FILE.py:factory).")
    env = env.strip()
    file, colon, attr = env.rpartition(":")
    if colon and file.endswith(".py") and base is not None and not Path(file).is_absolute():
        env = f"{(base / file).resolve()}:{attr}"  # relative to the manifest, not the cwd
    values = {**defaults, **{k: _value(k, spec[k], where) for k in TASK_KEYS[1:] if k in spec}}
    return Task(suite=suite, name=str(name), env=env, **values)


def _value(key: str, value: Any, where: str) -> Any:
    """One option's value, checked."""
    if key == "kwargs":
        if not isinstance(value, dict):
            raise UsageError(f"{where}: kwargs must be a mapping of argument names to values, "
                             f"got {type(value).__name__}.")
        for k, v in value.items():
            if not isinstance(k, str) or not k.isidentifier() or not _plain(v):
                raise UsageError(f"{where}: kwargs '{_cut(str(k))}' must be a Python name "
                                 "with a value that is a number, string, true/false/null, or "
                                 "a list or mapping of those.")
        return dict(value)
    if key in ("episodes", "max_episode_steps"):
        if value is None and key == "max_episode_steps":
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"{where}: {key} must be a whole number of at least 1, got "
                             f"{_shown(value)}.")
        return value
    if key == "success_key":
        if value is not None and (not isinstance(value, str) or not value):
            raise UsageError(f"{where}: success_key must be the name of an info key (or null "
                             f"for an env that reports no success), got {_shown(value)}.")
        return value
    if key == "success":
        from rolltape.record import check_success_rule

        return check_success_rule(value, f"{where}: success")
    if key == "reward_atol":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not (0 <= value < math.inf):
            raise UsageError(f"{where}: reward_atol must be a finite number of 0 or more, "
                             f"got {_shown(value)}.")
        return float(value)
    if key == "description":
        return None if value is None else str(value)
    return value


def _plain(value: Any) -> bool:
    """What an env spec can store (a tape's JSON): YAML dates and the like are refused."""
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


MAX_NAME = 100  # a name becomes a folder (tapes/<suite>/<task>): far below NAME_MAX


def _check_name(name: Any, where: str, what: str) -> None:
    if isinstance(name, str) and len(name) > MAX_NAME:
        raise UsageError(f"{where}: the {what} name {_shown(name)} is {len(name)} characters "
                         f"long; give one of at most {MAX_NAME} (it names a folder).")
    if not isinstance(name, str) or not _NAME.match(name):
        raise UsageError(f"{where}: the {what} name {_shown(name)} must be a plain word (letters, "
                         "digits, '_', '-', '.'; it names a folder).")


def _known_keys(mapping: dict[str, Any], known: Sequence[str], where: str) -> None:
    for key in mapping:
        if key not in known:
            close = difflib.get_close_matches(_cut(str(key)), known, n=1, cutoff=0.5)
            hint = f"did you mean '{close[0]}'?" if close else f"use {', '.join(known)}."
            raise UsageError(f"{where}: unknown key '{_cut(str(key))}'; {hint}")


def _no_duplicates(mapping: Any, what: str, tail: str) -> None:
    dup = getattr(mapping, "duplicates", ())
    if dup:
        raise UsageError(f"{what} '{_cut(dup[0])}' twice{tail}.")


def select_tasks(manifest: Manifest, wanted: str | Sequence[str] | None,
                 flag: str = "--tasks") -> Manifest:
    """The tasks ``--tasks`` names (``task`` or ``suite/task``, comma-separated), in the
    manifest's order; all of them when None. A name not in the manifest is refused, in a
    sentence naming ``flag``."""
    if wanted is None:
        return manifest
    words = [w.strip() for w in (wanted.split(",") if isinstance(wanted, str) else wanted)]
    words = [w for w in words if w]
    if not words:
        raise UsageError(f"{flag} names no task; give task names separated by commas.")
    names = [t.name for t in manifest.tasks] + [t.key for t in manifest.tasks]
    for word in words:
        if word not in names:
            close = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
            hint = f"did you mean '{close[0]}'?" if close else \
                f"its tasks are {', '.join(dict.fromkeys(t.name for t in manifest.tasks))}."
            raise UsageError(f"{flag} '{_cut(word)}' is not a task of {manifest.source}; {hint}")
    chosen = tuple(t for t in manifest.tasks if t.name in words or t.key in words)
    return replace(manifest, tasks=chosen)


def with_defaults(manifest: Manifest, episodes: int, max_episode_steps: int | None = None,
                  success: str = "at_end") -> Manifest:
    """Every task with its episode count (the manifest's, else ``episodes``), its headline
    success rule (the manifest's, else ``success``) and, when given, ``max_episode_steps``
    overriding the manifest's (a quick look at a long suite)."""
    return replace(manifest, tasks=tuple(
        replace(t, episodes=t.episodes or episodes, success=t.success or success,
                max_episode_steps=max_episode_steps or t.max_episode_steps)
        for t in manifest.tasks))
