"""Fuzz ``Tape.load`` for longer than the test suite does, with the same strategies
(tests/tape_strategies.py): every damaged tape must load or raise rolltape's UsageError.

    .venv/bin/python scripts/fuzz_tapes.py --examples 20000
    .venv/bin/python scripts/fuzz_tapes.py --examples 1000000 --seconds 600

Prints "N examples, K non-rolltape exceptions" (and the first traceback of each kind) and
exits 1 when K > 0.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from hypothesis import HealthCheck, Phase, Verbosity, given, settings  # noqa: E402

from tape_strategies import damaged_tapes, load_outcome  # noqa: E402


class _TimeUp(BaseException):
    """Raised from inside the test to stop Hypothesis (which does not catch BaseException)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=20_000, help="examples to run")
    parser.add_argument("--seconds", type=float, default=None,
                        help="stop after this long even if fewer examples ran")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")  # numpy's and Hypothesis' warnings about odd inputs
    examples = 0
    escapes: collections.Counter[str] = collections.Counter()
    first: dict[str, str] = {}
    deadline = time.monotonic() + args.seconds if args.seconds else None

    with tempfile.TemporaryDirectory() as folder:
        # Generation only: a failure is counted, not shrunk, so every example runs.
        @settings(max_examples=args.examples, deadline=None, database=None,
                  phases=[Phase.generate], suppress_health_check=list(HealthCheck),
                  verbosity=Verbosity.quiet)  # quiet: no "reproduce with @seed" on time-up
        @given(damaged_tapes)
        def one(data: bytes) -> None:
            nonlocal examples
            if deadline is not None and time.monotonic() > deadline:
                raise _TimeUp
            examples += 1
            try:
                load_outcome(data, Path(folder))
            except Exception as exc:  # anything but UsageError is a loader bug
                kind = f"{type(exc).__name__}: {str(exc)[:80]}"
                escapes[kind] += 1
                first.setdefault(kind, traceback.format_exc())

        try:
            one()
        except _TimeUp:
            pass
    for kind, count in escapes.most_common():
        print(f"{count} x {kind}\n{first[kind]}")
    total = sum(escapes.values())
    print(f"{examples} examples, {total} non-rolltape exceptions")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
