"""Server addresses (rolltape.address): tcp://HOST:PORT, tcp://HOST:PORT/ENV_ID and
HOST:PORT parse and print back the same, every malformed one is one sentence with an
example, and what a served spec records comes from the environment, checked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rolltape.address import (
    DEFAULT_TIMEOUT,
    TIMEOUT_VARIABLE,
    TOKEN_FILE_VARIABLE,
    endpoint,
    is_loopback,
    is_served,
    parse_served,
    parse_server,
    read_token,
    served_fields,
    served_task_spec,
    split_host_port,
)
from rolltape.errors import UsageError

TOKEN = "0123456789abcdef0123"


@pytest.mark.parametrize(("host", "port"), [("127.0.0.1", 7450), ("localhost", 1),
                                            ("::1", 65535), ("fe80::2", 80)])
def test_an_endpoint_parses_back_to_its_host_and_port(host: str, port: int) -> None:
    address = endpoint(host, port)
    assert parse_server(address) == address
    assert split_host_port(address.removeprefix("tcp://"), "--bind") == (host, port)


def test_an_ipv6_host_is_bracketed() -> None:
    assert endpoint("::1", 7450) == "tcp://[::1]:7450"
    assert endpoint("10.0.0.2", "7450") == "tcp://10.0.0.2:7450"


@pytest.mark.parametrize("text", ["127.0.0.1", ":7450", "host:", "host:port", "host:65536",
                                  "host:-1", "[]:80"])
def test_a_malformed_host_port_is_refused_naming_the_flag(text: str) -> None:
    with pytest.raises(UsageError, match=r"^--bind '.*' must look like HOST:PORT, e\.g\."):
        split_host_port(text, "--bind")


def test_a_bind_may_ask_for_port_0_but_a_client_may_not() -> None:
    assert split_host_port("127.0.0.1:0", "--bind") == ("127.0.0.1", 0)
    with pytest.raises(UsageError, match="needs the port the server printed"):
        parse_server("tcp://127.0.0.1:0")


def test_a_server_address_needs_its_scheme_and_may_end_in_a_slash() -> None:
    assert parse_server("tcp://127.0.0.1:7450/") == "tcp://127.0.0.1:7450"
    with pytest.raises(UsageError, match="must look like tcp://HOST:PORT"):
        parse_server("127.0.0.1:7450")
    with pytest.raises(UsageError, match="must look like tcp://HOST:PORT"):
        parse_server("http://127.0.0.1:7450")
    with pytest.raises(UsageError) as refused:  # said as the user typed it
        parse_server("tcp://127.0.0.1")
    assert "'tcp://127.0.0.1' must look like tcp://HOST:PORT" in str(refused.value)


def test_a_served_env_splits_at_the_first_slash_so_a_suite_task_keeps_its_own() -> None:
    assert is_served("tcp://h:1/X-v0") and not is_served("HalfCheetah-v5")
    assert parse_served("tcp://[::1]:7450/mazes/umaze") == ("tcp://[::1]:7450", "mazes/umaze")
    for text in ("tcp://127.0.0.1:7450", "tcp://127.0.0.1:7450/"):
        with pytest.raises(UsageError, match="tcp://HOST:PORT/ENV_ID, e.g."):
            parse_served(text)


@pytest.mark.parametrize(("host", "loopback"), [
    ("localhost", True), ("127.0.0.1", True), ("127.1", True), ("127.255.0.9", True),
    ("::1", True), ("0.0.0.0", False), ("10.0.0.1", False), ("::", False), ("*", False),
    ("example.com", False), ("", False)])
def test_only_loopback_hosts_count_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_a_token_file_is_read_without_its_surrounding_whitespace(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(f"  {TOKEN}\n\n")
    assert read_token(tmp_path / "token") == TOKEN


def test_a_short_token_is_refused_saying_how_to_make_one(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("a" * 15 + "\n")
    with pytest.raises(UsageError, match="holds a token of 15 characters; use at least 16 .*"
                                         "secrets"):
        read_token(tmp_path / "token")


def test_an_unreadable_token_file_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"^--token-file '.*missing' cannot be read \(No such"):
        read_token(tmp_path / "missing")
    (tmp_path / "binary").write_bytes(b"\xff\xfe\x00" * 10)
    with pytest.raises(UsageError, match="is not a text file"):
        read_token(tmp_path / "binary", TOKEN_FILE_VARIABLE)


def test_served_fields_default_to_no_token_and_the_default_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_FILE_VARIABLE, raising=False)
    monkeypatch.delenv(TIMEOUT_VARIABLE, raising=False)
    assert served_fields("tcp://h:1") == {"address": "tcp://h:1", "token_file": None,
                                          "timeout": DEFAULT_TIMEOUT}


def test_served_fields_record_the_token_file_s_absolute_path_never_the_token(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text(TOKEN)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(TOKEN_FILE_VARIABLE, "token")
    monkeypatch.setenv(TIMEOUT_VARIABLE, "2.5")
    fields = served_fields("tcp://h:1")
    assert fields["token_file"] == os.path.join(str(tmp_path), "token")
    assert fields["timeout"] == 2.5 and TOKEN not in str(fields)


@pytest.mark.parametrize("text", ["soon", "0", "-3", "nan", "inf", "1e7"])
def test_a_timeout_that_is_not_seconds_above_0_is_refused(
        text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_FILE_VARIABLE, raising=False)
    monkeypatch.setenv(TIMEOUT_VARIABLE, text)
    with pytest.raises(UsageError, match=f"^{TIMEOUT_VARIABLE}='{text}' must be a number"):
        served_fields("tcp://h:1")


def test_a_served_task_spec_keeps_the_local_spec_and_adds_its_server(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_FILE_VARIABLE, raising=False)
    monkeypatch.delenv(TIMEOUT_VARIABLE, raising=False)
    local = {"id": "CartPole-v1", "kwargs": {}, "max_episode_steps": 20}
    spec = served_task_spec(local, "tcp://127.0.0.1:7450/", "toy/cartpole")
    assert {k: v for k, v in spec.items() if k != "served"} == local
    assert spec["served"] == {"address": "tcp://127.0.0.1:7450", "token_file": None,
                              "timeout": DEFAULT_TIMEOUT, "name": "toy/cartpole"}
    assert "served" not in local
