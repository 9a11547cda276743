"""Fuzz the env server's message handling for longer than the test suite does, with the same
strategies (tests/server_strategies.py), in-process on a real HalfCheetah-v5 server: every
message must get a reply whose status is known and which encodes; anything raised is a crash.

    .venv/bin/python scripts/fuzz_server.py --examples 20000
    .venv/bin/python scripts/fuzz_server.py --examples 1000000 --seconds 600

Prints "N inputs tried, K server crashes" (and the first traceback of each kind) and exits 1
when K > 0.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import traceback
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from hypothesis import HealthCheck, Phase, Verbosity, given, settings  # noqa: E402

from server_strategies import messages  # noqa: E402

from rolltape.server import protocol as P  # noqa: E402
from rolltape.server.server import EnvServer, ServeConfig  # noqa: E402


class _TimeUp(BaseException):
    """Raised from inside the test to stop Hypothesis (which does not catch BaseException)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=20_000, help="inputs to try")
    parser.add_argument("--seconds", type=float, default=None,
                        help="stop after this long even if fewer inputs were tried")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    tried = 0
    crashes: collections.Counter[str] = collections.Counter()
    first: dict[str, str] = {}
    deadline = time.monotonic() + args.seconds if args.seconds else None
    server = EnvServer(ServeConfig("HalfCheetah-v5", max_episode_steps=50, bind="127.0.0.1:0",
                                   max_sessions=4, max_payload=4096), log=lambda line: None)

    @settings(max_examples=args.examples, deadline=None, database=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck),
              verbosity=Verbosity.quiet)
    @given(messages)
    def one(data: bytes) -> None:
        nonlocal tried
        if deadline is not None and time.monotonic() > deadline:
            raise _TimeUp
        tried += 1
        try:
            reply = server.handle(data)
            if reply.get("status") not in P.STATUSES:
                raise AssertionError(f"unknown status {reply.get('status')!r}")
            P.encode(reply)
        except Exception as exc:
            kind = f"{type(exc).__name__}: {str(exc)[:80]}"
            crashes[kind] += 1
            first.setdefault(kind, traceback.format_exc())

    try:
        one()
    except _TimeUp:
        pass
    finally:
        alive = server.handle(P.encode(P.request("describe")))["status"] == P.OK
        server.close()
    for kind, count in crashes.most_common():
        print(f"{count} x {kind}\n{first[kind]}")
    total = sum(crashes.values()) + (not alive)
    print(f"{tried} inputs tried, {total} server crashes"
          + ("" if alive else " (the server stopped answering)"))
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
