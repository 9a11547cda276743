"""Server addresses: ``tcp://HOST:PORT`` for a server, ``tcp://HOST:PORT/ENV_ID`` for an env
on it, and ``HOST:PORT`` for ``serve --bind``.

It sits beside the env-id grammar (:mod:`rolltape.envs.ids` reads served ids with it), below
the server's wire (:mod:`rolltape.server`).

May import: errors. Never: anything else of rolltape.

>>> parse_served("tcp://127.0.0.1:7450/HalfCheetah-v5")
('tcp://127.0.0.1:7450', 'HalfCheetah-v5')
>>> split_host_port("localhost:0", "--bind")
('localhost', 0)
"""

from __future__ import annotations

import ipaddress
import os
import socket

from rolltape.errors import UsageError

SCHEME = "tcp://"
DEFAULT_TIMEOUT = 30.0  # seconds a client waits for one reply before it says the server is gone
TOKEN_FILE_VARIABLE = "ROLLTAPE_TOKEN_FILE"  # where a client finds the server's token
TIMEOUT_VARIABLE = "ROLLTAPE_SERVER_TIMEOUT"


def is_served(env_id: str) -> bool:
    return env_id.startswith(SCHEME)


def split_host_port(text: str, flag: str) -> tuple[str, int]:
    """(host, port) from HOST:PORT ([::1]:PORT for IPv6), refusing anything else."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"{flag} '{text}' must look like HOST:PORT, e.g. 127.0.0.1:7450 "
                         "(port 0 picks a free one).")
    return host, int(port)


def parse_server(address: str) -> str:
    """A checked ``tcp://HOST:PORT``."""
    if not address.startswith(SCHEME):
        raise UsageError(f"Server address '{address}' must look like tcp://HOST:PORT.")
    try:
        host, port = split_host_port(address[len(SCHEME):].rstrip("/"), "The server address")
    except UsageError:  # said with the address as the user wrote it, scheme included
        raise UsageError(f"Server address '{address}' must look like tcp://HOST:PORT, e.g. "
                         "tcp://127.0.0.1:7450.") from None
    if port == 0:
        raise UsageError(f"Server address '{address}' needs the port the server printed.")
    return endpoint(host, port)


def parse_served(text: str) -> tuple[str, str]:
    """(server address, env id) from ``tcp://HOST:PORT/ENV_ID``."""
    rest = text[len(SCHEME):]
    where, slash, env_id = rest.partition("/")
    if not slash or not env_id:
        raise UsageError(f"Served env '{text}' must look like tcp://HOST:PORT/ENV_ID, e.g. "
                         "tcp://127.0.0.1:7450/HalfCheetah-v5.")
    return parse_server(SCHEME + where), env_id


def endpoint(host: str, port: int | str) -> str:
    return f"{SCHEME}[{host}]:{port}" if ":" in host else f"{SCHEME}{host}:{port}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:  # the short IPv4 forms the resolver accepts too: 127.1 is 127.0.0.1
        return ipaddress.ip_address(socket.inet_aton(host)).is_loopback
    except OSError:
        return False  # a name, or '*': may reach beyond this machine


def read_token(path: str | os.PathLike[str], flag: str = "--token-file") -> str:
    """The token a file holds (surrounding whitespace dropped), refusing an empty one."""
    try:
        token = open(path, encoding="utf-8").read().strip()
    except OSError as exc:
        raise UsageError(f"{flag} '{path}' cannot be read ({exc.strerror}); give a file "
                         "that holds the token.") from None
    except UnicodeDecodeError:
        raise UsageError(f"{flag} '{path}' is not a text file; put the token in it as text.") \
            from None
    if len(token) < 16:
        raise UsageError(f"{flag} '{path}' holds a token of {len(token)} characters; use at "
                         "least 16 (e.g. `python -c \"import secrets; print(secrets."
                         "token_hex(16))\" > token`).")
    return token


def bind_token(bind: str, host: str, token_file: str | os.PathLike[str] | None) -> str | None:
    """The token a server bound at ``bind`` (``host`` its host) requires: the one in
    ``token_file``, or None on loopback; refused for an address other machines can reach
    without one (the rule of ``rolltape serve`` and ``serve-policy`` alike)."""
    token = read_token(token_file) if token_file else None
    if token is None and not is_loopback(host):
        raise UsageError(f"--bind {bind} is reachable from other machines, so it needs "
                         "a token: give --token-file FILE (clients set ROLLTAPE_TOKEN_FILE), "
                         "or bind 127.0.0.1.")
    return token


def served_task_spec(spec: dict[str, object], address: str, name: str) -> dict[str, object]:
    """A suite task's local spec, served as ``name`` by the server at ``address``."""
    return {**spec, "served": {**served_fields(parse_server(address)), "name": name}}


def served_fields(address: str) -> dict[str, object]:
    """What a served env spec records about its server: the address, the token file (its
    path, never the token: specs are written into run folders) and the reply timeout, both
    from the environment so that every worker, Ray's included, sees the same."""
    token_file = os.environ.get(TOKEN_FILE_VARIABLE) or None
    if token_file is not None:
        read_token(token_file, TOKEN_FILE_VARIABLE)
        token_file = os.path.abspath(token_file)
    text = os.environ.get(TIMEOUT_VARIABLE)
    timeout = DEFAULT_TIMEOUT
    if text:
        try:
            timeout = float(text)
        except ValueError:
            timeout = -1.0
        if not 0 < timeout < 1e6:
            raise UsageError(f"{TIMEOUT_VARIABLE}={text!r} must be a number of seconds above 0.")
    return {"address": address, "token_file": token_file, "timeout": timeout}
