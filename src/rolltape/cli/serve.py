"""The ``serve``, ``serve-policy`` and ``parity`` verbs: each builds its record
(:class:`ServeConfig`, :class:`ServePolicyConfig`, :class:`ParityConfig`, whose fields are
its flags and whose rules are checked on construction) and calls one API function.

May import: typer, errors, cli.options, cli.show, the three records' modules (server.server,
serve_policy, parity: each imports its work lazily). Never at module level: zmq, msgpack,
mujoco, torch.
"""

from __future__ import annotations

from typing import Any

from rolltape.cli.options import config_values, options_of, takes
from rolltape.cli.show import say
from rolltape.errors import Interrupted
from rolltape.parity import ParityConfig
from rolltape.serve_policy import ServePolicyConfig
from rolltape.server.server import ServeConfig


@takes(options_of(ServeConfig))
def serve(**given: Any) -> None:
    """Serve an env (or a suite's) over zmq for `rolltape eval tcp://HOST:PORT/ENV`,
    `eval --suite S --served tcp://HOST:PORT` and `parity`."""
    from rolltape.server.server import serve as run_server

    stopped_by = run_server(ServeConfig(**config_values(ServeConfig, given)))
    if stopped_by is not None:  # SIGTERM or Ctrl-C: the status says so, as for any verb
        stop = Interrupted(stopped_by)
        raise Interrupted(stopped_by, f"{Interrupted.heading(stop)}: stopped serving; "
                                      "every session's env was closed.")


@takes(options_of(ServePolicyConfig))
def serve_policy(**given: Any) -> None:
    """Serve a policy over openpi's websocket protocol for `eval --policy ws://HOST:PORT`
    (and openpi's own client); the server imports no simulator."""
    from rolltape.serve_policy import exec_server

    exec_server(ServePolicyConfig(**config_values(ServePolicyConfig, given)))


@takes(options_of(ParityConfig))
def parity(**given: Any) -> None:
    """Play the same seeded episodes locally and served (an env with --served, a policy
    with --policy ws://... --local-policy) and write parity.json (--out); exit 1 at any
    difference."""
    from rolltape.parity import check_parity

    check_parity(ParityConfig(**config_values(ParityConfig, given)), say)


VERBS = {"serve": serve, "serve-policy": serve_policy, "parity": parity}
