"""Executors: where jobs run (fresh local processes, or Ray). They start the entry point
they are given and know nothing of what it does. :mod:`rolltape.executors.base` is the
contract; ``get(name, **options)`` picks one, once.

May import: the launcher, errors (Ray: the job types it ships). Never: the orchestrator.
"""

from rolltape.executors.base import Executor, RenderWork, ShareWork, get, names, register

__all__ = ["Executor", "RenderWork", "ShareWork", "get", "names", "register"]
