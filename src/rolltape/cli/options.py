"""The verbs' options built from the config dataclasses' fields, and a ``--help`` that
fits 80 columns in panels.

A verb takes a config's flags with :func:`takes`: its own parameters (an argument, the flags
no config holds) stay in its signature, and ``**config`` becomes one keyword option per field
declared with :func:`rolltape.flags.flag`. :func:`config_values` turns what the parser gave
back into the field values to pass on (a flag left at the field's own default is left out,
so the config's default is the one that applies).

>>> from dataclasses import dataclass
>>> from rolltape.flags import EPISODES, flag
>>> @dataclass(frozen=True)
... class Example:
...     episodes: int = flag(10, "Number of episodes.", panel=EPISODES, names=("-n",))
...     seed: int = flag(0, "Episode i is reset with seed + i.", panel=EPISODES)
>>> [p.name for p in options_of(Example)]
['episodes', 'seed']
>>> config_values(Example, {"episodes": 10, "seed": 3})
{'seed': 3}

May import: typer, rich, flags. Never: the work (evaluation, pass 1, pass 2's replay loop).
"""

from __future__ import annotations

import inspect
import typing
from dataclasses import MISSING, Field, fields
from typing import Any, Callable, Iterable

import typer
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from typer.core import TyperArgument, TyperCommand

from rolltape.flags import PANELS, SAME, Flag


def options_of(cls: type, *, only: Iterable[str] | None = None, skip: Iterable[str] = (),
               defaults: dict[str, Any] | None = None) -> list[inspect.Parameter]:
    """One keyword-only typer option per flag field of dataclass ``cls`` (``only`` these,
    less ``skip``; ``defaults``: a verb's own defaults, e.g. parity's 5 episodes)."""
    hints = typing.get_type_hints(cls)
    wanted = None if only is None else set(only)
    params = []
    for f in fields(cls):
        spec: Flag | None = f.metadata.get("flag")
        if spec is None or f.name in skip or (wanted is not None and f.name not in wanted):
            continue
        default = (defaults or {}).get(f.name, _cli_default(f, spec))
        annotation = spec.cli_type or hints[f.name]
        names = spec.names if any(n.startswith("--") for n in spec.names) else (
            *_long_names(f.name, annotation), *spec.names)
        if spec.argument:
            option = typer.Argument(default, help=spec.help, metavar=spec.metavar,
                                    show_default=False)
        else:
            option = typer.Option(default, *names, help=spec.help, rich_help_panel=spec.panel,
                                  metavar=spec.metavar, show_default=False)
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY,
                                        default=option, annotation=annotation))
    return params


def config_values(cls: type, given: dict[str, Any]) -> dict[str, Any]:
    """The flag fields of ``cls`` among ``given`` (what the parser returned), as the config
    takes them; a value left at None or at the field's own default is left out."""
    values = {}
    for f in fields(cls):
        spec: Flag | None = f.metadata.get("flag")
        if spec is None or f.name not in given or given[f.name] is None:
            continue  # not a flag: another record's field of that name may have been given
        value = given[f.name]
        if spec.parse is not None:
            value = spec.parse(value)
        if value != _field_default(f):
            values[f.name] = value
    return values


def takes(*groups: list[inspect.Parameter]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a verb whose signature ends in ``**config`` the options in ``groups`` instead."""

    def wrap(verb: Callable[..., Any]) -> Callable[..., Any]:
        own = [p for p in inspect.signature(verb).parameters.values()
               if p.kind is not inspect.Parameter.VAR_KEYWORD]
        names = {p.name for p in own}
        added = [p for group in groups for p in group if p.name not in names]
        verb.__signature__ = inspect.Signature(own + added)  # type: ignore[attr-defined]
        return verb

    return wrap


def _cli_default(f: Field[Any], spec: Flag) -> Any:
    if spec.cli_default is not SAME:
        return spec.cli_default
    return _field_default(f)


def _field_default(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return ...  # required


def _long_names(name: str, annotation: Any) -> tuple[str, ...]:
    dashed = name.replace("_", "-")
    if annotation is bool:
        return (f"--{dashed}/--no-{dashed}",)
    return (f"--{dashed}",)


# --- help ---------------------------------------------------------------------------------

_METAVARS = {"int": "INT", "float": "FLOAT", "str": "TEXT", "path": "PATH", "bool": ""}


class PanelCommand(TyperCommand):
    """A command whose ``--help`` lists its options in the panels of :data:`PANELS`, each
    row the flag names (never cut: a negative form goes on its own line), a metavar (none
    for a switch) and the help with its default."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        console = Console(highlight=False, soft_wrap=False)
        console.print(Text(self.get_usage(ctx), style="bold"))
        if self.help:
            paragraphs = inspect.cleandoc(self.help).split("\n\n")
            console.print(Text("\n" + "\n\n".join(p.replace("\n", " ") for p in paragraphs)
                               + "\n"))
        panels: dict[str, list[list[Text]]] = {}
        for param in self.get_params(ctx):
            if getattr(param, "hidden", False):
                continue
            if isinstance(param, TyperArgument):
                panel = "Arguments"
            else:
                panel = getattr(param, "rich_help_panel", None) or "Options"
            panels.setdefault(panel, []).append(_row(param, ctx))
        order = ["Arguments", *PANELS, "Options"]
        for name in sorted(panels, key=lambda n: order.index(n) if n in order else len(order)):
            table = Table.grid(padding=(0, 1), expand=True)
            table.add_column(no_wrap=True, style="cyan")
            table.add_column(no_wrap=True, style="yellow")
            table.add_column(ratio=1, overflow="fold")
            for row in panels[name]:
                table.add_row(*row)
            console.print(Panel(Group(table), title=name, title_align="left",
                                border_style="dim"))


def _metavar(param: Any, ctx: Any) -> str:
    """typer's type name (``<list[str]>``) as a metavar (``TEXT``)."""
    shown = str(param.display_type_rich(ctx=ctx) or "").strip("<>")
    if shown.startswith("list[") and shown.endswith("]"):
        shown = shown[5:-1]
    return _METAVARS.get(shown, shown.upper())


def _row(param: Any, ctx: Any) -> list[Text]:
    if isinstance(param, TyperArgument):
        names = param.name.upper() if param.name else ""
    else:
        names = "\n".join(filter(None, (", ".join(param.opts),
                                        ", ".join(param.secondary_opts))))
    switch = getattr(param, "is_flag", False)
    metavar = "" if switch else (param.metavar or _metavar(param, ctx))
    help_text = getattr(param, "help", None) or ""
    default = param.default
    if getattr(param, "required", False) and not isinstance(param, TyperArgument):
        help_text += " [required]"
    elif switch and default:
        help_text += " [default: on]"
    elif not switch and default not in (None, "", (), []) and not callable(default):
        help_text += f" [default: {default}]"
    return [Text(names), Text(metavar), Text(help_text)]

