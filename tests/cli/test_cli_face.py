"""The front door stays thin (issue 40), counted over the source: options hand-declared in
a verb's signature, option names declared in more than one place, verbs longer than a
screen, copies of a range rule. Each bound is what main holds today; it may only go down.

A flag is declared once as a ``flags.flag`` field of a record (``groups.py``, the render
side's ``ReplayOptions``, ``EvalConfig`` ...) and every verb built on that record offers
it; what is left in ``cli/`` as ``typer.Option(...)`` is a hand declaration.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "rolltape"
CLI = SRC / "cli"

# Today's counts: each may go down, never up (issue 40's targets in brackets).
MOST_HAND_DECLARED = 1  # typer.Option / typer.Argument calls in cli/'s verbs [<= 25]:
#                         `rolltape --version`, the app's own
MOST_DECLARED_TWICE: set[str] = set()  # option names with two declarations [none]
MOST_VERB_LINES = 40  # the longest verb's lines [<= 40]


def hand_declared() -> list[str]:
    """Every ``typer.Option(...)``/``typer.Argument(...)`` in cli/, by file and line."""
    found = []
    for path in sorted(CLI.glob("*.py")):
        if path.name == "options.py":  # the builder of every option, not a verb
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("Option", "Argument")
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "typer"):
                found.append(f"{path.name}:{node.lineno}")
    return found


def _declared_names(node: ast.Call, field: str | None) -> list[str]:
    """The long option names a flag(...) field (its ``names``) or a typer.Option(...) call
    (its positional names) declares."""
    typer_call = isinstance(node.func, ast.Attribute)
    given = [a.value for a in node.args if typer_call and isinstance(a, ast.Constant)
             and isinstance(a.value, str) and a.value.startswith("--")]
    for kw in node.keywords:
        if kw.arg == "names" and isinstance(kw.value, ast.Tuple):
            given += [e.value for e in kw.value.elts if isinstance(e, ast.Constant)
                      and str(e.value).startswith("--")]
        if kw.arg == "argument" and isinstance(kw.value, ast.Constant) and kw.value.value:
            return []  # a positional argument is no option name
    if given:
        return [g.split("/")[0] for g in given]
    return [f"--{field.replace('_', '-')}"] if field else []


def declarations() -> Counter[str]:
    """How many places declare each option name: flag fields anywhere in the package,
    hand-declared options in cli/."""
    counts: Counter[str] = Counter()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Call) \
                    and isinstance(node.value.func, ast.Name) and node.value.func.id == "flag" \
                    and isinstance(node.target, ast.Name):
                counts.update(_declared_names(node.value, node.target.id))
            elif isinstance(node, ast.arg) or not isinstance(node, ast.FunctionDef):
                continue
            else:  # a verb's hand-declared options: name = typer.Option(...)
                args = node.args.args + node.args.kwonlyargs
                defaults = node.args.defaults + [d for d in node.args.kw_defaults if d]
                for arg, default in zip(args[len(args) - len(defaults):], defaults):
                    if (isinstance(default, ast.Call) and isinstance(default.func, ast.Attribute)
                            and default.func.attr == "Option"):
                        counts.update(_declared_names(default, arg.arg))
    return counts


def verb_lengths() -> dict[str, int]:
    """Each verb's lines (its ``def`` to its last line), by name as ``VERBS`` lists it."""
    lengths = {}
    for path in sorted(CLI.glob("*.py")):
        tree = ast.parse(path.read_text())
        functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "VERBS" for t in node.targets):
                for key, value in zip(node.value.keys, node.value.values):  # type: ignore[attr-defined]
                    fn = functions[value.id]
                    lengths[key.value] = fn.end_lineno - fn.lineno + 1  # type: ignore[operator]
    return lengths


def rule_copies() -> Counter[str]:
    """How many places state each flag's range rule: a ``rule=`` on its field, and every
    sentence "--NAME must ..." written out in the source (outside examples)."""
    counts: Counter[str] = Counter()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Call) \
                    and isinstance(node.value.func, ast.Name) and node.value.func.id == "flag" \
                    and any(k.arg == "rule" for k in node.value.keywords) \
                    and isinstance(node.target, ast.Name):
                counts.update(_declared_names(node.value, node.target.id)[:1])
        for line in path.read_text().splitlines():
            if ">>>" not in line and "rolltape.errors.UsageError" not in line:
                counts.update(re.findall(r"\"(--[a-z-]+) must (?:be at least|be 0 or more|"
                                         r"be a [a-z ]*above|be a finite|not be empty)", line))
    return counts


def test_the_counts_are_really_read() -> None:
    assert "--episodes" in declarations() and "--out" in declarations()
    assert {"eval", "render", "verify", "export", "serve"} <= set(verb_lengths())


def test_no_more_hand_declared_options_than_today() -> None:
    assert len(hand_declared()) <= MOST_HAND_DECLARED, hand_declared()


def test_no_option_name_declared_twice_beyond_today_s() -> None:
    twice = {name for name, n in declarations().items() if n > 1}
    assert twice <= MOST_DECLARED_TWICE, sorted(twice - MOST_DECLARED_TWICE)


def test_no_verb_longer_than_today_s_longest() -> None:
    assert max(verb_lengths().values()) <= MOST_VERB_LINES, verb_lengths()


def test_each_range_rule_is_stated_once() -> None:
    """A rule lives on its field (flags.at_least ...) or, for a value that is no field's,
    in one sentence; a second copy is how two verbs' rules drift apart."""
    assert rule_copies()["--episodes"] == 1  # really counted
    copied = {name: n for name, n in rule_copies().items() if n > 1}
    assert copied == {}
