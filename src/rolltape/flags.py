"""A config field that is also a command-line flag says so beside its default.

The config dataclasses (:class:`rolltape.config.EvalConfig`, the render side's
``RenderOptions``, the server's ``ServeConfig``) declare each flag with :func:`flag`: its
default, its help sentence, its help panel and, where the command line writes it another way
than Python does, how the text becomes the field's value. ``rolltape.cli.options`` builds the
verbs' typer options from these fields, so a flag, its default and its help exist once.

>>> from dataclasses import dataclass, fields
>>> @dataclass(frozen=True)
... class Example:
...     episodes: int = flag(10, "Number of episodes.", panel=EPISODES, names=("-n",))
>>> fields(Example)[0].metadata["flag"].help
'Number of episodes.'
>>> parse_kwargs(["continuous=False", "size=(2, 3)"])
{'continuous': False, 'size': (2, 3)}

May import: errors. Never: typer (only the command line builds options from these
records), torch, GL, the policy side (the render side's options are declared here too).
"""

from __future__ import annotations

import ast
import json
import math
from dataclasses import dataclass, field, fields
from typing import Any, Callable

from rolltape.errors import UsageError

# The help panels, in the order `--help` shows them.
POLICY, EPISODES, VIDEO, SCALE, OUTPUT, UNTIL, SERVER = (
    "Policy", "Episodes", "Video", "Scale", "Output", "Stop early (--until)", "Server")
PANELS = (POLICY, EPISODES, VIDEO, SCALE, OUTPUT, UNTIL, SERVER)

SAME = object()  # the command line's default is the field's


@dataclass(frozen=True)
class Flag:
    """How one config field appears on the command line."""

    help: str
    panel: str
    names: tuple[str, ...] = ()  # extra names (-n) or, with a leading --, the names to use
    cli_type: Any = None  # what typer parses when it is not the field's type (List[str])
    cli_default: Any = SAME  # the command line's default, where it differs (and why)
    parse: Callable[[Any], Any] | None = None  # the parsed text -> the field's value
    metavar: str | None = None
    rule: Rule | None = None  # what the value must be (checked by check_flags)
    argument: bool = False  # a positional argument of the verb, not an option

    def name(self, field_name: str) -> str:
        """How the command line spells the field: ``--max-episode-steps``, ``--camera``."""
        if self.argument:
            return field_name.upper()
        given = [n for n in self.names if n.startswith("--")]
        return given[0].split("/")[0] if given else "--" + field_name.replace("_", "-")


@dataclass(frozen=True)
class Rule:
    """What a flag's value must be: ``ok(value)`` says whether it is, ``must`` finishes
    the sentence "--NAME must ...". A value of None (unset) passes every rule.

    >>> at_least(1).check("--episodes", 0)
    Traceback (most recent call last):
    rolltape.errors.UsageError: --episodes must be at least 1, got 0.
    """

    ok: Callable[[Any], bool]
    must: str

    def check(self, name: str, value: Any) -> None:
        if value is not None and not self.ok(value):
            shown = repr(value) if isinstance(value, str) else value
            raise UsageError(f"{name} must {self.must}, got {shown}.")


def at_least(least: int, unit: str = "", why: str = "") -> Rule:
    """A whole number of at least ``least`` (``unit``: bytes, steps; ``why``: a reason)."""
    words = f"be at least {least}" if least else "be 0 or more"
    return Rule(lambda v: v >= least, words + (f" {unit}" if unit else "")
                + (f" ({why})" if why else ""))


def above(least: float, what: str = "a number") -> Rule:
    """A finite number above ``least`` (NaN fails every comparison, so it is refused too)."""
    return Rule(lambda v: v > least and math.isfinite(v), f"be {what} above {least:g}")


def not_empty() -> Rule:
    """Text that is not empty (a path)."""
    return Rule(lambda v: bool(str(v).strip()), "not be empty")


def non_negative() -> Rule:
    """A finite number of 0 or more (a tolerance)."""
    return Rule(lambda v: v >= 0 and math.isfinite(v), "be a finite number of 0 or more")


def check_field(cls: type, name: str, value: Any) -> None:
    """Apply field ``name`` of dataclass ``cls``'s rule to ``value`` (a value checked
    before its record is made, such as a render option given on its own)."""
    f = next(f for f in fields(cls) if f.name == name)
    spec: Flag = f.metadata["flag"]
    if spec.rule is not None:
        spec.rule.check(spec.name(name), value)


def check_flags(record: Any) -> None:
    """Refuse the first field of dataclass ``record`` whose value breaks its flag's rule,
    in one sentence naming the flag: every record that declares a rule calls this, so a
    rule is written once, where its field is declared."""
    for f in fields(record):
        spec: Flag | None = f.metadata.get("flag")
        if spec is not None and spec.rule is not None:
            spec.rule.check(spec.name(f.name), getattr(record, f.name))


def flag(default: Any, help: str, *, panel: str, names: tuple[str, ...] = (),
         cli_type: Any = None, cli_default: Any = SAME,
         parse: Callable[[Any], Any] | None = None, metavar: str | None = None,
         factory: Callable[[], Any] | None = None, rule: Rule | None = None,
         argument: bool = False) -> Any:
    """A dataclass field that is a flag (``factory`` for a mutable default, as
    ``dataclasses.field(default_factory=...)``; ``rule``: what its value must be;
    ``argument``: a positional argument rather than an option)."""
    meta = {"flag": Flag(help, panel, names, cli_type, cli_default, parse, metavar, rule,
                         argument)}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def parse_kwargs(pairs: list[str] | None, flag: str = "--env-kwargs") -> dict[str, Any]:
    """KEY=VALUE pairs. A value is a Python literal (False, None, 1.5, (0.5, 2.0), 'abc')
    or JSON (true, null, [1, 2]); a bare word is refused rather than guessed to be a string
    (continuous=False must not become the string 'False'), so strings are quoted."""
    kwargs: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise UsageError(f"{flag} '{pair}' must look like KEY=VALUE with KEY a "
                             "Python name.")
        kwargs[key] = _literal(text.strip(), pair, flag)
    return kwargs


def _literal(text: str, pair: str, flag: str) -> Any:
    for parse in (ast.literal_eval, json.loads):
        try:
            value = parse(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue  # json.JSONDecodeError is a ValueError
        if _storable(value):
            return value
        raise UsageError(f"{flag} '{pair}': the value must be a number, string, "
                         "True/False/None, or a list, tuple or dict of those (finite numbers).")
    key = pair.partition("=")[0]
    raise UsageError(f"{flag} '{pair}' is neither a Python literal nor JSON; quote a "
                     f"string: {flag} \"{key}='{text}'\".")


def _storable(value: Any) -> bool:
    """What a tape's JSON env spec can hold (tuples are kept apart; see envs.encode_kwargs)."""
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(_storable(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _storable(v) for k, v in value.items())
    return False
