"""The ``rolltape`` command: a thin layer over the Python API.

Each verb (one module per family: eval, render, compare, branch, serve, export, tools)
builds its record from the flags, calls one API function and prints what it did
(cli.show). Bad input is one sentence on stderr and exit status 2; a replay that diverged
with ``--on-divergence fail`` exits 1.

May import: its verb modules, typer, errors; anything else of rolltape lazily inside each
verb (so `rolltape --help` stays fast). Never: torch or GL at module level.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, cast

import typer

from rolltape.cli import branch, compare, export, render, serve, tools
from rolltape.cli import eval as eval_verb
from rolltape.cli.options import PanelCommand
from rolltape.cli.show import err, out
from rolltape.errors import DivergenceError, Interrupted, RunFailed, UsageError

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="Evaluate RL policies with rendering off; render their tapes faithfully.")


def _print_version(value: bool) -> None:
    if value:
        from rolltape import __version__

        out.print(f"rolltape {__version__}", highlight=False)
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def _options(ctx: typer.Context,
             version: bool = typer.Option(False, "--version", is_eager=True,
                                          callback=_print_version,
                                          help="Print the version and exit.")) -> None:
    """Evaluate RL policies with rendering off; render their tapes faithfully."""
    # Not typer's no_args_is_help: that prints the whole help, a usage error is one line.
    if ctx.invoked_subcommand is None:
        verbs = ", ".join(c.name or c.callback.__name__ for c in app.registered_commands
                          if c.callback is not None)
        raise UsageError(f"give a command: {verbs}; try `rolltape --help`.")


for _verbs in (eval_verb.VERBS, render.VERBS, tools.VERBS, compare.VERBS, serve.VERBS,
               branch.VERBS, export.VERBS):
    for _name, _verb in _verbs.items():
        app.command(_name, cls=PanelCommand)(cast(Callable[..., Any], _verb))


def main(argv: list[str] | None = None) -> int:
    """Console entry point: run the app, turning our errors into one line and an exit code.

    The one signal handling of every verb: SIGTERM raises :class:`Interrupted` (as Ctrl-C
    raises KeyboardInterrupt) wherever the verb is, so that what it started is stopped by
    the same ``finally`` blocks; the command then prints one line and exits 143 (130)."""
    from rolltape.executors.launch import sigterm_raises

    with sigterm_raises():
        return _main(sys.argv[1:] if argv is None else argv)


def _main(argv: list[str]) -> int:
    try:
        # Not standalone: typer returns an exit code (typer.Exit(n), --help) instead of
        # calling sys.exit, and raises its usage errors for us to print in one line.
        code = app(args=argv, prog_name="rolltape", standalone_mode=False)
    except (UsageError, DivergenceError) as exc:
        err.print(f"rolltape: {exc}", highlight=False, markup=False, soft_wrap=True)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except RunFailed as exc:  # what was kept and how to go on
        err.print(f"rolltape: {exc}", highlight=False, markup=False, soft_wrap=True)
        return exc.exit_code
    except Interrupted as exc:
        err.print(f"rolltape: {interrupted_line(exc, argv)}", highlight=False, markup=False,
                  soft_wrap=True)
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        err.print(f"rolltape: {interrupted_line(Interrupted(2), argv)}", highlight=False,
                  markup=False, soft_wrap=True)
        return 130
    except OSError as exc:  # a full disk, a vanished folder: not a bug to show a traceback for
        where = f" ({exc.filename})" if exc.filename else ""
        err.print(f"rolltape: {exc.strerror or exc}{where}.", highlight=False, markup=False,
                  soft_wrap=True)
        return 1
    except ClickError as exc:  # the parser's own errors: unknown option, bad value, ...
        err.print(f"rolltape: {usage_line(exc)}", highlight=False, markup=False,
                  soft_wrap=True)
        return 2
    if code == 130:  # typer answers Ctrl-C (outside eval and render) with this status
        err.print(f"rolltape: {interrupted_line(Interrupted(2), argv)}", highlight=False,
                  markup=False, soft_wrap=True)
    return code if isinstance(code, int) else 0


def interrupted_line(stopped: Interrupted, argv: list[str]) -> str:
    """The verb's own account of what it kept (eval, render), else the same line for all."""
    if stopped.explained:
        return str(stopped)
    verb = next((a for a in argv if not a.startswith("-")), "")
    if verb in _SERVING:  # runs until stopped: a stop is its ordinary end, nothing unfinished
        return (f"{Interrupted.heading(stopped)}: `rolltape {verb}` stopped serving, and so "
                "did every process it started.")
    return (f"{Interrupted.heading(stopped)}: `rolltape {verb}` stopped before it finished, "
            "and so did every process it started; rerun it to finish.")


_SERVING = ("view", "serve", "serve-policy")  # verbs that serve until they are stopped


# The base of every error typer's parser raises. typer exposes BadParameter in every
# version, whether it vendors click (0.2x, no `click` installed) or uses click itself, so
# its ClickException is found from there rather than by importing `click`.
ClickError: type[Exception] = next(c for c in typer.BadParameter.__mro__
                                   if c.__name__ == "ClickException")


def usage_line(exc: Exception) -> str:
    """One line for a parser error, naming the fix (instead of click's usage box)."""
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "rolltape"
    if type(exc).__name__ == "NoSuchOption":
        similar = getattr(exc, "possibilities", None)
        guess = f" (did you mean {' or '.join(sorted(similar))}?)" if similar else ""
        return f"no option {getattr(exc, 'option_name', '')}{guess}; try `{where} --help`."
    # A ClickException (ClickError: typer may vendor click, so not importable by name);
    # a choice list spans lines.
    message = " ".join(exc.format_message().split())  # type: ignore[attr-defined]
    if message.endswith("?"):  # click's "Did you mean 'eval'?": a question ends the sentence
        return f"{message} Try `{where} --help`."
    return f"{message.rstrip('.')}; try `{where} --help`."


if __name__ == "__main__":
    sys.exit(main())
