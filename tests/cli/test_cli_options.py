"""The config is the command line (rolltape.flags, rolltape.cli.options): each flag is a
config field, declared once with its default and help; the render options check themselves."""

from __future__ import annotations

from dataclasses import fields

import pytest
import typer

from rolltape.cli import app
from rolltape.cli.options import PanelCommand, config_values, options_of
from rolltape.config import EvalConfig
from rolltape.errors import UsageError
from rolltape.flags import SAME, Flag
from rolltape.pass2.replay import RenderOptions, RenderRequest
from rolltape.server.server import ServeConfig


def _params(verb: str) -> dict[str, object]:
    command = typer.main.get_command(app).commands[verb]  # type: ignore[attr-defined]
    return {p.name: p for p in command.params}


@pytest.mark.parametrize(("verb", "config"), [("eval", EvalConfig), ("serve", ServeConfig),
                                              ("render", RenderOptions)])
def test_every_flag_field_is_an_option_of_its_verb_with_the_fields_default(verb, config):
    params = _params(verb)
    for f in fields(config):
        spec: Flag | None = f.metadata.get("flag")
        if spec is None:
            continue
        assert f.name in params, f.name
        field_default = f.default_factory() if callable(f.default_factory) else f.default
        cli = params[f.name].default  # type: ignore[attr-defined]
        # Only a declared cli_default may differ from the field's own default.
        expected = field_default if spec.cli_default is SAME else spec.cli_default
        assert cli == expected, (f.name, cli, expected)
        assert params[f.name].help == spec.help  # type: ignore[attr-defined]


def test_the_only_defaults_the_command_line_changes_are_declared_with_a_reason():
    changed = {f.name for f in fields(EvalConfig)
               if "flag" in f.metadata and f.metadata["flag"].cli_default is not SAME}
    # viewer: a person at a terminal gets the 3-D replay, the API opts in; the others are
    # the same value written as text (video "0", backends "egl,osmesa") or "not given" (a
    # repeatable flag's empty tuple).
    assert changed == {"viewer", "video", "backends", "wrappers", "env_kwargs", "cameras",
                       "trust_module"}


def test_config_values_parse_the_text_and_leave_defaults_to_the_config():
    given = {"episodes": 10, "seed": 4, "env_kwargs": ["continuous=False"], "cameras": None,
             "backends": "osmesa", "viewer": True, "wrappers": ["atari"], "video": "best"}
    values = config_values(EvalConfig, given)
    assert values == {"seed": 4, "env_kwargs": {"continuous": False}, "backends": ("osmesa",),
                      "viewer": True, "wrappers": ({"target": "atari", "kwargs": {}},),
                      "video": "best"}
    assert EvalConfig(env="CartPole-v1", **values).seed == 4


def test_a_verb_may_set_its_own_default_and_take_only_some_fields():
    [episodes] = options_of(EvalConfig, only=("episodes",), defaults={"episodes": 5})
    assert episodes.default.default == 5 and episodes.default.param_decls == ("--episodes", "-n")
    assert _params("parity")["episodes"].default == 10  # type: ignore[attr-defined]  # as eval's


@pytest.mark.parametrize(("options", "named"), [
    ({"mode": "sideways"}, "--mode"), ({"quality": "ultra"}, "--quality"),
    ({"width": 0}, "--width"), ({"height": -3}, "--height"), ({"rtol": -1.0}, "--rtol"),
    ({"atol": float("nan")}, "--atol"), ({"layout": "diagonal"}, "--layout"),
    ({"cameras": ("default", "free")}, "--layout"),
])
def test_render_options_refuse_bad_choices_on_construction(options, named):
    for record in (RenderOptions, lambda **o: RenderRequest("a.npz", **o),
                   lambda **o: EvalConfig(env="CartPole-v1", **o)):
        with pytest.raises(UsageError, match=named):
            record(**options)


def test_every_verb_lays_out_its_help_in_panels():
    """No verb falls back to typer's own help, whose metavars are type names (<bool> on a
    switch, <str>): each is a PanelCommand."""
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    assert {"eval", "render", "export", "bench", "serve"} <= set(commands)
    assert [name for name, c in commands.items() if not isinstance(c, PanelCommand)] == []
