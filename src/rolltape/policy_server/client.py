"""The client side of a served policy: a session on a ``ws://`` server (the
:class:`rolltape.policies.ServedPolicy` that pass 1 steps holds one).

:class:`PolicySession` speaks openpi's protocol (:mod:`.wire`): it reads the metadata the
server sends on connect, sends each request as one binary message and waits at most the
timeout for the answer. Whatever goes wrong is one sentence naming the server: it cannot be
reached, it refused the token, it closed the connection, it answered with text (an openpi
server's error) or with a malformed message, or it sent nothing within ``--policy-timeout``.

May import: policy_server.wire, address, errors, server.protocol; interpreter and envs
(the action-space check, in a fresh interpreter). Never: policies (they import this), torch.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from typing import Any

from rolltape.address import TOKEN_FILE_VARIABLE, read_token
from rolltape.errors import UsageError
from rolltape.policy_server import wire
from rolltape.server.protocol import DEFAULT_MAX_PAYLOAD, ProtocolError, describe_space


class PolicyServerError(RuntimeError):
    """The server failed one request (gone, slow, or an error answer): the episode fails."""


class PolicyServerGone(ConnectionError):
    """The server cannot be reached at all: the run stops, its finished episodes kept (an
    OSError, which pass 1 does not pin on one episode; said by its sentence alone)."""

    def __init__(self, sentence: str) -> None:
        super().__init__(sentence)
        self.strerror = sentence  # what the pass-1 worker reports of an OSError


class PolicySession:
    """One connection (one session) to a policy server."""

    def __init__(self, address: wire.PolicyAddress,
                 max_payload: int = DEFAULT_MAX_PAYLOAD) -> None:
        from websockets.exceptions import InvalidHandshake, InvalidStatus
        from websockets.sync.client import connect

        self.address = address
        self.uri = address.uri
        self.max_payload = max_payload
        token_file = os.environ.get(TOKEN_FILE_VARIABLE)
        headers = ({"Authorization": f"Api-Key {read_token(token_file, TOKEN_FILE_VARIABLE)}"}
                   if token_file else None)
        # Entered as a context manager, as websockets 17 wants (closed in :meth:`close`).
        self._held = ExitStack()
        try:
            self.ws = self._held.enter_context(connect(
                self.uri, open_timeout=address.timeout, max_size=max_payload,
                compression=None, additional_headers=headers, close_timeout=1))
        except InvalidStatus as exc:
            status = exc.response.status_code
            if status == 401:
                raise UsageError(f"The policy server at {self.uri} refused this client's token; "
                                 f"set {TOKEN_FILE_VARIABLE} to the file given to its "
                                 "--token-file.") from None
            raise PolicyServerGone(f"The policy server at {self.uri} refused the connection "
                                   f"(HTTP {status})") from None
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            why = getattr(exc, "strerror", None) or type(exc).__name__
            raise PolicyServerGone(f"The policy server at {self.uri} cannot be reached ({why}); "
                                   "start it with `rolltape serve-policy SOURCE --bind "
                                   "HOST:PORT`") from None
        try:
            metadata = self.receive("its metadata")
        except PolicyServerError as exc:
            self.close()
            raise PolicyServerGone(f"T{str(exc)[1:]}") from None
        if not isinstance(metadata, dict):
            self.close()
            raise PolicyServerGone(f"The policy server at {self.uri} sent metadata that is not "
                                   "a map")
        self.metadata: dict[str, Any] = metadata

    def call(self, message: dict[str, Any], what: str) -> Any:
        """Send one request and return its answer."""
        self.send(message, what)
        return self.receive(what)

    def send(self, message: dict[str, Any], what: str) -> None:
        """Send one request; its answer is :meth:`receive`'s (the server answers a
        session's requests in the order they were sent)."""
        from websockets.exceptions import ConnectionClosed

        try:
            self.ws.send(wire.encode(message))
        except ConnectionClosed:
            raise PolicyServerError(f"the policy server at {self.uri} closed the connection "
                                    f"before {what}") from None

    def receive(self, what: str) -> Any:
        """The answer to the oldest request sent and not yet answered."""
        from websockets.exceptions import ConnectionClosed

        try:
            data = self.ws.recv(timeout=self.address.timeout)
        except TimeoutError:
            raise PolicyServerError(f"the policy server at {self.uri} sent no answer to {what} "
                                    f"within {self.address.timeout:g} s (--policy-timeout)"
                                    ) from None
        except ConnectionClosed:
            raise PolicyServerError(f"the policy server at {self.uri} closed the connection "
                                    f"during {what}") from None
        if isinstance(data, str):  # openpi's servers send an error as text
            lines = data.strip().splitlines()
            raise PolicyServerError(f"the policy server at {self.uri} answered {what} with "
                                    f"an error: {(lines[-1] if lines else '').rstrip('.')}")
        try:
            return wire.decode(data, self.max_payload)
        except ProtocolError as exc:
            raise PolicyServerError(f"the policy server at {self.uri} sent a malformed answer "
                                    f"to {what}: {exc}") from None

    def close(self) -> None:
        try:
            self._held.close()
        except Exception:  # already gone
            pass


def check_policy_server(source: str, specs: list[dict[str, Any]] | None = None
                        ) -> dict[str, Any]:
    """Connect once and return the server's metadata: the orchestrator's check, before any
    worker starts, that the server is there and (``specs``: the env specs of the run) that
    it acts in each env's action space. The envs are built in a fresh interpreter (this
    process imports no simulator)."""
    from rolltape.interpreter import NO_GL, ChildFailed, run_once

    try:
        session = PolicySession(wire.parse_source(source))
    except PolicyServerGone as exc:
        raise UsageError(f"{exc}.") from None
    session.close()
    theirs = session.metadata.get("action_space")
    if specs and theirs is not None:
        local = [{k: v for k, v in spec.items() if k != "served"} for spec in specs]
        try:
            problem = run_once(action_space_problem, session.uri, theirs, local, env=NO_GL,
                               timeout=300)
        except ChildFailed:  # an env that cannot be built: pass 1 says why
            problem = None
        if problem:
            raise UsageError(problem)
    return session.metadata


def action_space_problem(uri: str, theirs: dict[str, Any], specs: list[dict[str, Any]]
                         ) -> str | None:
    """The refusal for the first env of ``specs`` whose action space is not the served
    policy's (``theirs``, as described in its metadata), else None."""
    from rolltape.envs.build import make_env

    for spec in specs:
        env = make_env(spec)
        try:
            problem = space_refusal(uri, theirs, env)
        finally:
            env.close()
        if problem:
            return problem
    return None


def space_refusal(uri: str, theirs: dict[str, Any], env: Any) -> str | None:
    """The sentence refusing a server whose action space (``theirs``) is not ``env``'s."""
    ours = describe_space(env.action_space)
    if theirs == ours:
        return None
    env_id = getattr(getattr(env, "spec", None), "id", None) or "the env"
    mine, its = space_text(ours), space_text(theirs)
    if mine == its:
        mine = f"{mine} with other bounds"
    return (f"The policy server at {uri} acts in {its} but env '{env_id}' takes {mine}; "
            "serve a policy trained on this env.")


def space_text(space: Any) -> str:
    """'Box(shape [6], float32)' from a described space."""
    if not isinstance(space, dict):
        return repr(space)[:80]
    kind = space.get("type", "?")
    if "n" in space:
        return f"{kind}({space['n']})"
    return f"{kind}(shape {space.get('shape')}, {space.get('dtype')})"
