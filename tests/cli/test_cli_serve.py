"""The ``serve`` and ``parity`` verbs (rolltape.cli.serve), registered on a fresh app:
every bad combination is refused in one sentence before a server is asked anything, and a
server whose env differs is named before any episode, without a worker. (The verbs against
real servers end to end: server/test_server.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest
import typer

from conftest import Server
from rolltape.cli import app as cli_app
from rolltape.cli import serve as serve_verbs
from rolltape.errors import DivergenceError, UsageError

NOWHERE = "tcp://127.0.0.1:9"  # never asked: every refusal comes first


@pytest.fixture
def said() -> list[str]:
    return []


@pytest.fixture
def app(said: list[str], monkeypatch: pytest.MonkeyPatch) -> typer.Typer:
    monkeypatch.setattr(serve_verbs, "say", said.append)
    app = typer.Typer()
    for name, verb in serve_verbs.VERBS.items():
        app.command(name)(verb)
    return app


def run(app: typer.Typer, *args: str) -> None:
    app(args=list(args), prog_name="rolltape", standalone_mode=False)


def test_the_verbs_are_registered_with_the_defaults_eval_and_render_use(
        app: typer.Typer) -> None:
    """One default per option (issue 40): parity played 5 episodes where eval plays 10, and
    drew 480x480 terminal frames where render draws the env's own size."""
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    assert sorted(commands) == ["parity", "serve", "serve-policy"]
    params = {p.name: p for p in commands["parity"].params}
    evals = {p.name: p for p in typer.main.get_command(cli_app).commands["eval"].params}
    renders = {p.name: p for p in typer.main.get_command(cli_app).commands["render"].params}
    assert params["episodes"].default == evals["episodes"].default == 10
    assert params["width"].default is params["height"].default is None
    assert renders["width"].default is renders["height"].default is None
    assert {"vecnormalize", "algo", "env_kwargs", "max_episode_steps"} <= set(params)
    assert "workers" not in params and "batch" not in params  # --batch is eval's (--until)
    assert params["batch_size"].opts == ["--batch-size"]


@pytest.mark.parametrize(("args", "sentence"), [
    (["--tape", "missing.npz"], "--tape 'missing.npz' does not exist"),
    (["--episodes", "0"], "--episodes must be at least 1, got 0."),
    (["--seed", "-1"], "--seed must be 0 or more"),
    (["--batch-size", "0"], "--batch-size must be at least 1, got 0."),
    (["--width", "0"], "--width/--height/--camera: the frame width must be a whole number"),
    (["--camera", "c" * 201], "--width/--height/--camera: the camera must be"),
])
def test_parity_refuses_bad_options_before_asking_the_server(
        app: typer.Typer, tmp_path: Path, args: list[str], sentence: str) -> None:
    with pytest.raises(UsageError) as refused:
        run(app, "parity", "CartPole-v1", "--served", NOWHERE, *args,
            "--out", str(tmp_path / "parity.json"))
    assert sentence in str(refused.value)
    assert not (tmp_path / "parity.json").exists()


def test_tapes_replace_the_policy(app: typer.Typer, tmp_path: Path) -> None:
    tape = tmp_path / "t.npz"
    tape.write_bytes(b"")
    with pytest.raises(UsageError, match="--tape replays tapes' actions; drop --policy"):
        run(app, "parity", "CartPole-v1", "--served", NOWHERE, "--tape", str(tape),
            "--policy", "sb3:model.zip")


