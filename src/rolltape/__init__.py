"""rolltape: evaluate RL policies with rendering off, record every episode as a tape, and
render the tapes in isolated processes, checking that each replay earns what pass 1 earned.

The package face is lazy: ``import rolltape.pass2.replay`` (what a render worker runs)
must not import the orchestrator or the policy side, so the names below are loaded on first
use. Nothing here imports torch or OpenGL.

Example (not run: it evaluates a checkpoint):
    >>> import rolltape
    >>> run = rolltape.evaluate("HalfCheetah-v5", "sb3:ppo.zip", vecnormalize="vn.pkl",
    ...                         episodes=30, baseline="random", video=1, out="runs/cheetah")
    >>> tape = rolltape.Tape.load(run.path / "tapes" / "policy-0000.npz")
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> the module that defines it
_API = {
    "DivergenceError": "rolltape.errors", "UsageError": "rolltape.errors",
    "RunFailed": "rolltape.errors", "Interrupted": "rolltape.errors",
    "RunResult": "rolltape.evaluation", "evaluate": "rolltape.evaluation",
    "Run": "rolltape.record", "Episode": "rolltape.record", "EpisodeKey": "rolltape.record",
    "RenderRequest": "rolltape.pass2.request", "RenderResult": "rolltape.pass2.request",
    "render": "rolltape.rendering", "export": "rolltape.datasets", "Tape": "rolltape.tape",
    "RecordTape": "rolltape.training.record_tape",
}
# name -> a module given as an attribute: ``rolltape.sb3.TapeCallback`` (imports SB3 on use;
# ``from rolltape.sb3 import TapeCallback`` finds the same module as a file)
_MODULES = {"sb3": "rolltape.sb3"}
__all__ = sorted(_API) + sorted(_MODULES) + ["__version__"]


def __getattr__(name: str) -> Any:
    if name in _API:
        value = getattr(importlib.import_module(_API[name]), name)
        globals()[name] = value  # once loaded, a plain attribute
        return value
    if name in _MODULES:
        module = importlib.import_module(_MODULES[name])
        globals()[name] = module
        return module
    raise AttributeError(f"module 'rolltape' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
