"""The executor contract: what an executor is handed, what it must do, and how one is chosen.

The orchestrator describes its work as plain data (:class:`ShareWork` for pass 1,
:class:`RenderWork` for pass 2): the entry point a worker process runs, the same work as a
function that runs anywhere and returns its files as bytes, and the variables each needs.
An :class:`Executor` runs that description and knows nothing else of it. It is picked once,
by name, with its options (:func:`get`); its capability flags tell the orchestrator what it
can do (warm render workers ahead of pass 1, split one long video across workers, ...)
so that no code above compares executor names.

A new executor is one module with a class that satisfies :class:`Executor` and a
:func:`register` call. Models: Gymnasium's ``VectorEnv`` (sync and async behind one
interface) and MuJoCo's GL context (one implementation, picked once).

May import: errors, the standard library. Never: the work (pass 1, pass 2, policies,
outputs) or the orchestrator.

>>> sorted(names())
['local', 'ray']
>>> get("local").runs_workers, get("ray", address="auto").runs_workers
(True, False)
>>> get("dask")
Traceback (most recent call last):
rolltape.errors.UsageError: --executor must be one of local, ray; got 'dask'.
>>> get("local", address="auto")
Traceback (most recent call last):
rolltape.errors.UsageError: --ray-address is an option of another executor; --executor local takes none.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, fields
from typing import Any, Callable, Generator, Iterable, Mapping, Protocol, Sequence

from rolltape.errors import UsageError

# (kind, payload) messages of pass-1-shaped work: ("episode", row), ("done", warnings), ...
Message = tuple[str, Any]


@dataclass(frozen=True)
class ShareWork:
    """Work dealt in shares, each reporting messages as it goes (pass 1).

    An executor runs it one of two ways: ``worker(share, *args, conn)`` in a fresh process
    per share, sending ``(kind, payload)`` over ``conn`` (``runs_workers`` executors); or
    ``task(piece)`` for each of ``cut(shares)``, anywhere, returning ``{"files": {path:
    bytes}, "messages": [...]}`` or ``{"usage_error": text}``, the files being written at
    their paths before the messages are yielded. ``task`` None: the work only runs as
    worker processes (batched inference keeps env processes of its own).

    ``deal`` (worker processes only): the same shares dealt piece by piece, so that no
    worker idles while another has work left. ``deal(k)`` is worker k's next piece, None
    when all is dealt; the worker starts on ``deal(k)`` (a piece of share k, which has
    work) instead of share k, and after each
    ("done", ...) reads its next piece (or None, then exits) from ``conn``."""

    worker: Callable[..., None]
    args: tuple[Any, ...]
    env: Mapping[str, str | None]
    task: Callable[[Any], dict[str, Any]] | None
    cut: Callable[[list[Any]], list[Any]]
    timeout: float  # a share that finishes no unit for this long fails the run
    units: tuple[str, ...]  # message kinds that count as one unit finished
    stalled: Callable[[int, int], str]  # (share, units done) -> what it was doing
    timeout_name: str = "its timeout"
    deal: Callable[[int], Any | None] | None = None


@dataclass(frozen=True)
class RenderWork:
    """Jobs that each need a backend (a GL library) tried in order (pass 2).

    ``worker(backend, *args, conn)`` is a process that takes ``(i, job)`` messages and
    answers ("progress", i, n), ("done", i, result), ("backend_failed", i, why),
    ("usage_error", i, text) or ("error", i, text); ``task(backend, job, ship(job))`` does
    one job anywhere and returns ``(kind, payload, files)``. ``environment(backend,
    workers)`` gives a worker's variables; ``needs_backend[i]`` False runs job i with none.
    ``cwd_on_path``: a worker may import from the current folder (the user named a module
    there). ``python``: the interpreter a worker process runs (a benchmark venv's, whose
    simulator release the tapes need), None for this one's; only where workers run here."""

    worker: Callable[..., None]
    args: tuple[Any, ...]
    task: Callable[..., tuple[str, Any, Any]]
    ship: Callable[[Any], Any]
    environment: Callable[[str | None, int], dict[str, str]]
    needs_backend: Sequence[bool]
    cwd_on_path: bool = True
    python: str | None = None


class Fallback(Protocol):
    """Which backend each job ran on and why others failed (BackendFallback)."""

    failures: dict[int, list[tuple[str, str]]]
    dead: dict[str, str]

    def problem(self) -> str | None: ...