def test_the_output_must_be_a_file(app: typer.Typer, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--out '.*' is a folder; give the path of parity.json"):
        run(app, "parity", "CartPole-v1", "--served", NOWHERE, "--out", str(tmp_path))


@pytest.mark.parametrize(("args", "sentence"), [
    ([], "Give the local env id (rolltape parity HalfCheetah-v5 --served"),
    ([f"{NOWHERE}/CartPole-v1"], "Give the local env id as ENV and the server as --served"),
    (["--suite", "mazes"], "--suite and --task go together"),
    (["--task", "umaze"], "--suite and --task go together"),
    (["CartPole-v1", "--suite", "mazes", "--task", "umaze"], "not both"),
    (["--suite", "mazes", "--task", "umaze", "--env-kwargs", "x=1"], "not both"),
])
def test_parity_needs_one_env_or_one_suite_task(app: typer.Typer, args: list[str],
                                                sentence: str) -> None:
    with pytest.raises(UsageError) as refused:
        run(app, "parity", *args, "--served", NOWHERE)
    assert sentence in str(refused.value)


@pytest.mark.parametrize(("served", "sentence"), [
    ("127.0.0.1:7450", "must look like tcp://HOST:PORT"),
    ("tcp://127.0.0.1", "'tcp://127.0.0.1' must look like tcp://HOST:PORT"),
    ("tcp://h:0", "needs the port the server printed")])
def test_the_server_address_is_checked(app: typer.Typer, served: str, sentence: str) -> None:
    with pytest.raises(UsageError, match=f"[Ss]erver address .*{sentence}"):
        run(app, "parity", "CartPole-v1", "--served", served)


def test_serve_refuses_a_time_limit_below_one_step(app: typer.Typer) -> None:
    with pytest.raises(UsageError, match="^--max-episode-steps must be at least 1, got 0.$"):
        run(app, "serve", "CartPole-v1", "--max-episode-steps", "0")


@pytest.mark.parametrize(("args", "sentence"), [
    (["serve", "CartPole-v1", "--num-envs", "0"], "--num-envs must be from 1 to 1024, got 0."),
    (["serve", "CartPole-v1", "--idle-timeout", "nan"], "--idle-timeout must be a number of "
                                                        "seconds above 0"),
    (["serve", "CartPole-v1", "--max-sessions", "0"], "--max-sessions must be at least 1, got 0."),
    (["serve-policy", "m:f", "--max-payload", "5"], "--max-payload must be at least 1024 bytes"),
    (["serve-policy", "m:f", "--execute-steps", "0"], "--execute-steps must be at least 1, got 0."),
])
def test_the_servers_records_refuse_bad_limits_before_anything_listens(
        app: typer.Typer, args: list[str], sentence: str) -> None:
    with pytest.raises(UsageError) as refused:
        run(app, *args)
    assert str(refused.value).startswith(sentence)


def test_the_api_builds_the_verbs_records_with_their_own_ports() -> None:
    from rolltape.serve_policy import ServePolicyConfig
    from rolltape.server.server import ServeConfig

    assert ServeConfig("CartPole-v1").bind == "127.0.0.1:7450"  # bind None: serve's port
    assert ServePolicyConfig("m:f").bind == "127.0.0.1:8000"  # openpi's clients knock there
    assert ServeConfig("CartPole-v1", backend="EGL").backend == "egl"  # parsed as the verb did


@pytest.fixture(scope="module")
def other_server() -> Iterator[str]:
    """A CartPole server with kwargs a plain local CartPole does not have."""
    server = Server("--env-kwargs", "sutton_barto_reward=True",
                    what=("CartPole-v1", "--max-episode-steps", "10"))
    try:
        yield server.address
    finally:
        server.stop()


def test_a_server_whose_env_differs_is_named_before_any_episode(
        app: typer.Typer, other_server: str, tmp_path: Path, said: list[str]) -> None:
    out = tmp_path / "parity.json"
    with pytest.raises(DivergenceError) as diverged:
        run(app, "parity", "CartPole-v1", "--served", other_server, "--max-episode-steps",
            "10", "--out", str(out))
    assert "kwargs" in str(diverged.value) and str(out) in str(diverged.value)
    written = json.loads(out.read_text())
    assert written["agree"] is False and written["rows"] == []
    first = written["first_divergence"]
    assert (first["episode"], first["field"]) == (None, "kwargs")
    assert first["served"] == {"sutton_barto_reward": True} and first["local"] == {}
    assert said == []  # no episode was played
