"""The pass-1 worker's interpreter, started before the orchestrator's checks are done.

A small job's pass 1 waited for its checks (the output folder, the env's spec, a video's
size, in a probe process) and only then started an interpreter that spent seconds
importing torch and SB3. :func:`spawn_pass1_ahead` starts that interpreter first, with
those imports, so they run while the checks do; the executor's first pass-1 worker then
takes it (:func:`rolltape.interpreter.spawn_worker` matches it by target and
environment). Nothing of the run is in it until then: a check that fails stops it.

May import: the interpreter launcher, the pass-1 worker, policies (no torch at import). Never: torch (the child imports
it), the render side, outputs.
"""

from __future__ import annotations

from rolltape.interpreter import NO_GL, spawn_ahead
from rolltape.pass1.worker import policy_worker
from rolltape.policies import is_sb3_source


def pass1_imports(policy: str) -> list[str]:
    """What a pass-1 worker for ``policy`` imports before its first episode.

    >>> pass1_imports("sb3:ppo.zip")
    ['rolltape.pass1.worker', 'stable_baselines3']
    >>> pass1_imports("random")
    ['rolltape.pass1.worker']
    """
    return ["rolltape.pass1.worker"] + (["stable_baselines3"] if is_sb3_source(policy) else [])


def spawn_pass1_ahead(policy: str, local: bool) -> None:
    """Start the first pass-1 worker's interpreter for ``policy`` now when the executor
    runs workers on this machine (``local``); the run's pass 1 uses it (or
    :func:`rolltape.interpreter.discard_ahead` stops it)."""
    if local:
        spawn_ahead(policy_worker, env=NO_GL, preload=pass1_imports(policy))
