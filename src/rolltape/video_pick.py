"""What ``--video`` picks, parsed once: :class:`VideoPick`.

``--video`` takes a count (the first N episodes), ``all``, ``best``, ``worst`` or
``median`` (``best:3`` for several), or episode indices (``0,3,7``), several joined with
commas. Pass 2 asks three questions of it: are the returns needed to pick
(:attr:`VideoPick.needs_returns`), which episodes are known before any return
(:meth:`VideoPick.known_ahead`, so that pass 2 can start beside pass 1), and which
episodes, given the returns (:meth:`VideoPick.pick`). The text is read once, on first use;
a record holds what the user gave (``given``), which metadata.json keeps as it was given.

>>> VideoPick("best:2,0").picks
(('best', 2), ('index', 0))
>>> VideoPick("best").pick([1.0, 5.0, 3.0])
[1]
>>> VideoPick("0,2").known_ahead(3), VideoPick("median").known_ahead(3)
([0, 2], None)

May import: errors. Never: the rest of rolltape (config, the CLI and pass 2 all read it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Sequence, Union

from rolltape.errors import UsageError

#: What the command line (text), or the Python API (a count, or indices), gives ``--video``.
Given = Union[int, str, Sequence[int], None]

#: Picks that rank the episodes by their returns.
RANKED = ("best", "worst", "median")

#: What every refusal of an unknown word suggests instead.
HINT = ("use a count, 'all', 'best', 'worst', 'median' (best:3 for several) or episode "
        "indices like '0,3'.")

#: What asks for no video at all (the count 0, an empty selection).
NONE = (0, "0", "", "none", None, ())


@dataclass(frozen=True)
class VideoPick:
    """Which episodes of a run get a video. ``given`` is kept as given (indices as a
    tuple); its meaning, :attr:`picks`, is parsed on first use and refused then with one
    sentence (:meth:`check` is the place that asks first, before any work) naming
    ``flag``, the option that gave it (``--video``; export and branch say ``--pick``)."""

    given: int | str | tuple[int, ...] | None = 0
    flag: str = field(default="--video", compare=False)

    @classmethod
    def of(cls, value: VideoPick | Given, flag: str = "--video") -> VideoPick:
        """``value`` as a record (a record is kept as it is)."""
        if isinstance(value, VideoPick):
            return value
        if value is None or isinstance(value, (int, str)):
            return cls(value, flag)
        return cls(tuple(value), flag)

    @cached_property
    def picks(self) -> tuple[tuple[str, int], ...]:
        """("count", N), ("all", 0), ("index", i) or ("best" | "worst" | "median", how
        many), in the order given."""
        given = self.given
        if given is None:
            return ()
        if isinstance(given, int):
            if given < 0:
                raise UsageError(f"{self.flag} must be a count of 0 or more, got {given}.")
            return (("count", given),)
        if not isinstance(given, str):
            return tuple(("index", int(i)) for i in given)
        text = given.strip().lower()
        if text.isdigit():
            return (("count", int(text)),)
        picks = []
        for word in filter(None, (w.strip() for w in text.split(","))):
            name, colon, many = word.partition(":")
            if name in RANKED and (not colon or many.isdigit()):
                if colon and int(many) < 1:
                    raise UsageError(f"{self.flag} '{word}' picks no episode; {HINT}")
                picks.append((name, int(many) if colon else 1))
            elif word == "all":
                picks.append(("all", 0))
            elif word.lstrip("-").isdigit():
                picks.append(("index", int(word)))
            else:
                raise UsageError(f"{self.flag} '{given}' is not understood; {HINT}")
        return tuple(picks)

    @property
    def wanted(self) -> bool:
        """Whether any video is asked for (judged on what was given: no parsing)."""
        return self.given not in NONE

    @property
    def needs_returns(self) -> bool:
        """True when picking needs the episodes' returns (best, worst, median)."""
        return any(kind in RANKED for kind, _ in self.picks)

    def check(self, episodes: int) -> None:
        """Refuse, before any work, what is not understood or an index outside the run's
        ``episodes``."""
        for kind, i in self.picks:
            if kind == "index" and not 0 <= i < episodes:
                raise UsageError(f"{self.flag} asks for episode {i} but the run has episodes "
                                 f"0..{episodes - 1}.")

    def known_ahead(self, episodes: int) -> list[int] | None:
        """The episodes picked out of ``episodes``, sorted, each once, when no return is
        needed to pick them (a count, indices, all): pass 2 may then start while pass 1
        plays. None when the returns decide. Indices are as given (:meth:`check` refuses
        one outside the run; a suite's tasks may each have their own count)."""
        if self.needs_returns:
            return None
        return sorted({i for kind, k in self.picks
                       for i in (range(min(k, episodes)) if kind == "count" else
                                 range(episodes) if kind == "all" else [k])})

    def pick(self, returns: Sequence[float | None]) -> list[int]:
        """The episodes to render, given every episode's return (None: not a finite
        number, which is neither best nor worst), sorted, each once. Among equal returns
        the lowest index comes first."""
        n = len(returns)
        self.check(n)
        finite = {i: r for i in range(n) if (r := returns[i]) is not None}
        best = sorted(finite, key=lambda i: (-finite[i], i))
        worst = sorted(finite, key=lambda i: (finite[i], i))
        picked: list[int] = []
        for kind, k in self.picks:
            if kind == "count":
                picked.extend(range(min(k, n)))
            elif kind == "all":
                picked.extend(range(n))
            elif kind == "index":
                picked.append(k)
            elif kind == "best":
                picked.extend(best[:k])
            elif kind == "worst":
                picked.extend(worst[:k])
            else:  # the k episodes around the median return
                first = max(0, min((len(finite) - 1) // 2 - (k - 1) // 2, len(finite) - k))
                picked.extend(worst[first:first + k])
        return sorted(set(picked))