class Pool(Protocol):
    """Render jobs under way: :meth:`run` them all; then ``fallback`` and ``errors`` say
    what failed, (job, kind, text) for each job a worker refused or raised on."""

    fallback: Fallback
    errors: list[tuple[int, str, str]]

    def run(self) -> None: ...


class Executor(Protocol):
    """Where the work runs. Capability flags:

    - ``runs_workers``: runs a :class:`ShareWork`'s worker processes on this machine, so
      worker counts have this machine's limit and work with ``task`` None (batched
      inference) can run;
    - ``warms_workers``: render workers may start before their jobs are known (while
      pass 1 plays), and pass 2 may run beside pass 1;
    - ``splits_segments``: one long video may be cut across several workers and joined;
    - ``shares_disk``: workers write files where asked (else their files come back as
      bytes, and outputs are checked here before any job starts)."""

    name: str
    runs_workers: bool
    warms_workers: bool
    splits_segments: bool
    shares_disk: bool

    def check(self) -> None:
        """Make sure it can run (connect to a cluster, ...), or raise UsageError."""

    def run_shares(self, work: ShareWork, shares: Sequence[Any]) -> Generator[Message, None, None]:
        """Run every share; yield their messages as they come. Raises UsageError for a
        share's ``usage_error``, RunFailed for a failure; stops everything it started
        when the generator ends, however it ends."""

    def render_pool(self, work: RenderWork, jobs: Sequence[Any], order: Sequence[str],
                    workers: int, timeout: float, *,
                    on_progress: Callable[[int, int], None],
                    on_done: Callable[[int, Any], None], cancel: Any = None,
                    warm: Sequence[Any] = ()) -> Pool:
        """A pool that runs ``jobs`` on up to ``workers`` workers, a job retried on the
        next backend of ``order`` when its backend crashes, hangs (``timeout`` s) or fails
        (the one rule: :class:`~rolltape.executors.fallback.BackendFallback`)."""

    def warm_render_workers(self, work: RenderWork, backend: str, workers: int
                            ) -> list[Any]:
        """Start render workers on ``backend`` ahead of their jobs (``warms_workers``
        executors; others return [])."""


# name -> "module:Class", imported when asked for (Ray's module stays unimported).
_REGISTRY: dict[str, str | Callable[..., Executor]] = {
    "local": "rolltape.executors.local:LocalExecutor",
    "ray": "rolltape.executors.ray:RayExecutor",
}

def register(name: str, factory: Callable[..., Executor]) -> None:
    """Make ``factory(**options)`` the executor called ``name`` (``--executor name``)."""
    _REGISTRY[name] = factory


def names() -> list[str]:
    return list(_REGISTRY)


def _factory(name: str) -> Callable[..., Executor]:
    factory = _REGISTRY[name]
    if isinstance(factory, str):
        module, _, attr = factory.partition(":")
        factory = getattr(importlib.import_module(module), attr)
    return factory


def _spelled(records: Iterable[type]) -> dict[str, str]:
    """Each option of ``records`` by field name, as the command line spells it."""
    return {f.name: f.metadata["flag"].name(f.name) for r in records for f in fields(r)}


def option_records() -> list[type]:
    """The records of the registered executors' own options (their ``OPTIONS``: a
    dataclass of ``flags.flag`` fields), which every verb taking ``--executor`` offers."""
    records = (getattr(_factory(name), "OPTIONS", None) for name in _REGISTRY)
    return [r for r in records if r is not None]


def get(name: str, **options: Any) -> Executor:
    """The executor ``name`` with ``options`` (``address``, ``render_gpus`` for Ray),
    checked as it is built: an unknown name or an option it does not take is one
    sentence."""
    if name not in _REGISTRY:
        raise UsageError(f"--executor must be one of {', '.join(_REGISTRY)}; got '{name}'.")
    factory = _factory(name)
    record = getattr(factory, "OPTIONS", None)
    own = _spelled([record] if record is not None else [])
    extra = [k for k in options if k not in own]
    if extra:
        others = _spelled(r for r in option_records() if r is not record)
        flags = ", ".join(others.get(k, k) for k in extra)
        raise UsageError(f"{flags} is an option of another executor; --executor {name} "
                         f"takes {', '.join(own.values()) or 'none'}.")
    return factory(**options)
